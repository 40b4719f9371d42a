#include "log.h"
#include "util.h"

#include <stdarg.h>

static sbx_log_fn log_fn;
static void *log_arg;

void sbx_set_log_handler(sbx_log_fn fn, void *arg)
{
  log_fn = fn;
  log_arg = arg;
}

void sbx__log(int level, const char *fmt, ...)
{
  if (log_fn == NULL)
    return;
  va_list ap;
  va_start(ap, fmt);
  char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  log_fn(level, msg, log_arg);
  free(msg);
}
