/* DeerFlow's search semantics (docs: ../shared/docs/contract.md §1.6-1.8 and §5), implemented
 * natively: the ignore list, path_matches, list_dir, glob and grep with the limit+1 truncation
 * rule. Shared by sbx-init (which walks the sandbox's own tree) and libsbx.
 *
 * Walk rules common to list_dir, glob and grep:
 * - The root may be reached through a symlink (like `find -H`); below it symlinks are never
 *   followed and never reported.
 * - Entries are visited depth-first, top-down, each directory's entries in byte order (strcmp);
 *   so answers are deterministic and equal across backends.
 * - Ignored names (sbx_search_ignored_segment) are pruned only below the root.
 * - Unreadable directories and files that vanish are skipped.
 * - A deadline (sbx_now_ms() clock, 0 = none) stops the walk; the result is then truncated. */
#ifndef SBX_SEARCH_H
#define SBX_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

#define SBX_SEARCH_MAX_FILE_BYTES 1000000 /* grep skips larger files */
#define SBX_SEARCH_BINARY_PROBE 8192      /* a NUL in the first 8192 bytes = binary */
#define SBX_SEARCH_MAX_LINE_CHARS 2000    /* grep skips longer lines (code points) */
#define SBX_SEARCH_SUMMARY_CHARS 200      /* longer lines: first 197 code points + "..." */
#define SBX_SEARCH_MAX_DEPTH 256          /* deeper directories are not entered */

/* True if one path segment matches one of the 50 ignore patterns (fnmatch, case-sensitive). */
bool sbx_search_ignored_segment(const char *segment, size_t len);
/* True if any non-empty segment of a relative path is ignored. */
bool sbx_search_ignored_path(const char *rel_path);

/* contract §5.2: a pattern without '/' matches the last segment (basename) at any depth; with
 * '/', anchored segment by segment, "**" = zero or more whole segments; a leading '/' never
 * matches; a trailing '/' is dropped; an empty pattern matches nothing. */
bool sbx_path_matches(const char *pattern, const char *rel_path);

/* list_dir: the entries below path down to max_depth (1 = children), absolute, directories with
 * a trailing '/', sorted. At most max_entries (then *truncated). A missing path is
 * SBX_E_NOT_FOUND, a non-directory SBX_E_NOT_DIR, a negative depth SBX_E_INVALID. */
int sbx_search_list_dir(const char *path, int max_depth, size_t max_entries, uint64_t deadline_ms,
                        sbx_strv_t *out, bool *truncated, sbx_error_t *err);

/* glob: absolute paths whose path relative to root matches pattern; files, and directories too
 * with include_dirs (a directory's subdirectories are tested before its files). Limit+1 rule:
 * *truncated only when a match was dropped; max_results 0 gives [] and truncated if anything
 * matched. A missing root is SBX_E_NOT_FOUND, a file SBX_E_NOT_DIR. */
int sbx_search_glob(const char *root, const char *pattern, bool include_dirs, size_t max_results,
                    uint64_t deadline_ms, sbx_strv_t *out, bool *truncated, sbx_error_t *err);

typedef struct {
  char *path;           /* absolute */
  uint64_t line_number; /* 1-based */
  char *line;           /* valid UTF-8, trailing \r\n removed, cut to 197 code points + "..." */
} sbx_grep_match_t;

typedef struct {
  sbx_grep_match_t *v;
  size_t n;
  size_t cap;
} sbx_grep_matches_t;

void sbx_grep_matches_push(sbx_grep_matches_t *m, const char *path, uint64_t line_number,
                           const char *line, size_t len);
void sbx_grep_matches_free(sbx_grep_matches_t *m);

/* A compiled grep pattern: POSIX ERE (glibc regex, UTF-8 aware), or a fixed string with
 * literal; case-insensitive unless case_sensitive. A bad regex is SBX_E_INVALID naming it. */
typedef struct sbx_grep_pattern_s sbx_grep_pattern_t;
sbx_grep_pattern_t *sbx_grep_pattern_new(const char *pattern, bool literal, bool case_sensitive,
                                         sbx_error_t *err);
bool sbx_grep_pattern_match(sbx_grep_pattern_t *p, const char *line, size_t len);
void sbx_grep_pattern_free(sbx_grep_pattern_t *p);

/* The summary of one line as grep reports it (trailing \r removed, invalid UTF-8 replaced by
 * U+FFFD, cut to 197 code points + "..." past 200). Returns NULL if the line is over 2000 code
 * points (such lines are skipped). */
char *sbx_grep_summarize_line(const char *line, size_t len);

/* grep: lines matching pattern in the text files under root (or root itself if it is a file;
 * then glob is tested against its basename). Files over 1,000,000 bytes and binary files are
 * skipped, as are lines over 2000 code points. glob (may be NULL) filters files by
 * sbx_path_matches on the path relative to root. Limit+1 rule as for glob. */
int sbx_search_grep(const char *root, const char *pattern, const char *glob, bool literal,
                    bool case_sensitive, size_t max_results, uint64_t deadline_ms,
                    sbx_grep_matches_t *out, bool *truncated, sbx_error_t *err);

#endif
