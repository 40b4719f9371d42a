#include "error.h"
#include "util.h"

#include <stdarg.h>
#include <string.h>

static const char *const kind_names[SBX_E_KIND_MAX] = {
    [SBX_E_INTERNAL] = "internal",
    [SBX_E_INVALID] = "invalid",
    [SBX_E_NOT_FOUND] = "not_found",
    [SBX_E_DENIED] = "denied",
    [SBX_E_TOO_LARGE] = "too_large",
    [SBX_E_NOT_DIR] = "not_a_directory",
    [SBX_E_IS_DIR] = "is_a_directory",
    [SBX_E_NOT_TEXT] = "not_text",
    [SBX_E_TIMEOUT] = "timeout",
    [SBX_E_IO] = "io",
    [SBX_E_BACKEND] = "backend",
    [SBX_E_CONFIG] = "config",
    [SBX_E_UNSUPPORTED] = "unsupported",
    [SBX_E_SHUTDOWN] = "shutdown",
    [SBX_E_EXISTS] = "exists",
    [SBX_E_CONFLICT] = "conflict",
    [SBX_E_BUSY] = "busy",
    [SBX_E_LIMIT] = "limit",
};

const char *sbx_error_kind_name(int kind)
{
  if (kind <= 0 || kind >= SBX_E_KIND_MAX || kind_names[kind] == NULL)
    return "internal";
  return kind_names[kind];
}

void sbx_error_release(sbx_error_t *err)
{
  if (err == NULL || *err == NULL)
    return;
  free((*err)->msg);
  free(*err);
  *err = NULL;
}

int sbx__errno_kind(int status)
{
  switch (status) {
  case ENOENT:
    return SBX_E_NOT_FOUND;
  case ENOTDIR:
    return SBX_E_NOT_DIR;
  case EISDIR:
    return SBX_E_IS_DIR;
  case EFBIG:
  case E2BIG:
  case EMSGSIZE:
  case ENAMETOOLONG:
    return SBX_E_TOO_LARGE;
  case EEXIST:
  case ENOTEMPTY:
    return SBX_E_EXISTS;
  case ETIMEDOUT:
    return SBX_E_TIMEOUT;
  case EINVAL:
    return SBX_E_INVALID;
  case EXDEV:
  case ELOOP:
    return SBX_E_DENIED;
  case ENOMEM:
  case ENOSPC:
  case EDQUOT:
  case EMFILE:
  case ENFILE:
  case EACCES:
  case EPERM:
  case EROFS:
  case EIO:
  case ETXTBSY:
  case EBUSY:
    return SBX_E_IO;
  default:
    return SBX_E_IO;
  }
}

int sbx__error_set(sbx_error_t *err, int status, int kind, const char *msg)
{
  if (err == NULL || *err != NULL)
    return -1;
  struct sbx_error_s *e = xzalloc(sizeof *e);
  e->status = status;
  e->kind = kind > 0 && kind < SBX_E_KIND_MAX ? kind : SBX_E_INTERNAL;
  e->msg = xstrdup(msg ? msg : "unknown error");
  *err = e;
  return -1;
}

int sbx__error_setf(sbx_error_t *err, int status, int kind, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  return sbx__error_set(err, status, kind, msg);
}

int sbx__make_error(sbx_error_t *err, int status, int kind, const char *fmt, ...)
{
  if (err == NULL || *err != NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  if (status > 0) {
    cleanup_free char *full = xasprintf("%s: %s", msg, strerror(status));
    return sbx__error_set(err, status, kind, full);
  }
  return sbx__error_set(err, status, kind, msg);
}

int sbx__error_wrap(sbx_error_t *err, const char *fmt, ...)
{
  if (err == NULL || *err == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *outer = xvasprintf(fmt, ap);
  va_end(ap);
  char *msg = xasprintf("%s: %s", outer, (*err)->msg);
  free((*err)->msg);
  (*err)->msg = msg;
  return -1;
}
