/* libFuzzer target for the contract's path and identity rules (src/common/paths.c), against
 * references written here:
 * - sbx__path_check: non-empty, at most 4096 bytes, absolute, and no ".." segment when both '/'
 *   and '\' separate segments; an accepted path, resolved lexically below a root, never leaves
 *   it (the property the rule exists for);
 * - sbx__download_path_check: the above and /mnt/user-data or below (any run of separators);
 * - thread ids ^[A-Za-z0-9_-]{1,64}$, user ids ^[A-Za-z0-9_-]{1,128}$, sandbox ids 16 lower-case
 *   hex; sbx__scope_id is deterministic, valid, and differs for swapped (user, thread).
 *
 * Input: the path (cut at the first NUL); a second NUL-separated part is used as a thread id.
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_paths fuzz/corpus/paths */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "paths.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_sep(char c)
{
  return c == '/' || c == '\\';
}

static bool ref_has_dotdot(const char *p)
{
  size_t n = strlen(p);
  for (size_t i = 0; i < n;) {
    while (i < n && is_sep(p[i]))
      i++;
    size_t j = i;
    while (j < n && !is_sep(p[j]))
      j++;
    if (j - i == 2 && p[i] == '.' && p[i + 1] == '.')
      return true;
    i = j;
  }
  return false;
}

static bool ref_path_ok(const char *p)
{
  size_t n = strlen(p);
  return n > 0 && n <= SBX_PATH_MAX && p[0] == '/' && !ref_has_dotdot(p);
}

/* Lexical resolution below a root ('\' is an ordinary byte for the kernel): the depth never
 * goes below zero for an accepted path. */
static bool stays_below_root(const char *p)
{
  long depth = 0;
  size_t n = strlen(p);
  for (size_t i = 0; i < n;) {
    while (i < n && p[i] == '/')
      i++;
    size_t j = i;
    while (j < n && p[j] != '/')
      j++;
    if (j - i == 2 && p[i] == '.' && p[i + 1] == '.')
      depth--;
    else if (j > i && !(j - i == 1 && p[i] == '.'))
      depth++;
    if (depth < 0)
      return false;
    i = j;
  }
  return true;
}

static bool ref_under_user_data(const char *p)
{
  while (is_sep(*p))
    p++;
  const char *pre = "mnt/user-data";
  size_t n = strlen(pre);
  return strncmp(p, pre, n) == 0 && (p[n] == '\0' || is_sep(p[n]));
}

static bool ref_id_chars(const char *s, size_t max)
{
  size_t n = strlen(s);
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  }
  return true;
}

static bool ref_sandbox_id(const char *s)
{
  if (strlen(s) != SBX_ID_LEN)
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return false;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *buf = malloc(size + 2);
  memcpy(buf, data, size);
  buf[size] = '\0';
  buf[size + 1] = '\0';
  const char *path = buf;
  const char *second = buf + strlen(buf) + 1;
  if (second > buf + size)
    second = buf + size + 1;

  sbx_error_t err = NULL;
  bool ok = sbx__path_check(path, &err) == 0;
  if (ok != ref_path_ok(path) || ok != (err == NULL))
    abort();
  if (!ok && (err->msg == NULL || err->kind <= 0))
    abort();
  sbx_error_release(&err);
  if (ok && !stays_below_root(path))
    abort();

  bool dl = sbx__download_path_check(path, &err) == 0;
  if (dl != (ref_path_ok(path) && ref_under_user_data(path)))
    abort();
  sbx_error_release(&err);
  if (sbx__path_under_user_data(path) != ref_under_user_data(path))
    abort();

  if (sbx__thread_id_valid(second) != ref_id_chars(second, 64) ||
      sbx__user_id_valid(second) != ref_id_chars(second, 128) ||
      sbx__id_valid(second) != ref_sandbox_id(second))
    abort();
  bool scope_ok = sbx__scope_check(second, second, &err) == 0;
  if (scope_ok != (ref_id_chars(second, 64) && ref_id_chars(second, 128)))
    abort();
  sbx_error_release(&err);
  if (scope_ok) {
    char a[SBX_ID_LEN + 1], b[SBX_ID_LEN + 1], c[SBX_ID_LEN + 1];
    sbx__scope_id(second, second, a);
    sbx__scope_id(second, second, b);
    sbx__scope_id("default", second, c);
    if (strcmp(a, b) != 0 || !sbx__id_valid(a) || !sbx__id_valid(c))
      abort();
    if (strcmp(second, "default") != 0 && strcmp(a, c) == 0)
      abort(); /* (second, second) and (default, second) are different scopes */
  }
  free(buf);
  return 0;
}
