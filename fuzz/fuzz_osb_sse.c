/* The opensandbox backend's reader of execd's event stream (src/backends/opensandbox/sse.c):
 * arbitrary bytes, fed whole and then split at a point the input chooses, must give the same
 * events; nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../src/backends/opensandbox/sse.h"

struct acc {
  sbx_buf_t seen;
};

static int on_event(void *arg, json_t *ev)
{
  struct acc *a = arg;
  char *s = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
  if (s) {
    sbx__buf_puts(&a->seen, s);
    sbx__buf_putc(&a->seen, '\n');
    free(s);
  }
  return 0;
}

static void run(const uint8_t *data, size_t size, size_t split, sbx_buf_t *out)
{
  struct acc a = {0};
  struct osb_sse p = {.on_event = on_event, .arg = &a, .max_line = 4096};
  osb_sse_feed(&p, (const char *) data, split);
  osb_sse_feed(&p, (const char *) data + split, size - split);
  osb_sse_finish(&p);
  osb_sse_free(&p);
  *out = a.seen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  size_t split = data[0] % size;
  sbx_buf_t whole = {0}, parts = {0};
  run(data + 1, size - 1, 0, &whole);
  run(data + 1, size - 1, split > size - 1 ? size - 1 : split, &parts);
  if (whole.len != parts.len || (whole.len && memcmp(whole.data, parts.data, whole.len) != 0))
    __builtin_trap();
  sbx__buf_free(&whole);
  sbx__buf_free(&parts);
  return 0;
}
