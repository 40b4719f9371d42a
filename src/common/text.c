#include "text.h"
#include "util.h"

#include <inttypes.h>
#include <pthread.h>
#include <string.h>

size_t sbx__utf8_next(const void *s, size_t len, uint32_t *cp)
{
  const unsigned char *p = s;
  unsigned char c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  /* the continuation bytes wanted, and the range of the first (overlongs, surrogates and code
   * points past U+10FFFF are excluded there) */
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    v = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    v = c & 0x0Fu;
    lo = c == 0xE0 ? 0xA0 : 0x80;
    hi = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    v = c & 0x07u;
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    *cp = SBX_UTF8_BAD;
    return 1;
  }
  for (size_t i = 1; i <= need; i++) {
    if (i >= len || p[i] < lo || p[i] > hi) {
      *cp = SBX_UTF8_BAD;
      return i;
    }
    v = v << 6 | (p[i] & 0x3Fu);
    lo = 0x80;
    hi = 0xBF;
  }
  *cp = v;
  return need + 1;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is invalid. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
  uint32_t cp;
  size_t n = sbx__utf8_next(s, len, &cp);
  return cp == SBX_UTF8_BAD ? 0 : n;
}

size_t sbx__ascii_run(const void *s, size_t len)
{
  const unsigned char *p = s;
  size_t i = 0;
  for (uint64_t w; len - i >= 8; i += 8) {
    memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull)
      break;
  }
  while (i < len && p[i] < 0x80)
    i++;
  return i;
}

bool sbx__utf8_valid(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0;
  while (i < len) {
    i += sbx__ascii_run(p + i, len - i); /* most text */
    if (i >= len)
      break;
    size_t n = utf8_seq(p + i, len - i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

void sbx__buf_put_utf8_lossy(sbx_buf_t *b, const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0;
  sbx__buf_reserve(b, len);
  while (i < len) {
    size_t start = i;
    i += sbx__ascii_run(p + i, len - i);
    uint32_t cp = 0;
    size_t n = 0;
    while (i < len && (n = sbx__utf8_next(p + i, len - i, &cp), cp != SBX_UTF8_BAD)) {
      i += n;
      i += sbx__ascii_run(p + i, len - i);
    }
    sbx__buf_append(b, s + start, i - start);
    if (i < len) {
      sbx__buf_append(b, "\xef\xbf\xbd", 3);
      i += n;
    }
  }
}

char *sbx__utf8_sanitize(const char *s, size_t len, size_t *outlen)
{
  sbx_buf_t b = {0};
  sbx__buf_put_utf8_lossy(&b, s, len);
  if (outlen)
    *outlen = b.len;
  return sbx__buf_steal(&b);
}

size_t sbx__utf8_count_lossy(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *) s;
  size_t c = 0;
  for (size_t i = 0; i < len; c++) {
    uint32_t cp;
    i += p[i] < 0x80 ? 1 : sbx__utf8_next(p + i, len - i, &cp);
  }
  return c;
}

int sbx__text_class(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0;
  int cls = SBX_TEXT_ASCII;
  while (i < len) {
    i += sbx__ascii_run(p + i, len - i);
    if (i >= len)
      break;
    uint32_t cp;
    i += sbx__utf8_next(p + i, len - i, &cp);
    if (cp == SBX_UTF8_BAD)
      return SBX_TEXT_INVALID;
    cls = SBX_TEXT_UTF8;
  }
  return cls;
}

bool sbx__str_ascii(const char *s)
{
  size_t n = strlen(s);
  return sbx__ascii_run(s, n) == n;
}

static pthread_once_t locale_once = PTHREAD_ONCE_INIT;
static locale_t locale_c, locale_utf8;

static void locale_init(void)
{
  locale_c = newlocale(LC_ALL_MASK, "C", (locale_t) 0);
  if (locale_c == (locale_t) 0)
    locale_c = LC_GLOBAL_LOCALE;
  locale_utf8 = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t) 0);
  if (locale_utf8 == (locale_t) 0)
    locale_utf8 = newlocale(LC_ALL_MASK, "C.utf8", (locale_t) 0);
  if (locale_utf8 == (locale_t) 0)
    locale_utf8 = locale_c;
}

locale_t sbx__locale_c(void)
{
  pthread_once(&locale_once, locale_init);
  return locale_c;
}

locale_t sbx__locale_utf8(void)
{
  pthread_once(&locale_once, locale_init);
  return locale_utf8;
}

char *sbx__text_line_range(const char *text, size_t len, int64_t start, int64_t end, size_t *outlen)
{
  if (start == SBX_LINE_NONE && end == SBX_LINE_NONE) {
    if (outlen)
      *outlen = len;
    char *r = xmalloc(len + 1);
    memcpy(r, text, len);
    r[len] = '\0';
    return r;
  }
  if (start == SBX_LINE_NONE || start < 1)
    start = 1;
  sbx_buf_t b = {0};
  if (end != SBX_LINE_NONE && (end <= 0 || end < start))
    goto done;
  int64_t n = 0;
  size_t i = 0;
  bool first = true;
  while (i < len) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t line_end = nl ? (size_t) (nl - text) : len;
    n++;
    if (end != SBX_LINE_NONE && n > end)
      break;
    if (n >= start) {
      size_t l = line_end - i;
      if (l > 0 && text[i + l - 1] == '\r')
        l--;
      if (!first)
        sbx__buf_putc(&b, '\n');
      sbx__buf_append(&b, text + i, l);
      first = false;
    }
    i = nl ? line_end + 1 : len;
  }
