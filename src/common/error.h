/* Internal side of the error model: making, wrapping and moving errors. */
#ifndef SBX_ERROR_INTERNAL_H
#define SBX_ERROR_INTERNAL_H

#include <sbx/error.h>

/* Sets *err (if err is non-NULL and *err is NULL) and returns -1. status is an errno value or
 * 0; when non-zero its strerror text is appended after ": ". */
int sbx__make_error(sbx_error_t *err, int status, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prefixes the existing message: "outer: inner". Returns -1. */
int sbx__error_wrap(sbx_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Builds an error from parts received over the wire (no strerror appended). */
int sbx__error_set(sbx_error_t *err, int status, int kind, const char *msg);
/* Like sbx__make_error but keeps the message exact (no strerror text appended) while still
 * recording the errno value in status. Returns -1. */
int sbx__error_setf(sbx_error_t *err, int status, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Maps an errno value to the closest kind. */
int sbx__errno_kind(int status);

#endif
