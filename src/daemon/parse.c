/* sbxd's pure parsers and formatters (see parse.h). Everything here takes untrusted input. */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- time ---- */

static void copy_out(char *out, size_t size, const char *tmp)
{
  size_t n = strlen(tmp);
  if (n >= size)
    n = size - 1;
  memcpy(out, tmp, n);
  out[n] = '\0';
}

/* RFC 3339 UTC with `digits` fractional digits of frac. */
static void time_format(int64_t secs64, long frac, int digits, char *out, size_t n)
{
  time_t secs = (time_t) secs64;
  struct tm tm;
  char tmp[128];
  if (gmtime_r(&secs, &tm) == NULL)
    snprintf(tmp, sizeof tmp, "1970-01-01T00:00:00.%0*dZ", digits, 0);
  else
    snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d.%0*ldZ", (tm.tm_year + 1900) % 10000,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, digits, frac);
  copy_out(out, n, tmp);
}

void sbxd_time_format(int64_t ms, char out[32])
{
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  time_format(secs, (long) (ms - secs * 1000), 3, out, 32);
}

void sbxd_time_format_ns(int64_t ns, char out[40])
{
  int64_t secs = ns >= 0 ? ns / 1000000000 : (ns - 999999999) / 1000000000;
  time_format(secs, (long) ((ns - secs * 1000000000) / 1000), 6, out, 40);
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static bool digits(const char *s, int n, int *out)
{
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char) s[i]))
      return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

int sbxd_time_parse(const char *s, int64_t *ms)
{
  int y, mo, d, h, mi, sec;
  if (s == NULL || strlen(s) < 19 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
      s[7] != '-' || !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
      !digits(s + 17, 2, &sec))
    return -1;
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || sec > 60)
    return -1;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo == 2 && d == 29 && !leap)
    return -1;
  const char *p = s + 19;
  int64_t frac_ms = 0;
  if (*p == '.' || *p == ',') {
    p++;
    int n = 0;
    int64_t scale = 100;
    while (isdigit((unsigned char) *p)) {
      if (n < 3) {
        frac_ms += (*p - '0') * scale;
        scale /= 10;
      }
      n++;
      p++;
    }
    if (n == 0)
      return -1;
  }
  int64_t offset_min = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om;
    int sign = *p == '-' ? -1 : 1;
    p++;
    if (!digits(p, 2, &oh))
      return -1;
    p += 2;
    if (*p == ':')
      p++;
    if (!digits(p, 2, &om))
      return -1;
    p += 2;
    if (oh > 23 || om > 59)
      return -1;
    offset_min = sign * (oh * 60 + om);
  }
  if (*p != '\0')
    return -1;
  int64_t days = days_from_civil(y, mo, d);
  int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
  *ms = secs * 1000 + frac_ms;
  return 0;
}

/* ---- numbers and quantities ---- */

bool sbxd_parse_i64(const char *s, int64_t *out)
{
  if (s == NULL || *s == '\0' || isspace((unsigned char) *s) || *s == '+')
    return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end != '\0')
    return false;
  *out = v;
  return true;
}

static const char *trim(const char *s, size_t *len)
{
  size_t n = strlen(s);
  while (n && isspace((unsigned char) *s)) {
    s++;
    n--;
  }
  while (n && isspace((unsigned char) s[n - 1]))
    n--;
  *len = n;
  return s;
}

int sbxd_parse_memory(const char *s, uint64_t *bytes)
{
  if (s == NULL)
    return -1;
  size_t n;
  const char *p = trim(s, &n);
  size_t i = 0;
  uint64_t amount = 0;
  while (i < n && isdigit((unsigned char) p[i])) {
    if (amount > (UINT64_MAX - 9) / 10)
      return -1;
    amount = amount * 10 + (uint64_t) (p[i] - '0');
    i++;
  }
  if (i == 0)
    return -1;
  char unit[4] = {0};
  size_t ulen = n - i;
  if (ulen > 2)
    return -1;
  for (size_t k = 0; k < ulen; k++)
    unit[k] = (char) tolower((unsigned char) p[i + k]);
  static const struct {
    const char *u;
    uint64_t mul;
  } units[] = {
      {"", 1},
      {"b", 1},
      {"k", 1000ull},
      {"kb", 1000ull},
      {"ki", 1024ull},
      {"m", 1000000ull},
      {"mb", 1000000ull},
      {"mi", 1ull << 20},
      {"g", 1000000000ull},
      {"gb", 1000000000ull},
      {"gi", 1ull << 30},
      {"t", 1000000000000ull},
      {"tb", 1000000000000ull},
      {"ti", 1ull << 40},
  };
  for (size_t k = 0; k < ARRAY_SIZE(units); k++) {
    if (strcmp(unit, units[k].u) != 0)
      continue;
    if (amount > UINT64_MAX / units[k].mul)
      return -1;
    *bytes = amount * units[k].mul;
    return 0;
  }
  return -1;
}

