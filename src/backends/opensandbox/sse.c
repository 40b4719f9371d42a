#include "sse.h"

#include <string.h>

static int emit_line(struct osb_sse *p, char *s, size_t n)
{
  while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  while (n && (*s == ' ' || *s == '\t'))
    s++, n--;
  if (n == 0 || s[0] == ':')
    return 0;
  static const char *const skip[] = {"event:", "id:", "retry:"};
  for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
    if (n >= strlen(skip[i]) && memcmp(s, skip[i], strlen(skip[i])) == 0)
      return 0;
  if (n >= 5 && memcmp(s, "data:", 5) == 0) {
    s += 5, n -= 5;
    while (n && (*s == ' ' || *s == '\t'))
      s++, n--;
  }
  json_error_t je;
  json_t *ev = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
  if (ev == NULL || !json_is_object(ev) || !json_is_string(json_object_get(ev, "type"))) {
    p->bad_lines++;
    json_decref(ev);
    return 0;
  }
  int r = p->on_event ? p->on_event(p->arg, ev) : 0;
  json_decref(ev);
  return r;
}

int osb_sse_feed(struct osb_sse *p, const char *data, size_t len)
{
  size_t max = p->max_line ? p->max_line : (16u << 20);
  while (len > 0) {
    const char *nl = memchr(data, '\n', len);
    size_t take = nl ? (size_t) (nl - data) : len;
    if (!p->skipping) {
      if (p->line.len + take > max) {
        p->dropped += p->line.len + take;
        p->line.len = 0;
        p->skipping = true;
      } else {
        sbx__buf_append(&p->line, data, take);
      }
    } else {
      p->dropped += take;
    }
    if (nl == NULL)
      return 0;
    data = nl + 1;
    len -= take + 1;
    if (p->skipping) {
      p->skipping = false;
      continue;
    }
    int r = emit_line(p, p->line.data ? p->line.data : (char *) "", p->line.len);
    p->line.len = 0;
    if (r != 0)
      return r;
  }
  return 0;
}

int osb_sse_finish(struct osb_sse *p)
{
  if (p->skipping || p->line.len == 0)
    return 0;
  int r = emit_line(p, p->line.data, p->line.len);
  p->line.len = 0;
  return r;
}

void osb_sse_free(struct osb_sse *p)
{
  sbx__buf_free(&p->line);
}
