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
 * - Ignored names (sbx__search_ignored_segment) are pruned only below the root.
 * - Unreadable directories and files, and files that vanish, are skipped silently.
 * - Reported paths are the root string without its trailing '/'s (root "/" stays "/"), then
 *   '/', then the path below the root.
 * - Results are appended to *out; on error (return -1, *err set) *out is left as it was.
 * - *truncated is set when a match was dropped by the limit+1 rule, and also when the walk was
 *   cut short: a deadline (sbx__now_ms() clock, 0 = none) passed or the caller went away
 *   (sbx__search_set_cancel_fd), a directory at depth
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
#include "grep.h"
#include "grep_pattern.h"
#include "ignore.h"
#include "pathmatch.h"
#include "util.h"
#include "walk.h"

/* include/sbx/sbx.h's SBX_SEARCH_TIMEOUT and SBX_SEARCH_TIMEOUT_MAX in ms, for sbx-init (which
 * includes no public header; src/lib/contract.c checks that they agree) */
#define SBX_SEARCH_DEFAULT_MS (30 * 1000)
#define SBX_SEARCH_TIMEOUT_MAX_MS (590 * 1000)

/* list_dir: the entries below path down to max_depth (1 = children), absolute, directories with
 * a trailing '/', sorted by strcmp on those strings, the root itself excluded. max_depth 0 gives
 * an empty list (the root is still checked). At most max_entries: the walk stops at
 * max_entries + 1 and reports *truncated; since it visits entries in output order, what is kept
 * is the first max_entries of the full sorted answer. A missing path is SBX_E_NOT_FOUND
 * ("directory not found: P"), a non-directory SBX_E_NOT_DIR ("not a directory: P"), a negative
 * depth SBX_E_INVALID ("max_depth must be non-negative"). */
int sbx__search_list_dir(const char *path, int max_depth, size_t max_entries, uint64_t deadline_ms,
                         sbx_strv_t *out, bool *truncated, sbx_error_t *err);

/* glob: absolute paths whose path relative to root matches pattern (sbx__path_matches); files,
 * and directories too with include_dirs (no trailing '/'). Order = os.walk top-down: for each
 * directory, its matching subdirectories (include_dirs), then its matching files, then its
 * subdirectories recursively; an anchored pattern prunes subdirectories it can no longer match.
 * Limit+1 rule: the walk stops at max_results + 1 matches; *truncated only when a match was
 * dropped (exactly max_results matches is complete); max_results 0 gives [] and truncated if
 * anything matched. A missing root is SBX_E_NOT_FOUND ("directory not found: P"), a file
 * SBX_E_NOT_DIR ("not a directory: P"). */
int sbx__search_glob(const char *root, const char *pattern, bool include_dirs, size_t max_results,
                     uint64_t deadline_ms, sbx_strv_t *out, bool *truncated, sbx_error_t *err);

#endif
