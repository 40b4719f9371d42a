/* libFuzzer target for the contract's text rules (src/common/text.c), each against a reference
 * written here independently:
 * - sbx__utf8_valid against a decoder driven by the Unicode well-formed byte sequence table
 *   (Unicode 15, table 3-7);
 * - sbx__utf8_next (the one decoder: length, code point, maximal subpart), sbx__utf8_count_lossy
 *   and sbx__text_class against the same table;
 * - sbx__utf8_sanitize against the same table with U+FFFD per maximal subpart of an ill-formed
 *   sequence (Unicode's "best practice", Python's errors='replace'); its output is valid, and a
 *   valid input comes back unchanged;
 * - sbx__text_line_range against a split-clamp-join reference (read_file's range rule);
 * - sbx__env_key_valid against ^[A-Za-z_][A-Za-z0-9_]*$;
 * - sbx__exec_render: valid UTF-8, "(no output)" exactly when there is nothing to say, the exit
 *   and timeout lines and the truncation marker exactly when due.
 *
 * Input: a selector byte, then 16 bytes of parameters (two little-endian int64, used by the
 * line range and the renderer), then the text.
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_text fuzz/corpus/text */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Length of the well-formed sequence at s, or 0; *maximal gets the length of the maximal
 * subpart (at least 1) when it is ill-formed. Table 3-7 row by row. */
static size_t ref_seq(const unsigned char *s, size_t n, size_t *maximal)
{
  unsigned char b = s[0];
  struct {
    unsigned char lo, hi;
  } second = {0x80, 0xbf};
  size_t len;
  if (b <= 0x7f)
    return 1;
  if (b >= 0xc2 && b <= 0xdf)
    len = 2;
  else if (b == 0xe0)
    len = 3, second.lo = 0xa0;
  else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef)
    len = 3;
  else if (b == 0xed)
    len = 3, second.hi = 0x9f;
  else if (b == 0xf0)
    len = 4, second.lo = 0x90;
  else if (b >= 0xf1 && b <= 0xf3)
    len = 4;
  else if (b == 0xf4)
    len = 4, second.hi = 0x8f;
  else {
    *maximal = 1;
    return 0;
  }
  size_t i = 1;
  for (; i < len && i < n; i++) {
    unsigned char c = s[i];
    unsigned char lo = i == 1 ? second.lo : 0x80, hi = i == 1 ? second.hi : 0xbf;
    if (c < lo || c > hi)
      break;
  }
  if (i == len)
    return len;
  *maximal = i;
  return 0;
}

static bool ref_valid(const unsigned char *s, size_t n)
{
  for (size_t i = 0; i < n;) {
    size_t m;
    size_t l = ref_seq(s + i, n - i, &m);
    if (l == 0)
      return false;
    i += l;
  }
  return true;
}

static char *ref_sanitize(const unsigned char *s, size_t n, size_t *outlen)
{
  char *out = malloc(n * 3 + 1);
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t m = 0;
    size_t l = ref_seq(s + i, n - i, &m);
    if (l) {
      memcpy(out + o, s + i, l);
      o += l;
      i += l;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i += m;
    }
  }
  out[o] = '\0';
  *outlen = o;
  return out;
}

/* read_file's range: split on '\n'; a '\r' before it is dropped; lines start..end (1-based,
 * inclusive; start < 1 means 1; end absent means the last), joined with '\n'; no bounds at all
 * returns the text unchanged. */
static char *ref_range(const char *t, size_t n, int64_t start, int64_t end, size_t *outlen)
{
  char *out = malloc(n + 1);
  size_t o = 0;
  if (start == SBX_LINE_NONE && end == SBX_LINE_NONE) {
    memcpy(out, t, n);
    *outlen = n;
    out[n] = '\0';
    return out;
  }
  if (start == SBX_LINE_NONE || start < 1)
    start = 1;
  int64_t line = 0;
  size_t i = 0;
  bool first = true;
  while (i < n) {
    size_t j = i;
    while (j < n && t[j] != '\n')
      j++;
    line++;
    size_t l = j - i;
    if (l && t[i + l - 1] == '\r')
      l--;
    if (line >= start && (end == SBX_LINE_NONE || line <= end)) {
      if (!first)
        out[o++] = '\n';
      memcpy(out + o, t + i, l);
      o += l;
      first = false;
    }
    i = j + 1;
  }
  if (end != SBX_LINE_NONE && (end <= 0 || end < start))
    o = 0;
  out[o] = '\0';
  *outlen = o;
  return out;
}

