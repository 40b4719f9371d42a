/* DeerFlow's search semantics (docs: ../shared/docs/contract.md §1.6-1.8 and §5), implemented
 * natively: the ignore list, path_matches, list_dir, glob and grep with the limit+1 truncation
 * rule. Shared by sbx-init (which walks the sandbox's own tree) and libsbx.
 *
 * Walk rules common to list_dir, glob and grep:
 * - The root may be reached through a symlink (like `find -H`); below it symlinks are never
 *   followed and never reported. Everything below the root is opened relative to its parent's
 *   fd with O_NOFOLLOW; path strings are only built for reporting.
 * - Only directories and regular files are reported or searched (no fifos, sockets, devices).
 * - Entries are visited depth-first, top-down, each directory's entries in byte order (strcmp);
 *   so answers are deterministic and equal across backends.
 * - Ignored names (sbx_search_ignored_segment) are pruned only below the root.
 * - Unreadable directories and files, and files that vanish, are skipped silently.
 * - Reported paths are the root string without its trailing '/'s (root "/" stays "/"), then
 *   '/', then the path below the root.
 * - Results are appended to *out; on error (return -1, *err set) *out is left as it was.
 * - *truncated is set when a match was dropped by the limit+1 rule, and also when the walk was
 *   cut short: a deadline (sbx_now_ms() clock, 0 = none) passed or the caller went away
 *   (sbx_search_set_cancel_fd), a directory at depth
 *   SBX_SEARCH_MAX_DEPTH would have been entered, or fds/memory ran out (EMFILE, ENFILE,
 *   ENOMEM). The answer is then possibly incomplete, never wrong.
 * - Thread-safe: no global state besides two locales created once (pthread_once); locales are
 *   switched per thread with uselocale, never setlocale. */
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
#define SBX_SEARCH_MAX_DEPTH 256          /* directories this deep (root = 0) are not entered */

/* How list_dir, glob and grep open their root (flags as for open(2); returns an fd or -1 with
 * errno). open(2) by default; sbx-init installs one that resolves inside the sandbox's root and
 * refuses magic links (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so a root such as
 * /proc/self/fd/N, or a symlink planted to it, never reaches a descriptor sbx-init holds. Set it
 * once, before any thread searches. */
extern int (*sbx_search_open_root)(const char *path, int flags);

/* The calling thread's searches stop, as at their deadline, once the peer of this connected
 * socket hangs up (polled every 20 ms); -1 (the default) = none. sbx-init sets its client's
 * connection, so a search whose client gave up does not run on. */
void sbx_search_set_cancel_fd(int fd);

/* True if one path segment (len bytes, need not be NUL-terminated) matches one of the 50
 * ignore patterns, with fnmatch semantics (no flags: '*' matches a leading dot), byte-wise and
 * case-sensitive. */
bool sbx_search_ignored_segment(const char *segment, size_t len);
/* True if any non-empty '/'-separated segment of a relative path is ignored. (Unlike DeerFlow's
 * should_ignore_path, '\' is not a separator: it is an ordinary byte in a Linux file name.) */
bool sbx_search_ignored_path(const char *rel_path);

/* contract §5.2: a pattern without '/' matches the last segment (basename) at any depth; with
 * '/', anchored segment by segment, "**" = zero or more whole segments; a leading '/' never
 * matches; a trailing '/' is dropped ("src/" is the basename pattern "src"); an empty (or NULL)
 * pattern matches nothing.
 * Each segment is matched with fnmatch(3) without flags: '*', '?', '[...]' never cross '/', '*'
 * matches a leading dot, '\' escapes, case-sensitive; '?' and brackets see UTF-8 code points
 * (C.UTF-8), falling back to bytes for ill-formed names. "**" is special only as a whole segment
 * of an anchored pattern ("a**" is fnmatch's "a*"). Empty segments ("a//b") are ignored on both
 * sides; a rel_path without a non-empty segment matches nothing. The "**" matcher is an NFA over
 * pattern positions: O(pattern segments x path segments) fnmatch calls at worst. */
bool sbx_path_matches(const char *pattern, const char *rel_path);

