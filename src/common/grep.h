/* grep over files (contract §1.8): sbx__search_grep and the lines it reports. The walk rules of
 * search.h apply. */
#ifndef SBX_GREP_H
#define SBX_GREP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "grep_pattern.h"

#define SBX_SEARCH_MAX_FILE_BYTES 1000000 /* grep skips larger files */
#define SBX_SEARCH_BINARY_PROBE 8192      /* a NUL in the first 8192 bytes = binary */
#define SBX_SEARCH_MAX_LINE_CHARS 2000    /* grep skips longer lines (code points) */
#define SBX_SEARCH_SUMMARY_CHARS 200      /* longer lines: first 197 code points + "..." */

typedef struct {
  char *path;           /* absolute */
  uint64_t line_number; /* 1-based */
  char *line;           /* valid UTF-8, trailing \r\n removed, cut to 197 code points + "..." */
} sbx_grep_match_t;

typedef struct sbx_grep_matches_s {
  sbx_grep_match_t *v;
  size_t n;
  size_t cap;
} sbx_grep_matches_t;

/* Appends a copy of path and of line[0..len) as given (callers pass a summary). */
void sbx__search_matches_push(sbx_grep_matches_t *m, const char *path, uint64_t line_number,
                              const char *line, size_t len);
void sbx__search_matches_free(sbx_grep_matches_t *m);

/* The summary of one line as grep reports it (trailing \r removed, invalid UTF-8 replaced by
 * U+FFFD, one per maximal ill-formed subsequence as Python's errors='replace', cut to 197 code
 * points + "..." past 200). Returns NULL if the line is over 2000 code points (such lines are
 * skipped). A NUL byte in the line ends the returned string. */
char *sbx__grep_summarize_line(const char *line, size_t len);

/* grep: lines matching pattern in the text files under root (or root itself if it is a file;
 * then glob is tested against its basename and matches report root as given). Files over
 * 1,000,000 bytes and binary files (a NUL in the first 8192 bytes, or unreadable) are skipped,
 * as are lines over 2000 code points. Lines are split on '\n' only; a match never spans lines.
 * glob (NULL or "" = no filter) filters files by sbx__path_matches on the path relative to root.
 * Files are visited in glob's order, lines in file order. Limit+1 rule as for glob. A bad regex
 * is SBX_E_INVALID (checked first), a missing root SBX_E_NOT_FOUND ("path not found: P").
 * The deadline holds inside a line too: a regex with back-references (which glibc matches by
 * backtracking, exponential in the line) is run in a forked worker process, killed at the
 * deadline; any other regex is run as glibc's DFA (REG_NOSUB), polynomial, over bounded ranges
 * with the deadline looked at between them. Either way a search cut short is truncated. */
int sbx__search_grep(const char *root, const char *pattern, const char *glob, bool literal,
                     bool case_sensitive, size_t max_results, uint64_t deadline_ms,
                     sbx_grep_matches_t *out, bool *truncated, sbx_error_t *err);

#endif
