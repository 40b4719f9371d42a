/* libFuzzer target for sbxd's WebSocket frame parser (src/daemon/ws.c).
 *
 * The input is what a client sends after the handshake. It is parsed twice, once in a single
 * feed and once cut into pieces whose sizes come from the input itself, with a small message
 * limit; both runs must give the same events and the same verdict (a read may split a frame
 * anywhere), every event must stay within what was fed, and a failure must name a close code
 * from RFC 6455's list. A bit of the first byte makes it the client's side (sbx attach).
 *
 * The parser is compiled into this target (h2o's style):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc/common \
 *     fuzz/fuzz_ws.c src/common/util.c src/common/text.c src/common/base64.c \
 *     src/common/error.c -o fuzz_ws */
#include "../src/daemon/ws.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void record(sbx_buf_t *log, const struct ws_event *ev, size_t fed)
{
  if (ev->len > SBXD_WS_MAX_MESSAGE || ev->len > fed)
    abort();
  sbx__buf_printf(log, "<%d %d %zu:", ev->op, ev->code, ev->len);
  sbx__buf_append(log, ev->data, ev->len);
  sbx__buf_putc(log, '>');
}

static int run(const uint8_t *d, size_t n, const uint8_t *cuts, size_t n_cuts, bool client,
               sbx_buf_t *log)
{
  struct ws_rx rx = {.max = 4096, .client = client};
  struct ws_event ev;
  size_t off = 0, c = 0;
  int r = 0;
  while (off < n && r >= 0) {
    size_t take = n_cuts ? (size_t) (cuts[c++ % n_cuts] % 32) + 1 : n - off;
    if (take > n - off)
      take = n - off;
    sbxd_ws_feed(&rx, d + off, take);
    off += take;
    while ((r = sbxd_ws_next(&rx, &ev)) == 1)
      record(log, &ev, off);
  }
  if (r < 0) {
    int code = rx.close_code;
    if (code != WS_CLOSE_PROTOCOL && code != WS_CLOSE_BAD_DATA && code != WS_CLOSE_TOO_BIG)
      abort();
    sbx__buf_printf(log, "!%d", code);
  }
  sbxd_ws_rx_free(&rx);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  /* the first byte says how many of the next bytes are cut sizes, and which side parses */
  size_t n_cuts = size ? data[0] % 16 : 0;
  bool client = size && (data[0] & 0x10);
  if (size < 1 + n_cuts)
    return 0;
  const uint8_t *cuts = data + 1, *d = data + 1 + n_cuts;
  size_t n = size - 1 - n_cuts;
  sbx_buf_t a = {0}, b = {0};
  run(d, n, NULL, 0, client, &a);
  run(d, n, cuts, n_cuts, client, &b);
  if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0))
    abort();
  sbx__buf_free(&a);
  sbx__buf_free(&b);
  /* the encoder's frames parse back (masked with a zero key) to the same payload */
  sbx_buf_t out = {0};
  sbxd_ws_frame(&out, WS_OP_BINARY, d, n > 300 ? 300 : n);
  out.data[1] = (char) (out.data[1] | 0x80);
  size_t hl = (out.data[1] & 0x7f) < 126 ? 2 : 4;
  sbx_buf_t masked = {0};
  sbx__buf_append(&masked, out.data, hl);
  sbx__buf_append(&masked, "\0\0\0\0", 4);
  sbx__buf_append(&masked, out.data + hl, out.len - hl);
  struct ws_rx rx = {0};
  struct ws_event ev;
  sbxd_ws_feed(&rx, masked.data, masked.len);
  if (sbxd_ws_next(&rx, &ev) != 1 || ev.len != (n > 300 ? 300 : n) ||
      (ev.len && memcmp(ev.data, d, ev.len) != 0))
    abort();
  sbxd_ws_rx_free(&rx);
  /* and the client's frames parse on the server's side */
  struct ws_rx srx = {0};
  out.len = 0;
  sbxd_ws_client_frame(&out, WS_OP_BINARY, d, n > 300 ? 300 : n);
  sbxd_ws_feed(&srx, out.data, out.len);
  if (sbxd_ws_next(&srx, &ev) != 1 || ev.len != (n > 300 ? 300 : n) ||
      (ev.len && memcmp(ev.data, d, ev.len) != 0))
    abort();
  sbxd_ws_rx_free(&srx);
  sbx__buf_free(&out);
  sbx__buf_free(&masked);
  return 0;
}
