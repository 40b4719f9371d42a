/* libFuzzer target for sbx__path_matches and the ignore checks (src/common/pathmatch.c,
 * ignore.c).
 *
 * Input: pattern, a NUL byte, then the path (cut at its next NUL). Besides crashes, sanitizer
 * reports and time-outs (the "**" matcher must stay polynomial), it checks the contract:
 * - an empty pattern or a leading '/' never matches; a trailing '/' is dropped;
 * - an anchored pattern that matches also matches behind a leading "**" segment;
 * - on ASCII input, the result equals a naive reference (fnmatch on the basename, or a
 *   recursive segment matcher for short anchored cases), and the ignore table equals fnmatch(3)
 *   over the 50 DeerFlow patterns.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc/common \
 *          fuzz/fuzz_path_matches.c src/common/{pathmatch,ignore,text}.c src/common/util.c \
 *          src/common/error.c
 * Run:   ./a.out fuzz/corpus/path_matches */
#include <fnmatch.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const ignore_list[50] = {
    ".git",        ".svn",         ".hg",
    ".bzr",        "node_modules", "__pycache__",
    ".venv",       "venv",         ".env",
    "env",         ".tox",         ".nox",
    ".eggs",       "*.egg-info",   "site-packages",
    "dist",        "build",        ".next",
    ".nuxt",       ".output",      ".turbo",
    "target",      "out",          ".idea",
    ".vscode",     "*.swp",        "*.swo",
    "*~",          ".project",     ".classpath",
    ".settings",   ".DS_Store",    "Thumbs.db",
    "desktop.ini", "*.lnk",        "*.log",
    "*.tmp",       "*.temp",       ".upload-*.part",
    "*.bak",       "*.cache",      ".cache",
    "logs",        ".coverage",    "coverage",
    ".nyc_output", "htmlcov",      ".pytest_cache",
    ".mypy_cache", ".ruff_cache",
};

#define MAX_SEGS 8

static bool is_ascii(const char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s >= 0x80)
      return false;
  return true;
}

/* Splits s in place on '/', skipping empty segments; returns the count, or -1 if over max. */
static int split(char *s, char **segs, int max)
{
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(s, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (n == max)
      return -1;
    segs[n++] = t;
  }
  return n;
}

/* Exponential but obviously right, for a handful of segments. */
static bool ref_match(char **ps, int np, char **ss, int ns)
{
  if (np == 0)
    return ns == 0;
  if (strcmp(ps[0], "**") == 0)
    return ref_match(ps + 1, np - 1, ss, ns) || (ns > 0 && ref_match(ps, np, ss + 1, ns - 1));
  return ns > 0 && fnmatch(ps[0], ss[0], 0) == 0 && ref_match(ps + 1, np - 1, ss + 1, ns - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *z = memchr(data, 0, size);
  size_t plen = z ? (size_t) (z - data) : size;
  char *pattern = strndup((const char *) data, plen);
  char *path = z ? strndup((const char *) z + 1, size - plen - 1) : strdup("");
  if (pattern == NULL || path == NULL)
    abort();

  bool r = sbx__path_matches(pattern, path);
  if ((pattern[0] == '\0' || pattern[0] == '/') && r)
    __builtin_trap();

  /* a trailing '/' is dropped */
  size_t pl = strlen(pattern);
  char *slashed = malloc(pl + 2);
  memcpy(slashed, pattern, pl);
  slashed[pl] = '/';
  slashed[pl + 1] = '\0';
  if (pl > 0 && sbx__path_matches(slashed, path) != r)
    __builtin_trap();
  free(slashed);

  /* trimmed pattern: anchored iff it still holds a '/' */
  size_t tl = pl;
  while (tl > 0 && pattern[tl - 1] == '/')
    tl--;
  bool anchored = pattern[0] != '/' && memchr(pattern, '/', tl) != NULL;
  if (anchored && r) {
    char *starred = malloc(pl + 4);
    memcpy(starred, "**/", 3);
    memcpy(starred + 3, pattern, pl + 1);
    if (!sbx__path_matches(starred, path))
      __builtin_trap();
    free(starred);
  }

  /* naive references on ASCII input (the process stays in the C locale: byte semantics) */
  if (pl > 0 && pattern[0] != '/' && is_ascii(pattern) && is_ascii(path)) {
    char *pc = strndup(pattern, tl);
    char *sc = strdup(path);
    char *ps[MAX_SEGS], *ss[MAX_SEGS];
    if (!anchored) {
      /* the last non-empty segment */
      size_t l = strlen(sc);
      while (l > 0 && sc[l - 1] == '/')
        sc[--l] = '\0';
      char *base = strrchr(sc, '/');
      base = base ? base + 1 : sc;
      bool want = l > 0 && fnmatch(pc, base, 0) == 0;
      if (want != r)
        __builtin_trap();
    } else {
      int np = split(pc, ps, MAX_SEGS);
      int ns = split(sc, ss, MAX_SEGS);
      if (np >= 0 && ns > 0) {
        if (ref_match(ps, np, ss, ns) != r)
          __builtin_trap();
      }
    }
    free(pc);
    free(sc);
  }

  /* the ignore table against fnmatch(3), on every segment of the path and on the raw bytes */
  bool any = false;
  char *segs = strdup(path);
  char *save = NULL;
  for (char *t = strtok_r(segs, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    bool want = false;
    for (size_t i = 0; i < 50 && !want; i++)
      want = fnmatch(ignore_list[i], t, 0) == 0;
    if (want != sbx__search_ignored_segment(t, strlen(t)))
      __builtin_trap();
    any = any || want;
  }
  free(segs);
  if (sbx__search_ignored_path(path) != any)
    __builtin_trap();
  (void) sbx__search_ignored_segment((const char *) data, size);

  free(pattern);
  free(path);
  return 0;
}