done:
  if (outlen)
    *outlen = b.len;
  return sbx__buf_steal(&b);
}

bool sbx__env_key_valid(const char *key, size_t len)
{
  if (len == 0)
    return false;
  for (size_t i = 0; i < len; i++) {
    char c = key[i];
    bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit)))
      return false;
  }
  return true;
}

int sbx__env_check(const char *const *env, size_t n, sbx_error_t *err)
{
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(env[i], '=');
    size_t klen = eq ? (size_t) (eq - env[i]) : strlen(env[i]);
    if (eq == NULL || !sbx__env_key_valid(env[i], klen)) {
      cleanup_free char *key = sbx__utf8_sanitize(env[i], klen > 200 ? 200 : klen, NULL);
      return sbx__make_error(
          err, 0, SBX_E_INVALID,
          "extra_env key '%s' is not a valid POSIX environment variable name (must match "
          "^[A-Za-z_][A-Za-z0-9_]*$). This protects shell-using sandbox implementations from "
          "command injection via the key.",
          key);
    }
  }
  return 0;
}

char *sbx__exec_stream_text(const char *data, size_t len, uint64_t total, size_t *outlen)
{
  sbx_buf_t b = {0};
  size_t clean_len;
  cleanup_free char *clean = sbx__utf8_sanitize(data, len, &clean_len);
  sbx__buf_append(&b, clean, clean_len);
  if (total > len)
    sbx__buf_printf(&b,
                    "\n... [output truncated after %zu of %" PRIu64
                    " bytes; remaining output discarded] ...",
                    len, total);
  if (outlen)
    *outlen = b.len;
  return sbx__buf_steal(&b);
}

char *sbx__exec_render(const sbx_exec_output_t *o, size_t *outlen)
{
  sbx_buf_t b = {0};
  size_t ol = 0, el = 0;
  cleanup_free char *out = sbx__exec_stream_text(o->out, o->out_len, o->out_total, &ol);
  cleanup_free char *errs = sbx__exec_stream_text(o->err, o->err_len, o->err_total, &el);
  sbx__buf_append(&b, out, ol);
  if (el > 0) {
    if (b.len > 0)
      sbx__buf_puts(&b, "\nStd Error:\n");
    sbx__buf_append(&b, errs, el);
  }
  if (o->timed_out) {
    if (b.len > 0)
      sbx__buf_putc(&b, '\n');
    sbx__buf_puts(&b, "Error: command timed out\nExit Code: 124");
  } else if (o->exit_code != 0) {
    if (b.len > 0)
      sbx__buf_putc(&b, '\n');
    sbx__buf_printf(&b, "Exit Code: %d", o->exit_code);
  }
  if (b.len == 0)
    sbx__buf_puts(&b, "(no output)");
  if (outlen)
    *outlen = b.len;
  return sbx__buf_steal(&b);
}

/* Byte offset of the k-th code point of valid UTF-8 text (len if there are fewer). */
static size_t cp_offset(const char *s, size_t len, size_t k)
{
  size_t i = 0;
  for (size_t seen = 0; i < len; i++)
    if (((unsigned char) s[i] & 0xC0) != 0x80 && seen++ == k)
      break;
  return i;
}

static size_t cp_count(const char *s, size_t len)
{
  size_t n = 0;
  for (size_t i = 0; i < len; i++)
    n += ((unsigned char) s[i] & 0xC0) != 0x80;
  return n;
}

char *sbx__truncate_middle(const char *s, size_t len, int64_t max, size_t *outlen)
{
  size_t n;
  char *clean = sbx__utf8_sanitize(s, len, &n);
  size_t total = cp_count(clean, n);
  if (max <= 0 || total <= (uint64_t) max) {
    *outlen = n;
    return clean;
  }
  cleanup_free char *probe =
      xasprintf("\n... [middle truncated: %zu chars skipped] ...\n", total); /* worst case */
  size_t m = (size_t) max, mlen = strlen(probe);
  size_t kept = m > mlen ? m - mlen : 0;
  sbx_buf_t b = {0};
  if (kept == 0) {
    sbx__buf_append(&b, clean, cp_offset(clean, n, m));
  } else {
    size_t head = kept / 2, tail = kept - head;
    sbx__buf_append(&b, clean, cp_offset(clean, n, head));
    sbx__buf_printf(&b, "\n... [middle truncated: %zu chars skipped] ...\n", total - kept);
    size_t from = cp_offset(clean, n, total - tail);
    sbx__buf_append(&b, clean + from, n - from);
  }
  free(clean);
  *outlen = b.len;
  return sbx__buf_steal(&b);
}

char *sbx__truncate_head(const char *s, size_t len, int64_t max, const char *hint, size_t *outlen)
{
  size_t n;
  char *clean = sbx__utf8_sanitize(s, len, &n);
  size_t total = cp_count(clean, n);
  if (max <= 0 || total <= (uint64_t) max) {
    *outlen = n;
    return clean;
  }
  cleanup_free char *probe = xasprintf("\n... [truncated: showing first %zu of %zu chars. %s] ...",
                                       total, total, hint); /* worst case */
  size_t m = (size_t) max, mlen = strlen(probe);
  size_t kept = m > mlen ? m - mlen : 0;
  sbx_buf_t b = {0};
  sbx__buf_append(&b, clean, cp_offset(clean, n, kept ? kept : m));
  if (kept)
    sbx__buf_printf(&b, "\n... [truncated: showing first %zu of %zu chars. %s] ...", kept, total,
                    hint);
  free(clean);
  *outlen = b.len;
  return sbx__buf_steal(&b);
}
