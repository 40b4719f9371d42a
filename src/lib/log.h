/* The library's log (sbx_set_log_handler's handler, or nothing). */
#ifndef SBX_LIB_LOG_H
#define SBX_LIB_LOG_H

#include <sbx/sbx.h>

void sbx__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
