/* The ignore list (contract §5.1): names list_dir, glob and grep prune below their root. */
#ifndef SBX_IGNORE_H
#define SBX_IGNORE_H

#include <stdbool.h>
#include <stddef.h>

/* True if one path segment (len bytes, need not be NUL-terminated) matches one of the 50
 * ignore patterns, with fnmatch semantics (no flags: '*' matches a leading dot), byte-wise and
 * case-sensitive. */
bool sbx__search_ignored_segment(const char *segment, size_t len);
/* True if any non-empty '/'-separated segment of a relative path is ignored. (Unlike DeerFlow's
 * should_ignore_path, '\' is not a separator: it is an ordinary byte in a Linux file name.) */
bool sbx__search_ignored_path(const char *rel_path);

#endif