static bool ref_env_key(const char *k, size_t n)
{
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = k[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok)
      return false;
  }
  return true;
}

static int64_t le64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return (int64_t) v;
}

/* The checks below read the text as a C string, so NUL bytes of the output are made spaces
 * here; that NULs pass through whole is check_render_nul's. */
static void check_render(const char *raw, size_t n, int64_t a, int64_t b)
{
  char *t = malloc(n + 1);
  for (size_t i = 0; i < n; i++)
    t[i] = raw[i] ? raw[i] : ' ';
  size_t split = n ? (size_t) ((uint64_t) a % (n + 1)) : 0;
  sbx_exec_output_t o = {
      .out = t,
      .out_len = split,
      .out_total = split + ((uint64_t) b & 3 ? (uint64_t) b % 100000 : 0),
      .err = t + split,
      .err_len = n - split,
      .err_total = n - split + ((uint64_t) b & 4 ? 7 : 0),
      .exit_code = (int) (int8_t) (b >> 8),
      .timed_out = (b >> 16) & 1,
  };
  size_t rl;
  char *r = sbx__exec_render(&o, &rl);
  if (rl != strlen(r) || !sbx__utf8_valid(r, rl))
    abort();
  bool nothing = o.out_len == 0 && o.err_len == 0 && o.out_total == 0 && o.err_total == 0 &&
                 !o.timed_out && o.exit_code == 0;
  /* "(no output)" also comes back when it is the command's whole output, verbatim */
  const char *only = o.out_len ? o.out : o.err;
  bool echoed = (o.out_len == 0) != (o.err_len == 0) && o.out_len + o.err_len == 11 &&
                memcmp(only, "(no output)", 11) == 0;
  if (nothing != (strcmp(r, "(no output)") == 0) && !(nothing == false && rl == 0) && !echoed)
    abort();
  if (o.timed_out && strstr(r, "Error: command timed out\nExit Code: 124") == NULL)
    abort();
  char code[32];
  snprintf(code, sizeof code, "Exit Code: %d", o.exit_code);
  if (!o.timed_out && o.exit_code != 0 && strstr(r, code) == NULL)
    abort();
  bool truncated = o.out_total > o.out_len || o.err_total > o.err_len;
  if (truncated && strstr(r, "[output truncated after") == NULL)
    abort();
  free(r);
  free(t);
}

/* With NULs: every byte of the output is in the rendered text (its length says so), as
 * sanitizing alone would make it. */
static void check_render_nul(const char *raw, size_t n)
{
  sbx_exec_output_t o = {.out = raw, .out_len = n, .out_total = n};
  size_t rl, sl;
  char *r = sbx__exec_render(&o, &rl);
  char *want = sbx__utf8_sanitize(raw, n, &sl);
  if (n > 0 && (rl != sl || memcmp(r, want, sl) != 0))
    abort();
  free(want);
  free(r);
}

static size_t code_points(const char *s, size_t n)
{
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += ((unsigned char) s[i] & 0xC0) != 0x80;
  return c;
}

/* DeerFlow's caps: valid UTF-8, at most max characters (marker included), the text whole when
 * it fits, the head (and for the middle cut the tail) of the sanitized text kept. */