int sbxd_parse_cpu(const char *s, double *cpus)
{
  if (s == NULL)
    return -1;
  size_t n;
  const char *p = trim(s, &n);
  if (n == 0 || n > 64)
    return -1;
  char buf[72];
  memcpy(buf, p, n);
  buf[n] = '\0';
  bool milli = false;
  if (buf[n - 1] == 'm' || buf[n - 1] == 'M') {
    milli = true;
    buf[--n] = '\0';
  }
  if (n == 0)
    return -1;
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (errno || *end != '\0' || !isfinite(v) || v <= 0)
    return -1;
  if (milli)
    v /= 1000.0;
  *cpus = v;
  return 0;
}

int sbxd_mode_from_decimal(int64_t dec, unsigned *mode)
{
  if (dec < 0 || dec > 7777)
    return -1;
  unsigned m = 0, shift = 0;
  while (dec > 0) {
    int digit = (int) (dec % 10);
    if (digit > 7)
      return -1;
    m |= (unsigned) digit << shift;
    shift += 3;
    dec /= 10;
  }
  *mode = m;
  return 0;
}

unsigned sbxd_mode_to_decimal(unsigned mode)
{
  unsigned dec = 0, mul = 1;
  mode &= 07777;
  while (mode) {
    dec += (mode & 7) * mul;
    mul *= 10;
    mode >>= 3;
  }
  return dec;
}

/* ---- labels ---- */

static bool label_name_valid(const char *s, size_t n, size_t max)
{
  if (n == 0 || n > max || !isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char) s[i];
    if (!isalnum(c) && c != '-' && c != '_' && c != '.')
      return false;
  }
  return true;
}

static bool dns_label_n(const char *s, size_t n, size_t max)
{
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
      return false;
  }
  return true;
}

bool sbxd_dns_label_valid(const char *s, size_t max)
{
  return s && dns_label_n(s, strlen(s), max);
}

static bool dns_subdomain_valid(const char *s, size_t n)
{
  if (n == 0 || n > 253)
    return false;
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '.') {
      if (!dns_label_n(s + start, i - start, 253))
        return false;
      start = i + 1;
    }
  }
  return true;
}

bool sbxd_label_key_valid(const char *key)
{
  if (key == NULL)
    return false;
  const char *slash = strchr(key, '/');
  const char *name = key;
  if (slash) {
    if (!dns_subdomain_valid(key, (size_t) (slash - key)))
      return false;
    name = slash + 1;
  }
  return label_name_valid(name, strlen(name), 63);
}

bool sbxd_label_value_valid(const char *value)
{
  if (value == NULL)
    return false;
  size_t n = strlen(value);
  return n == 0 || label_name_valid(value, n, 63);
}

/* ---- query strings ---- */

