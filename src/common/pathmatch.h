/* Path patterns (contract §5.2): sbx__path_matches, and the compiled form the walker (walk.h)
 * steps through a tree one directory at a time. Its contract, checked against a reference
 * implementation: fuzz/fuzz_path_matches.c and the unit tests. */
#ifndef SBX_PATHMATCH_H
#define SBX_PATHMATCH_H

#include <stdbool.h>
#include <stddef.h>

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
bool sbx__path_matches(const char *pattern, const char *rel_path);

/* A compiled pattern. Unanchored (no '/'): one segment tested against the basename. Anchored:
 * segments matched one path segment each, "**" (seg[i] == NULL) zero or more whole segments,
 * run as an NFA over the set of pattern positions, so the cost is O(segments x path depth)
 * whatever the number of "**". */
typedef struct {
  char *buf;
  char **seg;
  bool *ascii;
  size_t n;
  bool anchored;
  bool never; /* matches nothing (empty, a leading '/') */
} sbx_pathpat_t;

/* pattern NULL or "" gives a pattern that never matches. */
void sbx__pathpat_init(sbx_pathpat_t *pp, const char *pattern);
void sbx__pathpat_fini(sbx_pathpat_t *pp);
/* Anchored patterns: st has n+1 slots; the states before any segment. */
void sbx__pathpat_start(const sbx_pathpat_t *pp, bool *st);
/* Consumes one path segment (in -> out); returns whether any state is still alive. */
bool sbx__pathpat_step(const sbx_pathpat_t *pp, const bool *in, const char *name, bool *out);
/* Unanchored patterns: does the basename match? */
bool sbx__pathpat_match_basename(const sbx_pathpat_t *pp, const char *name);

#endif
