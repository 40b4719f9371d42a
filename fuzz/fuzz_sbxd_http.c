/* libFuzzer target for the parsers sbxd applies to bytes it did not write (src/daemon/parse.c):
 * an application's HTTP response head and chunked body (the port proxy), Range headers,
 * timestamps, query strings, quantities, labels, sandbox paths and the output line splitter.
 *
 * Properties checked, besides memory safety:
 *   - the chunked decoder gives the same bytes and verdict whether fed at once or byte by byte,
 *     and never more bytes than it consumed;
 *   - a parsed head's length is within the input, and it has a status in 100..999;
 *   - a satisfiable range lies inside the file and is not empty;
 *   - a cleaned path is absolute, has no empty, "." or ".." segment, and cleans to itself;
 *   - a parsed time formats and parses back to the same millisecond;
 *   - the line splitter emits the same lines whatever the split, and no line contains CR/LF.
 *
 * Build: `sbx_fuzzer(fuzz_sbxd_http)` in fuzz/CMakeLists.txt, or by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc/common \
 *     fuzz/fuzz_sbxd_http.c src/common/util.c -o fuzz_sbxd_http */
#include "../src/daemon/parse.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_chunked(const uint8_t *data, size_t size)
{
  char *a = xmalloc(size + 1), *b = xmalloc(size + 1);
  memcpy(a, data, size);
  memcpy(b, data, size);
  struct sbxd_chunked ca = {0}, cb = {0};
  size_t out_a = 0, used_a = 0;
  int ra = sbxd_chunked_decode(&ca, a, size, &out_a, &used_a);
  if (ra >= 0 && (out_a > used_a || used_a > size))
    abort();
  sbx_buf_t got = {0};
  int rb = 0;
  size_t used_b = 0;
  for (size_t i = 0; i < size && rb == 0; i++) {
    size_t o = 0, u = 0;
    rb = sbxd_chunked_decode(&cb, b + i, 1, &o, &u);
    if (rb >= 0) {
      if (o > u || u > 1)
        abort();
      sbx__buf_append(&got, b + i, o);
      used_b += u;
    }
  }
  if ((ra < 0) != (rb < 0))
    abort();
  if (ra >= 0) {
    if (ra != rb || used_a != used_b || out_a != got.len ||
        (out_a && memcmp(a, got.data, out_a) != 0))
      abort();
  }
  sbx__buf_free(&got);
  free(a);
  free(b);
}

static void check_head(const char *s, size_t n)
{
  struct sbxd_http_head h;
  int r = sbxd_http_head_parse(s, n, 4096, &h);
  if (r == 1) {
    if (h.head_len > n || h.status < 100 || h.status > 999 || h.names.n != h.values.n)
      abort();
    if (h.chunked && h.has_length)
      abort();
    sbxd_http_head_free(&h);
  }
}

static void check_range(const char *s, uint64_t size)
{
  uint64_t off = 0, len = 0;
  int r = sbxd_range_parse(s, size, &off, &len);
  if (r == SBXD_RANGE_OK && (len == 0 || off >= size || off + len > size))
    abort();
}

static void check_path(const char *s)
{
  char *p = sbxd_path_clean(s);
  if (p == NULL)
    return;
  if (p[0] != '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../") ||
      sbx__str_has_suffix(p, "/.") || sbx__str_has_suffix(p, "/..") ||
      (strlen(p) > 1 && p[strlen(p) - 1] == '/'))
    abort();
  char *q = sbxd_path_clean(p);
  if (q == NULL || strcmp(p, q) != 0)
    abort();
  free(q);
  free(p);
}

static void check_time(const char *s)
{
  int64_t ms;
  if (sbxd_time_parse(s, &ms) < 0)
    return;
  if (ms < 0 || ms > INT64_C(253402300799999))
    return; /* years outside 1970..9999 do not format back */
  char buf[32];
  int64_t again;
  sbxd_time_format(ms, buf);
  if (sbxd_time_parse(buf, &again) < 0 || again != ms)
    abort();
}

struct lines_rec {
  sbx_buf_t log;
};

static void on_line(void *arg, const char *line, size_t len)
{
  struct lines_rec *r = arg;
  if (memchr(line, '\n', len) || memchr(line, '\r', len))
    abort();
  sbx__buf_printf(&r->log, "%zu:", len);
  sbx__buf_append(&r->log, line, len);
}

static void check_lines(const uint8_t *data, size_t size)
{
  struct sbxd_lines a = {.max_line = 64}, b = {.max_line = 64};
  struct lines_rec ra = {0}, rb = {0};
  sbxd_lines_feed(&a, (const char *) data, size, on_line, &ra);
  sbxd_lines_flush(&a, on_line, &ra);
  for (size_t i = 0; i < size;) {
    size_t n = (size_t) data[i] % 7 + 1;
    if (n > size - i)
      n = size - i;
    sbxd_lines_feed(&b, (const char *) data + i, n, on_line, &rb);
    i += n;
  }
  sbxd_lines_flush(&b, on_line, &rb);
  if (ra.log.len != rb.log.len || (ra.log.len && memcmp(ra.log.data, rb.log.data, ra.log.len)))
    abort();
  sbx__buf_free(&ra.log);
  sbx__buf_free(&rb.log);
  sbxd_lines_free(&a);
  sbxd_lines_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  check_chunked(data, size);
  check_lines(data, size);
  char *s = xstrndup((const char *) data, size); /* up to the first NUL */
  check_head(s, strlen(s));
  check_range(s, size);
  check_range(s, 0);
  check_path(s);
  check_time(s);
  sbx_strv_t k = {0}, v = {0};
  char *bad = NULL;
  if (sbxd_parse_qsl(s, &k, &v, &bad) == 0 && k.n != v.n)
    abort();
  free(bad);
  sbx__strv_free(&k);
  sbx__strv_free(&v);
  uint64_t bytes;
  double cpus;
  if (sbxd_parse_cpu(s, &cpus) == 0 && !(cpus > 0))
    abort();
  (void) sbxd_parse_memory(s, &bytes);
  (void) sbxd_label_key_valid(s);
  (void) sbxd_label_value_valid(s);
  int64_t dec;
  unsigned mode;
  if (sbxd_parse_i64(s, &dec) && sbxd_mode_from_decimal(dec, &mode) == 0 &&
      sbxd_mode_to_decimal(mode) != (unsigned) dec)
    abort();
  char *q = sbx__shell_quote(s);
  free(q);
  free(s);
  return 0;
}
