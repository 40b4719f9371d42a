/* The ignore list (contract §5.1): see ignore.h. */
#include "ignore.h"
#include "util.h"

#include <string.h>

/* Every one of the 50 patterns is either a plain name or has exactly one '*' and no other
 * fnmatch metacharacter, so fnmatch(pattern, segment, 0) reduces to "equal" or "starts with pre
 * and ends with suf". The unit tests check this equivalence against fnmatch(3) itself. */
typedef struct {
  const char *pattern;
  const char *pre;
  const char *suf;
  unsigned char prelen;
  unsigned char suflen;
  bool star;
} ignore_pat_t;

// clang-format off
#define IG_NAME(s) {s, s, "", sizeof(s) - 1, 0, false}
#define IG_SUFFIX(s) {"*" s, "", s, 0, sizeof(s) - 1, true}
#define IG_PRESUF(p, s) {p "*" s, p, s, sizeof(p) - 1, sizeof(s) - 1, true}
// clang-format on

static const ignore_pat_t ignore_patterns[] = {
    IG_NAME(".git"),        IG_NAME(".svn"),         IG_NAME(".hg"),
    IG_NAME(".bzr"),        IG_NAME("node_modules"), IG_NAME("__pycache__"),
    IG_NAME(".venv"),       IG_NAME("venv"),         IG_NAME(".env"),
    IG_NAME("env"),         IG_NAME(".tox"),         IG_NAME(".nox"),
    IG_NAME(".eggs"),       IG_SUFFIX(".egg-info"),  IG_NAME("site-packages"),
    IG_NAME("dist"),        IG_NAME("build"),        IG_NAME(".next"),
    IG_NAME(".nuxt"),       IG_NAME(".output"),      IG_NAME(".turbo"),
    IG_NAME("target"),      IG_NAME("out"),          IG_NAME(".idea"),
    IG_NAME(".vscode"),     IG_SUFFIX(".swp"),       IG_SUFFIX(".swo"),
    IG_SUFFIX("~"),         IG_NAME(".project"),     IG_NAME(".classpath"),
    IG_NAME(".settings"),   IG_NAME(".DS_Store"),    IG_NAME("Thumbs.db"),
    IG_NAME("desktop.ini"), IG_SUFFIX(".lnk"),       IG_SUFFIX(".log"),
    IG_SUFFIX(".tmp"),      IG_SUFFIX(".temp"),      IG_PRESUF(".upload-", ".part"),
    IG_SUFFIX(".bak"),      IG_SUFFIX(".cache"),     IG_NAME(".cache"),
    IG_NAME("logs"),        IG_NAME(".coverage"),    IG_NAME("coverage"),
    IG_NAME(".nyc_output"), IG_NAME("htmlcov"),      IG_NAME(".pytest_cache"),
    IG_NAME(".mypy_cache"), IG_NAME(".ruff_cache"),
};

_Static_assert(sizeof(ignore_patterns) / sizeof(ignore_patterns[0]) == 50,
               "the DeerFlow ignore list has exactly 50 patterns");

bool sbx__search_ignored_segment(const char *segment, size_t len)
{
  if (segment == NULL || len == 0)
    return false;
  for (size_t i = 0; i < ARRAY_SIZE(ignore_patterns); i++) {
    const ignore_pat_t *p = &ignore_patterns[i];
    if (!p->star) {
      if (len == p->prelen && memcmp(segment, p->pre, len) == 0)
        return true;
      continue;
    }
    if (len < (size_t) p->prelen + p->suflen)
      continue;
    if (memcmp(segment, p->pre, p->prelen) == 0 &&
        memcmp(segment + len - p->suflen, p->suf, p->suflen) == 0)
      return true;
  }
  return false;
}

bool sbx__search_ignored_path(const char *rel_path)
{
  if (rel_path == NULL)
    return false;
  const char *s = rel_path;
  while (*s) {
    const char *e = strchrnul(s, '/');
    if (e > s && sbx__search_ignored_segment(s, (size_t) (e - s)))
      return true;
    s = *e ? e + 1 : e;
  }
  return false;
}
