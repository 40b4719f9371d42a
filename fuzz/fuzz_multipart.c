/* libFuzzer target for sbxd's incremental multipart/form-data parser (src/daemon/multipart.c).
 *
 * Input: a boundary line, then the body. The body is parsed twice, once in a single feed and once
 * cut into pieces whose sizes come from the input itself, and both runs must produce exactly the
 * same parts, bytes and verdict (the parser's whole point is that reads may split anything,
 * including the delimiter). It must never hand out more bytes than it was given.
 *
 * The parser is compiled into this target (h2o's style), so it needs nothing but the common
 * helpers: `sbx_fuzzer(fuzz_multipart)` in fuzz/CMakeLists.txt, or by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc/common \
 *     fuzz/fuzz_multipart.c src/common/util.c -o fuzz_multipart */
#include "../src/daemon/multipart.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct record {
  sbx_buf_t log;
  size_t bytes;
  int parts;
};

static void log_str(sbx_buf_t *b, const char *s)
{
  if (s == NULL) {
    sbx__buf_puts(b, "(null)");
    return;
  }
  sbx__buf_printf(b, "%zu:", strlen(s));
  sbx__buf_puts(b, s);
}

static int rec_begin(void *arg, const struct sbxd_mp_part *p)
{
  struct record *r = arg;
  r->parts++;
  sbx__buf_puts(&r->log, "<B ");
  log_str(&r->log, p->name);
  log_str(&r->log, p->filename);
  log_str(&r->log, p->content_type);
  sbx__buf_puts(&r->log, ">");
  return 0;
}

static int rec_data(void *arg, const char *d, size_t n)
{
  struct record *r = arg;
  if (n == 0)
    abort(); /* empty data callbacks are never made */
  r->bytes += n;
  sbx__buf_append(&r->log, d, n);
  return 0;
}

static int rec_end(void *arg)
{
  struct record *r = arg;
  sbx__buf_puts(&r->log, "<E>");
  return 0;
}

static const struct sbxd_mp_callbacks cb = {rec_begin, rec_data, rec_end};

/* Parses body in pieces (sizes from seed; seed NULL: one piece); returns the verdict. */
static int run(const char *boundary, const uint8_t *body, size_t n, const uint8_t *seed,
               size_t seed_len, struct record *r)
{
  struct sbxd_mp mp;
  sbxd_mp_init(&mp, boundary, &cb, r);
  int rc = SBXD_MP_OK;
  size_t off = 0, k = 0;
  while (off < n && rc == SBXD_MP_OK) {
    size_t piece = n - off;
    if (seed && seed_len) {
      piece = (size_t) seed[k++ % seed_len] % 17 + 1;
      if (piece > n - off)
        piece = n - off;
    }
    rc = sbxd_mp_feed(&mp, (const char *) body + off, piece);
    off += piece;
  }
  if (rc == SBXD_MP_OK)
    rc = sbxd_mp_finish(&mp);
  if (r->bytes > n)
    abort(); /* more bytes out than in */
  sbxd_mp_free(&mp);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *nl = memchr(data, '\n', size < 80 ? size : 80);
  if (nl == NULL)
    return 0;
  size_t blen = (size_t) (nl - data);
  char header[128];
  snprintf(header, sizeof header, "multipart/form-data; boundary=\"%.*s\"", (int) blen,
           (const char *) data);
  char *boundary = sbxd_mp_boundary(header);
  if (boundary == NULL)
    return 0;
  const uint8_t *body = nl + 1;
  size_t n = size - blen - 1;
  struct record whole = {0}, pieces = {0};
  int a = run(boundary, body, n, NULL, 0, &whole);
  int b = run(boundary, body, n, data, blen ? blen : 1, &pieces);
  if (a != b || whole.log.len != pieces.log.len ||
      (whole.log.len && memcmp(whole.log.data, pieces.log.data, whole.log.len) != 0))
    abort(); /* the result depends on how the body was split */
  sbx__buf_free(&whole.log);
  sbx__buf_free(&pieces.log);
  free(boundary);
  return 0;
}