static void check_truncate(const char *raw, size_t n, int64_t a)
{
  int64_t max = (int64_t) ((uint64_t) a % 400);
  size_t sl, ml, hl;
  char *clean = sbx__utf8_sanitize(raw, n, &sl);
  size_t total = code_points(clean, sl);
  char *m = sbx__truncate_middle(raw, n, max, &ml);
  char *h = sbx__truncate_head(raw, n, max, "hint", &hl);
  if (!sbx__utf8_valid(m, ml) || !sbx__utf8_valid(h, hl))
    abort();
  if (max == 0 || total <= (size_t) max) {
    if (ml != sl || hl != sl || memcmp(m, clean, sl) != 0 || memcmp(h, clean, sl) != 0)
      abort();
  } else {
    if (code_points(m, ml) > (size_t) max || code_points(h, hl) > (size_t) max)
      abort();
    /* what comes before the (first) marker is the text's own start, in both */
    const char *hm = memmem(h, hl, "\n... [truncated: showing first ", 31);
    const char *mm = memmem(m, ml, "\n... [middle truncated: ", 24);
    size_t hp = hm ? (size_t) (hm - h) : hl, mp = mm ? (size_t) (mm - m) : ml;
    if (hp > sl || mp > sl || memcmp(h, clean, hp) != 0 || memcmp(m, clean, mp) != 0)
      abort();
  }
  free(m);
  free(h);
  free(clean);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 17)
    return 0;
  uint8_t sel = data[0];
  int64_t a = le64(data + 1), b = le64(data + 9);
  const char *t = (const char *) data + 17;
  size_t n = size - 17;

  /* UTF-8 validity and sanitizing */
  if (sbx__utf8_valid(t, n) != ref_valid((const unsigned char *) t, n))
    abort();
  size_t got_len, want_len;
  char *got = sbx__utf8_sanitize(t, n, &got_len);
  char *want = ref_sanitize((const unsigned char *) t, n, &want_len);
  if (got_len != want_len || memcmp(got, want, got_len) != 0 || !sbx__utf8_valid(got, got_len))
    abort();
  if (ref_valid((const unsigned char *) t, n) && (got_len != n || memcmp(got, t, n) != 0))
    abort();
  free(got);
  free(want);

  /* the one decoder, sequence by sequence: its length, validity and code point; and the lossy
   * code point count and text class built on it */
  {
    const unsigned char *u = (const unsigned char *) t;
    size_t units = 0;
    bool ascii = true, valid = true;
    for (size_t i = 0; i < n; units++) {
      size_t m = 0, l = ref_seq(u + i, n - i, &m);
      uint32_t cp = 0;
      size_t dl = sbx__utf8_next(u + i, n - i, &cp);
      if (l > 0) {
        uint32_t want_cp = l == 1 ? u[i] : (uint32_t) (u[i] & (0x7f >> l));
        for (size_t k = 1; k < l; k++)
          want_cp = want_cp << 6 | (u[i + k] & 0x3f);
        if (dl != l || cp != want_cp)
          abort();
      } else if (dl != m || cp != SBX_UTF8_BAD) {
        abort();
      }
      ascii = ascii && u[i] < 0x80;
      valid = valid && l > 0;
      i += dl;
    }
    if (sbx__utf8_count_lossy(t, n) != units)
      abort();
    int cls = sbx__text_class(t, n);
    if (cls != (!valid ? SBX_TEXT_INVALID : ascii ? SBX_TEXT_ASCII : SBX_TEXT_UTF8))
      abort();
  }

  /* read_file's line range: small bounds most of the time, the extremes sometimes */
  int64_t start = sel & 1 ? SBX_LINE_NONE : (sel & 2 ? a : a % 64);
  int64_t end = sel & 4 ? SBX_LINE_NONE : (sel & 8 ? b : b % 64);
  got = sbx__text_line_range(t, n, start, end, &got_len);
  want = ref_range(t, n, start, end, &want_len);
  if (got_len != want_len || memcmp(got, want, got_len) != 0 || got[got_len] != '\0')
    abort();
  free(got);
  free(want);

  /* environment keys: the text up to its first '=' */
  const char *eq = memchr(t, '=', n);
  size_t klen = eq ? (size_t) (eq - t) : n;
  if (sbx__env_key_valid(t, klen) != ref_env_key(t, klen))
    abort();

  check_render(t, n, a, b);
  check_render_nul(t, n);
  check_truncate(t, n, a);
  return 0;
}