static int hexval(char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

char *sbxd_url_decode(const char *s, size_t len, bool plus)
{
  sbx_buf_t b = {0};
  sbx__buf_reserve(&b, len + 1);
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (c == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      c = (char) (hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else if (c == '+' && plus) {
      c = ' ';
    }
    if (c == '\0') {
      sbx__buf_free(&b);
      return NULL;
    }
    sbx__buf_putc(&b, c);
  }
  return sbx__buf_steal(&b);
}

int sbxd_parse_qsl(const char *s, sbx_strv_t *keys, sbx_strv_t *values, char **bad)
{
  *bad = NULL;
  const char *p = s;
  for (;;) {
    const char *amp = strchr(p, '&');
    size_t n = amp ? (size_t) (amp - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    if (eq == NULL) {
      *bad = xstrndup(p, n);
      return -1;
    }
    char *k = sbxd_url_decode(p, (size_t) (eq - p), true);
    char *v = sbxd_url_decode(eq + 1, n - (size_t) (eq - p) - 1, true);
    if (k == NULL || v == NULL) {
      free(k);
      free(v);
      *bad = xstrndup(p, n);
      return -1;
    }
    sbx__strv_push_owned(keys, k);
    sbx__strv_push_owned(values, v);
    if (amp == NULL)
      return 0;
    p = amp + 1;
  }
}

/* ---- paths ---- */

char *sbxd_path_clean(const char *path)
{
  if (path == NULL || *path == '\0')
    return NULL;
  cleanup_free char *expanded = NULL;
  if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
    expanded = xasprintf("/root%s", path + 1);
  else if (strncmp(path, "${HOME}", 7) == 0 && (path[7] == '\0' || path[7] == '/'))
    expanded = xasprintf("/root%s", path + 7);
  else if (strncmp(path, "$HOME", 5) == 0 && (path[5] == '\0' || path[5] == '/'))
    expanded = xasprintf("/root%s", path + 5);
  else
    expanded = xstrdup(path);
  sbx_strv_t segs = {0};
  char *save = NULL;
  for (char *tok = strtok_r(expanded, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
    if (strcmp(tok, ".") == 0)
      continue;
    if (strcmp(tok, "..") == 0) {
      if (segs.n > 0) {
        free(segs.v[--segs.n]);
        segs.v[segs.n] = NULL;
      }
      continue;
    }
    sbx__strv_push(&segs, tok);
  }
  sbx_buf_t b = {0};
  for (size_t i = 0; i < segs.n; i++) {
    sbx__buf_putc(&b, '/');
    sbx__buf_puts(&b, segs.v[i]);
  }
  if (b.len == 0)
    sbx__buf_putc(&b, '/');
  sbx__strv_free(&segs);
  return sbx__buf_steal(&b);
}

/* ---- Range ---- */

static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
  if (n == 0 || n > 19)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char) s[i]))
      return false;
    v = v * 10 + (uint64_t) (s[i] - '0');
  }
  *out = v;
  return true;
}

int sbxd_range_parse(const char *header, uint64_t size, uint64_t *offset, uint64_t *length)
{
  if (header == NULL)
    return SBXD_RANGE_NONE;
  size_t n;
  const char *p = trim(header, &n);
  if (n < 6 || strncasecmp(p, "bytes=", 6) != 0)
    return SBXD_RANGE_BAD;
  p += 6;
  n -= 6;
  const char *comma = memchr(p, ',', n);
  if (comma)
    n = (size_t) (comma - p);
  while (n && (*p == ' ' || *p == '\t')) {
    p++;
    n--;
  }
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  const char *dash = memchr(p, '-', n);
  if (dash == NULL)
    return SBXD_RANGE_BAD;
  size_t a_len = (size_t) (dash - p), b_len = n - a_len - 1;
  uint64_t a = 0, b = 0;
  if (a_len == 0) {
    if (!parse_u64(dash + 1, b_len, &b))
      return SBXD_RANGE_BAD;
    if (b == 0 || size == 0)
      return SBXD_RANGE_UNSATISFIABLE;
    if (b > size)
      b = size;
    *offset = size - b;
    *length = b;
    return SBXD_RANGE_OK;
  }
  if (!parse_u64(p, a_len, &a))
    return SBXD_RANGE_BAD;
  if (b_len == 0) {
    b = size ? size - 1 : 0;
  } else {
    if (!parse_u64(dash + 1, b_len, &b))
      return SBXD_RANGE_BAD;
    if (b < a)
      return SBXD_RANGE_BAD;
  }
  if (a >= size)
    return SBXD_RANGE_UNSATISFIABLE;
  if (b >= size)
    b = size - 1;
  *offset = a;
  *length = b - a + 1;
  return SBXD_RANGE_OK;
}

/* ---- upstream HTTP heads ---- */

void sbxd_http_head_free(struct sbxd_http_head *h)
{
  free(h->reason);
  sbx__strv_free(&h->names);
  sbx__strv_free(&h->values);
  memset(h, 0, sizeof *h);
}

static bool token_char(unsigned char c)
{
  return c > 32 && c < 127 && !strchr("()<>@,;:\\\"/[]?={}", c);
}