/* list_dir: the entries below path down to max_depth (1 = children), absolute, directories with
 * a trailing '/', sorted by strcmp on those strings, the root itself excluded. max_depth 0 gives
 * an empty list (the root is still checked). At most max_entries: the walk stops at
 * max_entries + 1 and reports *truncated; since it visits entries in output order, what is kept
 * is the first max_entries of the full sorted answer. A missing path is SBX_E_NOT_FOUND
 * ("directory not found: P"), a non-directory SBX_E_NOT_DIR ("not a directory: P"), a negative
 * depth SBX_E_INVALID ("max_depth must be non-negative"). */
int sbx_search_list_dir(const char *path, int max_depth, size_t max_entries, uint64_t deadline_ms,
                        sbx_strv_t *out, bool *truncated, sbx_error_t *err);

/* glob: absolute paths whose path relative to root matches pattern (sbx_path_matches); files,
 * and directories too with include_dirs (no trailing '/'). Order = os.walk top-down: for each
 * directory, its matching subdirectories (include_dirs), then its matching files, then its
 * subdirectories recursively; an anchored pattern prunes subdirectories it can no longer match.
 * Limit+1 rule: the walk stops at max_results + 1 matches; *truncated only when a match was
 * dropped (exactly max_results matches is complete); max_results 0 gives [] and truncated if
 * anything matched. A missing root is SBX_E_NOT_FOUND ("directory not found: P"), a file
 * SBX_E_NOT_DIR ("not a directory: P"). */
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

/* Appends a copy of path and of line[0..len) as given (callers pass a summary). */
void sbx_search_matches_push(sbx_grep_matches_t *m, const char *path, uint64_t line_number,
                             const char *line, size_t len);
void sbx_search_matches_free(sbx_grep_matches_t *m);

/* A compiled grep pattern: POSIX ERE (glibc regcomp, REG_EXTENDED|REG_NEWLINE, so GNU's \w \s
 * \b \< \> and back-references work; UTF-8 aware through a per-thread C.UTF-8 locale), or a
 * fixed string with literal. Case-insensitive unless case_sensitive: REG_ICASE (Unicode case
 * folding) for regexes and non-ASCII literals, ASCII folding for ASCII literals. A bad regex is
 * SBX_E_INVALID: "invalid regular expression '<pattern>': <regerror text>". A literal never
 * fails. A pattern object keeps a scratch buffer: use one per thread. */
typedef struct sbx_grep_pattern_s sbx_grep_pattern_t;
sbx_grep_pattern_t *sbx_grep_pattern_new(const char *pattern, bool literal, bool case_sensitive,
                                         sbx_error_t *err);
/* line: one line without its '\n' (need not be NUL-terminated; may hold NULs). A trailing '\r'
 * is not part of the line and ill-formed UTF-8 reads as U+FFFD, as in the lines grep reports, so
 * "x$" matches "x\r". */
bool sbx_grep_pattern_match(sbx_grep_pattern_t *p, const char *line, size_t len);
void sbx_grep_pattern_free(sbx_grep_pattern_t *p);

/* The summary of one line as grep reports it (trailing \r removed, invalid UTF-8 replaced by
 * U+FFFD, one per maximal ill-formed subsequence as Python's errors='replace', cut to 197 code
 * points + "..." past 200). Returns NULL if the line is over 2000 code points (such lines are
 * skipped). A NUL byte in the line ends the returned string. */
char *sbx_grep_summarize_line(const char *line, size_t len);

/* grep: lines matching pattern in the text files under root (or root itself if it is a file;
 * then glob is tested against its basename and matches report root as given). Files over
 * 1,000,000 bytes and binary files (a NUL in the first 8192 bytes, or unreadable) are skipped,
 * as are lines over 2000 code points. Lines are split on '\n' only; a match never spans lines.
 * glob (NULL or "" = no filter) filters files by sbx_path_matches on the path relative to root.
 * Files are visited in glob's order, lines in file order. Limit+1 rule as for glob. A bad regex
 * is SBX_E_INVALID (checked first), a missing root SBX_E_NOT_FOUND ("path not found: P").
 * The deadline holds inside a line too: a regex with back-references (which glibc matches by
 * backtracking, exponential in the line) is run in a forked worker process, killed at the
 * deadline; any other regex is run as glibc's DFA (REG_NOSUB), polynomial, over bounded ranges
 * with the deadline looked at between them. Either way a search cut short is truncated. */
int sbx_search_grep(const char *root, const char *pattern, const char *glob, bool literal,
                    bool case_sensitive, size_t max_results, uint64_t deadline_ms,
                    sbx_grep_matches_t *out, bool *truncated, sbx_error_t *err);

#endif
