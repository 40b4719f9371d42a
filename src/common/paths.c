#include "paths.h"
#include "util.h"

#include <string.h>

static bool has_dotdot_segment(const char *p)
{
  const char *s = p;
  while (*s) {
    while (*s == '/' || *s == '\\')
      s++;
    const char *e = s;
    while (*e && *e != '/' && *e != '\\')
      e++;
    if (e - s == 2 && s[0] == '.' && s[1] == '.')
      return true;
    s = e;
  }
  return false;
}

int sbx__path_check(const char *path, sbx_error_t *err)
{
  if (path == NULL || *path == '\0')
    return sbx__make_error(err, 0, SBX_E_INVALID, "path must be a non-empty string");
  size_t len = strlen(path);
  if (len > SBX_PATH_MAX)
    return sbx__make_error(err, ENAMETOOLONG, SBX_E_TOO_LARGE, "path is too long (%zu bytes)", len);
  if (has_dotdot_segment(path))
    return sbx__make_error(err, 0, SBX_E_DENIED, "Access denied: path traversal detected in '%s'",
                           path);
  if (path[0] != '/')
    return sbx__make_error(err, 0, SBX_E_INVALID, "path must be absolute: '%s'", path);
  return 0;
}

bool sbx__path_under_user_data(const char *path)
{
  const char *p = path;
  while (*p == '/' || *p == '\\')
    p++;
  static const char prefix[] = "mnt/user-data";
  size_t n = sizeof prefix - 1;
  if (strncmp(p, prefix, n) != 0)
    return false;
  return p[n] == '\0' || p[n] == '/' || p[n] == '\\';
}

int sbx__download_path_check(const char *path, sbx_error_t *err)
{
  if (sbx__path_check(path, err) < 0)
    return -1;
  if (!sbx__path_under_user_data(path))
    return sbx__make_error(err, 0, SBX_E_DENIED,
                           "Access denied: path must be under '/mnt/user-data': '%s'", path);
  return 0;
}

static bool id_chars_valid(const char *s, size_t max)
{
  size_t n = 0;
  for (; s[n]; n++) {
    char c = s[n];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
    if (n >= max)
      return false;
  }
  return n > 0;
}

bool sbx__thread_id_valid(const char *thread)
{
  return thread && id_chars_valid(thread, 64);
}

bool sbx__user_id_valid(const char *user)
{
  return user && id_chars_valid(user, 128);
}

int sbx__scope_check(const char *user, const char *thread, sbx_error_t *err)
{
  if (!sbx__thread_id_valid(thread))
    return sbx__make_error(
        err, 0, SBX_E_INVALID,
        "Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores");
  if (!sbx__user_id_valid(user))
    return sbx__make_error(
        err, 0, SBX_E_INVALID,
        "Invalid user_id: expected 1-128 ASCII letters, digits, hyphens, or underscores");
  return 0;
}

void sbx__scope_id(const char *user, const char *thread, char out[SBX_ID_LEN + 1])
{
  cleanup_free char *seed = xasprintf("%s:%s", user, thread);
  sbx__sha256_hex(seed, strlen(seed), out, SBX_ID_LEN);
}

bool sbx__id_valid(const char *id)
{
  if (id == NULL || strlen(id) != SBX_ID_LEN)
    return false;
  for (const char *p = id; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return false;
  return true;
}