int sbxd_http_head_parse(const char *buf, size_t len, size_t max, struct sbxd_http_head *h)
{
  memset(h, 0, sizeof *h);
  size_t end = 0;
  for (size_t i = 0; i < len; i++) {
    if (buf[i] != '\n')
      continue;
    if (i + 1 < len && buf[i + 1] == '\n') {
      end = i + 2;
      break;
    }
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
      end = i + 3;
      break;
    }
  }
  if (end == 0)
    return len > max ? -1 : 0;
  if (end > max)
    return -1;
  /* status line */
  const char *p = buf, *lim = buf + end;
  const char *eol = memchr(p, '\n', (size_t) (lim - p));
  size_t ll = (size_t) (eol - p);
  if (ll && p[ll - 1] == '\r')
    ll--;
  if (ll < 12 || strncmp(p, "HTTP/1.", 7) != 0 || !isdigit((unsigned char) p[7]) || p[8] != ' ' ||
      !isdigit((unsigned char) p[9]) || !isdigit((unsigned char) p[10]) ||
      !isdigit((unsigned char) p[11]) || (ll > 12 && p[12] != ' '))
    return -1;
  h->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
  if (h->status < 100)
    return -1;
  h->reason = ll > 13 ? xstrndup(p + 13, ll - 13) : xstrdup("");
  for (size_t i = 0; h->reason[i]; i++)
    if ((unsigned char) h->reason[i] < 32 && h->reason[i] != '\t')
      goto bad;
  p = eol + 1;
  for (;;) {
    eol = memchr(p, '\n', (size_t) (lim - p));
    if (eol == NULL)
      goto bad;
    ll = (size_t) (eol - p);
    if (ll && p[ll - 1] == '\r')
      ll--;
    if (ll == 0)
      break;
    const char *colon = memchr(p, ':', ll);
    if (colon == NULL || colon == p)
      goto bad;
    for (const char *q = p; q < colon; q++)
      if (!token_char((unsigned char) *q))
        goto bad;
    const char *v = colon + 1, *ve = p + ll;
    while (v < ve && (*v == ' ' || *v == '\t'))
      v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
    for (const char *q = v; q < ve; q++)
      if (((unsigned char) *q < 32 && *q != '\t') || *q == 127)
        goto bad;
    char *name = xstrndup(p, (size_t) (colon - p));
    char *value = xstrndup(v, (size_t) (ve - v));
    if (strcasecmp(name, "Transfer-Encoding") == 0) {
      size_t vl = strlen(value);
      h->chunked = vl >= 7 && strcasecmp(value + vl - 7, "chunked") == 0;
      if (!h->chunked && vl > 0) {
        free(name);
        free(value);
        goto bad; /* a coding we cannot decode */
      }
    } else if (strcasecmp(name, "Content-Length") == 0) {
      uint64_t cl;
      if (!parse_u64(value, strlen(value), &cl) || (h->has_length && cl != h->length)) {
        free(name);
        free(value);
        goto bad;
      }
      h->has_length = true;
      h->length = cl;
    }
    sbx__strv_push_owned(&h->names, name);
    sbx__strv_push_owned(&h->values, value);
    p = eol + 1;
  }
  if (h->chunked)
    h->has_length = false;
  h->head_len = end;
  return 1;
bad:
  sbxd_http_head_free(h);
  return -1;
}

/* ---- chunked ---- */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_DONE };
#define CH_LINE_MAX 8192

