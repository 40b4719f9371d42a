/* path_matches (contract §5.2) and the compiled path patterns the walker matches with: see
 * pathmatch.h. */
#include "pathmatch.h"
#include "text.h"
#include "util.h"

#include <fnmatch.h>
#include <locale.h>
#include <string.h>

/* fnmatch(3) without flags (no FNM_PATHNAME, no FNM_PERIOD: '*' matches a leading dot; '\\'
 * escapes), case-sensitive. Pure ASCII runs in the C locale (fast path, same answer); anything
 * else in C.UTF-8 so '?' and brackets match code points, with a byte-wise retry should glibc
 * ever reject the input as invalid multibyte text. */
static bool seg_fnmatch(const char *pat, bool pat_ascii, const char *str)
{
  bool ascii = pat_ascii && sbx__str_ascii(str);
  locale_t old = uselocale(ascii ? sbx__locale_c() : sbx__locale_utf8());
  int r = fnmatch(pat, str, 0);
  if (r != 0 && r != FNM_NOMATCH && !ascii) {
    uselocale(sbx__locale_c());
    r = fnmatch(pat, str, 0);
  }
  uselocale(old);
  return r == 0;
}

void sbx__pathpat_init(sbx_pathpat_t *pp, const char *pattern)
{
  memset(pp, 0, sizeof *pp);
  if (pattern == NULL || pattern[0] == '\0' || pattern[0] == '/') {
    pp->never = true;
    return;
  }
  size_t len = strlen(pattern);
  while (len > 0 && pattern[len - 1] == '/')
    len--;
  pp->buf = xstrndup(pattern, len);
  pp->anchored = memchr(pp->buf, '/', len) != NULL;
  size_t max_segs = 1;
  for (size_t i = 0; i < len; i++)
    if (pp->buf[i] == '/')
      max_segs++;
  pp->seg = xreallocarray(NULL, max_segs, sizeof(char *));
  pp->ascii = xreallocarray(NULL, max_segs, sizeof(bool));
  char *s = pp->buf;
  for (;;) {
    char *e = strchrnul(s, '/');
    bool last = *e == '\0';
    *e = '\0';
    if (*s) {
      pp->seg[pp->n] = strcmp(s, "**") == 0 && pp->anchored ? NULL : s;
      pp->ascii[pp->n] = sbx__str_ascii(s);
      pp->n++;
    }
    if (last)
      break;
    s = e + 1;
  }
  if (pp->n == 0)
    pp->never = true;
}

void sbx__pathpat_fini(sbx_pathpat_t *pp)
{
  free(pp->buf);
  free(pp->seg);
  free(pp->ascii);
  memset(pp, 0, sizeof *pp);
}

/* st has n+1 slots; st[n] = the whole pattern has been consumed. */
static void pathpat_closure(const sbx_pathpat_t *pp, bool *st)
{
  for (size_t i = 0; i < pp->n; i++)
    if (st[i] && pp->seg[i] == NULL)
      st[i + 1] = true;
}

void sbx__pathpat_start(const sbx_pathpat_t *pp, bool *st)
{
  memset(st, 0, pp->n + 1);
  st[0] = true;
  pathpat_closure(pp, st);
}

/* Consumes one path segment; returns whether any state is still alive. */
bool sbx__pathpat_step(const sbx_pathpat_t *pp, const bool *in, const char *name, bool *out)
{
  memset(out, 0, pp->n + 1);
  bool alive = false;
  for (size_t i = 0; i < pp->n; i++) {
    if (!in[i])
      continue;
    if (pp->seg[i] == NULL) {
      out[i] = true;
      alive = true;
    } else if (seg_fnmatch(pp->seg[i], pp->ascii[i], name)) {
      out[i + 1] = true;
      alive = true;
    }
  }
  if (alive)
    pathpat_closure(pp, out);
  return alive;
}

bool sbx__pathpat_match_basename(const sbx_pathpat_t *pp, const char *name)
{
  return !pp->never && seg_fnmatch(pp->seg[0], pp->ascii[0], name);
}

/* Runs a compiled pattern over a relative path (modified in place: '/' become NULs). Empty
 * segments are skipped; a path without a non-empty segment matches nothing. */
static bool pathpat_match_path(const sbx_pathpat_t *pp, char *path)
{
  if (pp->never)
    return false;
  if (!pp->anchored) {
    size_t len = strlen(path);
    while (len > 0 && path[len - 1] == '/')
      path[--len] = '\0';
    if (len == 0)
      return false;
    char *base = strrchr(path, '/');
    return sbx__pathpat_match_basename(pp, base ? base + 1 : path);
  }
  cleanup_free bool *a = xmalloc(pp->n + 1);
  cleanup_free bool *b = xmalloc(pp->n + 1);
  sbx__pathpat_start(pp, a);
  bool any = false;
  char *s = path;
  for (;;) {
    char *e = strchrnul(s, '/');
    bool last = *e == '\0';
    *e = '\0';
    if (*s) {
      any = true;
      if (!sbx__pathpat_step(pp, a, s, b))
        return false;
      bool *t = a;
      a = b;
      b = t;
    }
    if (last)
      break;
    s = e + 1;
  }
  return any && a[pp->n];
}

bool sbx__path_matches(const char *pattern, const char *rel_path)
{
  if (rel_path == NULL)
    return false;
  sbx_pathpat_t pp;
  sbx__pathpat_init(&pp, pattern);
  cleanup_free char *path = pp.never ? NULL : xstrdup(rel_path);
  bool ok = path != NULL && pathpat_match_path(&pp, path);
  sbx__pathpat_fini(&pp);
  return ok;
}
