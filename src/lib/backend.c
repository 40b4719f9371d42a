/* What every backend shares below the instance layer: where sbx-init is, and the frees of the
 * results a backend hands back (also public API). */
#include "backend.h"

#include <limits.h>
#include <string.h>

#ifndef SBX_LIBEXECDIR
#define SBX_LIBEXECDIR "/usr/local/libexec/sbx"
#endif
#ifndef SBX_LIBEXEC_FROM_BIN
#define SBX_LIBEXEC_FROM_BIN "../libexec/sbx"
#endif

/* $SBX_INIT, else next to the running executable (a build folder), else where an install put it
 * relative to the executable (bin/../libexec/sbx: an install moved to another prefix), else the
 * configured install location. */
char *sbx__init_path(void)
{
  const char *env = getenv("SBX_INIT");
  if (env && *env)
    return xstrdup(env);
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = {"", "/" SBX_LIBEXEC_FROM_BIN};
      for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
        char *p = xasprintf("%s%s/sbx-init", self, rel[i]);
        if (access(p, X_OK) == 0)
          return p;
        free(p);
      }
    }
  }
  return xstrdup(SBX_LIBEXECDIR "/sbx-init");
}

void sbx_grep_matches_free(struct sbx_grep_match *m, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    free(m[i].path);
    free(m[i].line);
  }
  free(m);
}