int sbxd_chunked_decode(struct sbxd_chunked *c, char *data, size_t len, size_t *out_len,
                        size_t *consumed)
{
  size_t in = 0, out = 0;
  int ret = 0;
  while (in < len && c->state != CH_DONE) {
    char ch = data[in];
    switch (c->state) {
    case CH_SIZE:
      if (hexval(ch) >= 0) {
        if (++c->digits > 15)
          return -1;
        c->remaining = c->remaining * 16 + (uint64_t) hexval(ch);
        in++;
      } else if (c->digits == 0) {
        return -1;
      } else if (ch == ';' || ch == ' ' || ch == '\t') {
        c->state = CH_EXT;
        c->line_len = 0;
        in++;
      } else if (ch == '\r') {
        c->state = CH_SIZE_LF;
        in++;
      } else if (ch == '\n') {
        in++;
        goto size_done;
      } else {
        return -1;
      }
      break;
    case CH_EXT:
      in++;
      if (ch == '\n')
        goto size_done;
      if (++c->line_len > CH_LINE_MAX)
        return -1;
      break;
    case CH_SIZE_LF:
      if (ch != '\n')
        return -1;
      in++;
    size_done:
      c->digits = 0;
      if (c->remaining == 0) {
        c->state = CH_TRAILER;
        c->line_len = 0;
      } else {
        c->state = CH_DATA;
      }
      break;
    case CH_DATA: {
      size_t avail = len - in;
      size_t take = c->remaining < avail ? (size_t) c->remaining : avail;
      memmove(data + out, data + in, take);
      out += take;
      in += take;
      c->remaining -= take;
      if (c->remaining == 0)
        c->state = CH_DATA_CR;
      break;
    }
    case CH_DATA_CR:
      in++;
      if (ch == '\r')
        c->state = CH_DATA_LF;
      else if (ch == '\n')
        c->state = CH_SIZE;
      else
        return -1;
      break;
    case CH_DATA_LF:
      if (ch != '\n')
        return -1;
      in++;
      c->state = CH_SIZE;
      break;
    case CH_TRAILER:
      in++;
      if (ch == '\n') {
        if (c->line_len == 0)
          c->state = CH_DONE;
        c->line_len = 0;
      } else if (ch != '\r' || c->line_len > 0) {
        if (++c->line_len > CH_LINE_MAX)
          return -1;
      }
      break;
    default:
      return -1;
    }
  }
  if (c->state == CH_DONE)
    ret = 1;
  *out_len = out;
  *consumed = in;
  return ret;
}

/* ---- lines ---- */

static size_t utf8_cut(const char *s, size_t n)
{
  /* the largest prefix length <= n that does not split a UTF-8 sequence */
  size_t cut = n;
  for (int back = 0; back < 4 && cut > 0; back++) {
    unsigned char c = (unsigned char) s[cut - 1];
    if ((c & 0x80) == 0)
      return cut;
    if ((c & 0xC0) == 0xC0) {
      size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      return n - (cut - 1) >= need ? n : cut - 1;
    }
    cut--;
  }
  return n;
}

void sbxd_lines_feed(struct sbxd_lines *l, const char *data, size_t len, sbxd_line_fn fn, void *arg)
{
  size_t max = l->max_line ? l->max_line : (1u << 20);
  size_t i = 0;
  while (i < len) {
    if (l->cr) {
      l->cr = false;
      if (data[i] == '\n') {
        i++;
        continue;
      }
    }
    size_t j = i;
    while (j < len && data[j] != '\n' && data[j] != '\r')
      j++;
    if (j > i)
      sbx__buf_append(&l->part, data + i, j - i);
    while (l->part.len >= max) {
      size_t cut = utf8_cut(l->part.data, max);
      if (cut == 0)
        cut = max;
      fn(arg, l->part.data, cut);
      memmove(l->part.data, l->part.data + cut, l->part.len - cut);
      l->part.len -= cut;
      l->part.data[l->part.len] = '\0';
    }
    if (j == len)
      break;
    fn(arg, l->part.data ? l->part.data : "", l->part.len);
    l->part.len = 0;
    if (l->part.data)
      l->part.data[0] = '\0';
    l->cr = data[j] == '\r';
    i = j + 1;
  }
}

void sbxd_lines_flush(struct sbxd_lines *l, sbxd_line_fn fn, void *arg)
{
  if (l->part.len > 0) {
    fn(arg, l->part.data, l->part.len);
    l->part.len = 0;
    l->part.data[0] = '\0';
  }
  l->cr = false;
}

void sbxd_lines_free(struct sbxd_lines *l)
{
  sbx__buf_free(&l->part);
}

bool sbxd_secret_equal(const char *a, const char *b)
{
  if (a == NULL || b == NULL)
    return false;
  size_t la = strlen(a), lb = strlen(b);
  unsigned char diff = la != lb;
  for (size_t i = 0; i < lb; i++)
    diff |= (unsigned char) (a[i % (la ? la : 1)] ^ b[i]);
  return diff == 0 && la == lb;
}
