/* Unit tests for src/daemon/ws.c: SHA-1, the handshake's accept value, the frame parser's
 * acceptance and its close code for every protocol violation, and frame encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ws.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha1(const char *in, size_t n, const char *want)
{
  uint8_t d[20];
  char h[41];
  sbxd_sha1(in, n, d);
  hex(d, 20, h);
  assert_string_equal(h, want);
}

static void test_sha1(void **state)
{
  (void) state;
  check_sha1("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  check_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
  check_sha1(two, strlen(two), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  char *million = malloc(1000000);
  memset(million, 'a', 1000000);
  check_sha1(million, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  free(million);
  char s64[64];
  memset(s64, 'x', sizeof s64); /* a whole block, then padding alone */
  uint8_t d[20];
  sbxd_sha1(s64, 64, d);
  sbxd_sha1(s64, 55, d); /* the largest tail that fits one block with its length */
}

static void test_accept(void **state)
{
  (void) state;
  char out[29];
  assert_true(sbxd_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out)); /* RFC 6455 section 1.3 */
  assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  assert_false(sbxd_ws_accept(NULL, out));
  assert_false(sbxd_ws_accept("", out));
  assert_false(sbxd_ws_accept("dGhlIHNhbXBsZSBub25jZQ=", out));   /* 23 characters */
  assert_false(sbxd_ws_accept("dGhlIHNhbXBsZSBub25jZQ===", out)); /* 25 */
  assert_false(sbxd_ws_accept("dGhlIHNhbXBsZSBub25j!Q==", out));  /* not base64 */
  assert_false(sbxd_ws_accept("dGhlIHNhbXBsZSBub25jZWFh", out));  /* 18 bytes */
}

/* A masked client frame. */
static size_t frame(uint8_t *out, bool fin, int op, const void *payload, size_t n)
{
  static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
  size_t h = 0;
  out[h++] = (uint8_t) ((fin ? 0x80 : 0) | op);
  if (n < 126) {
    out[h++] = (uint8_t) (0x80 | n);
  } else if (n <= 0xffff) {
    out[h++] = 0x80 | 126;
    out[h++] = (uint8_t) (n >> 8);
    out[h++] = (uint8_t) n;
  } else {
    out[h++] = 0x80 | 127;
    for (int i = 0; i < 8; i++)
      out[h++] = (uint8_t) ((uint64_t) n >> (56 - 8 * i));
  }
  memcpy(out + h, key, 4);
  h += 4;
  for (size_t i = 0; i < n; i++)
    out[h + i] = ((const uint8_t *) payload)[i] ^ key[i & 3];
  return h + n;
}

static void test_text_whole_and_split(void **state)
{
  (void) state;
  uint8_t buf[64];
  size_t n = frame(buf, true, WS_OP_TEXT, "Hello", 5);
  struct ws_rx rx = {0};
  struct ws_event ev;
  sbxd_ws_feed(&rx, buf, n);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
  assert_int_equal(ev.op, WS_OP_TEXT);
  assert_int_equal(ev.len, 5);
  assert_memory_equal(ev.data, "Hello", 5);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 0);
  /* one byte at a time: nothing until the last byte */
  for (size_t i = 0; i < n; i++) {
    sbxd_ws_feed(&rx, buf + i, 1);
    assert_int_equal(sbxd_ws_next(&rx, &ev), i + 1 == n ? 1 : 0);
  }
  assert_memory_equal(ev.data, "Hello", 5);
  sbxd_ws_rx_free(&rx);
}

static void test_lengths(void **state)
{
  (void) state;
  size_t sizes[] = {0, 125, 126, 65535, 65536, 200000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t len = sizes[k];
    uint8_t *payload = malloc(len + 1), *buf = malloc(len + 14);
    for (size_t i = 0; i < len; i++)
      payload[i] = (uint8_t) (i * 7);
    size_t n = frame(buf, true, WS_OP_BINARY, payload, len);
    struct ws_rx rx = {0};
    struct ws_event ev;
    sbxd_ws_feed(&rx, buf, n);
    assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
    assert_int_equal(ev.op, WS_OP_BINARY);
    assert_int_equal(ev.len, len);
    if (len)
      assert_memory_equal(ev.data, payload, len);
    sbxd_ws_rx_free(&rx);
    /* the server's encoding of the same payload: the same header form, unmasked */
    sbx_buf_t out = {0};
    sbxd_ws_frame(&out, WS_OP_BINARY, payload, len);
    assert_int_equal(out.len, n - 4);
    assert_int_equal((uint8_t) out.data[0], 0x82);
    assert_int_equal((uint8_t) out.data[1] & 0x80, 0);
    assert_int_equal((uint8_t) out.data[1], (uint8_t) (buf[1] & 0x7f));
    sbx__buf_free(&out);
    free(payload);
    free(buf);
  }
}

static void test_fragments_with_ping(void **state)
{
  (void) state;
  uint8_t buf[256];
  size_t n = frame(buf, false, WS_OP_TEXT, "frag", 4);
  n += frame(buf + n, true, WS_OP_PING, "p!", 2);
  n += frame(buf + n, false, WS_OP_CONT, "men", 3);
  n += frame(buf + n, true, WS_OP_CONT, "ted", 3);
  struct ws_rx rx = {0};
  struct ws_event ev;
  sbxd_ws_feed(&rx, buf, n);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
  assert_int_equal(ev.op, WS_OP_PING); /* a control frame may come between fragments */
  assert_memory_equal(ev.data, "p!", 2);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
  assert_int_equal(ev.op, WS_OP_TEXT);
  assert_int_equal(ev.len, 10);
  assert_memory_equal(ev.data, "fragmented", 10);
  sbxd_ws_rx_free(&rx);
}

static void test_close(void **state)
{
  (void) state;
  uint8_t buf[64], p[] = {0x03, 0xe8, 'b', 'y', 'e'};
  size_t n = frame(buf, true, WS_OP_CLOSE, p, sizeof p);
  n += frame(buf + n, true, WS_OP_TEXT, "after", 5);
  struct ws_rx rx = {0};
  struct ws_event ev;
  sbxd_ws_feed(&rx, buf, n);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
  assert_int_equal(ev.op, WS_OP_CLOSE);
  assert_int_equal(ev.code, 1000);
  assert_int_equal(ev.len, 3);
  assert_memory_equal(ev.data, "bye", 3);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 0); /* nothing after a close counts */
  sbxd_ws_rx_free(&rx);

  struct ws_rx rx2 = {0};
  n = frame(buf, true, WS_OP_CLOSE, "", 0);
  sbxd_ws_feed(&rx2, buf, n);
  assert_int_equal(sbxd_ws_next(&rx2, &ev), 1);
  assert_int_equal(ev.code, WS_CLOSE_NO_STATUS);
  sbxd_ws_rx_free(&rx2);

  sbx_buf_t out = {0};
  sbxd_ws_close_frame(&out, 4001, "TAKEN_OVER");
  assert_int_equal(out.len, 2 + 2 + 10);
  assert_int_equal((uint8_t) out.data[0], 0x88);
  assert_int_equal((uint8_t) out.data[2], 4001 >> 8);
  assert_int_equal((uint8_t) out.data[3], 4001 & 0xff);
  sbx__buf_free(&out);
}

/* bytes must fail with code */
static void expect_fail(const uint8_t *bytes, size_t n, int code, const char *why, size_t max)
{
  struct ws_rx rx = {.max = max};
  struct ws_event ev;
  sbxd_ws_feed(&rx, bytes, n);
  int r;
  while ((r = sbxd_ws_next(&rx, &ev)) == 1) {
  }
  assert_int_equal(r, -1);
  assert_int_equal(rx.close_code, code);
  if (strstr(rx.err, why) == NULL)
    fail_msg("error '%s' does not mention '%s'", rx.err, why);
  assert_int_equal(sbxd_ws_next(&rx, &ev), -1); /* and stays failed */
  sbxd_ws_rx_free(&rx);
}

static void test_violations(void **state)
{
  (void) state;
  uint8_t b[200];
  size_t n;
  const uint8_t unmasked[] = {0x81, 0x02, 'h', 'i'};
  expect_fail(unmasked, sizeof unmasked, WS_CLOSE_PROTOCOL, "masked", 0);
  n = frame(b, true, WS_OP_TEXT, "x", 1);
  b[0] |= 0x40; /* RSV1 */
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "reserved", 0);
  n = frame(b, true, 0x3, "x", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "opcode 3", 0);
  n = frame(b, true, 0xB, "x", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "opcode 11", 0);
  n = frame(b, false, WS_OP_PING, "x", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "fragmented control", 0);
  char big[126] = {0};
  n = frame(b, true, WS_OP_PONG, big, sizeof big);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "at most 125", 0);
  n = frame(b, true, WS_OP_CONT, "x", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "continuation", 0);
  n = frame(b, false, WS_OP_TEXT, "a", 1);
  n += frame(b + n, true, WS_OP_BINARY, "b", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "before the fragmented one ended", 0);
  const uint8_t short16[] = {0x82, 0x80 | 126, 0x00, 0x05, 1, 2, 3, 4, 0, 0, 0, 0, 0};
  expect_fail(short16, sizeof short16, WS_CLOSE_PROTOCOL, "shortest form", 0);
  const uint8_t short64[] = {0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 1, 2, 3, 4};
  expect_fail(short64, sizeof short64, WS_CLOSE_PROTOCOL, "shortest form", 0);
  const uint8_t top[] = {0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
  expect_fail(top, sizeof top, WS_CLOSE_PROTOCOL, "top bit", 0);
  /* too big: by the header alone (nothing buffered), and across fragments */
  const uint8_t huge[] = {0x82, 0x80 | 127, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 2, 3, 4};
  expect_fail(huge, sizeof huge, WS_CLOSE_TOO_BIG, "more than", 0);
  n = frame(b, false, WS_OP_BINARY, "abcdef", 6);
  n += frame(b + n, true, WS_OP_CONT, "ghijk", 5);
  expect_fail(b, n, WS_CLOSE_TOO_BIG, "more than 10 bytes", 10);
  const uint8_t bad_utf8[] = {0xc3, 0x28};
  n = frame(b, true, WS_OP_TEXT, bad_utf8, 2);
  expect_fail(b, n, WS_CLOSE_BAD_DATA, "UTF-8", 0);
  /* UTF-8 split across fragments is fine; cut short at the end is not */
  const uint8_t e_acute[] = {0xc3, 0xa9};
  n = frame(b, false, WS_OP_TEXT, e_acute, 1);
  n += frame(b + n, true, WS_OP_CONT, e_acute + 1, 1);
  struct ws_rx rx = {0};
  struct ws_event ev;
  sbxd_ws_feed(&rx, b, n);
  assert_int_equal(sbxd_ws_next(&rx, &ev), 1);
  assert_int_equal(ev.len, 2);
  sbxd_ws_rx_free(&rx);
  n = frame(b, true, WS_OP_TEXT, e_acute, 1);
  expect_fail(b, n, WS_CLOSE_BAD_DATA, "UTF-8", 0);
  /* close frames */
  n = frame(b, true, WS_OP_CLOSE, "\x03", 1);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "1-byte", 0);
  const uint8_t c1005[] = {0x03, 0xed}, c999[] = {0x03, 0xe7}, c5000[] = {0x13, 0x88};
  n = frame(b, true, WS_OP_CLOSE, c1005, 2);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "close code 1005", 0);
  n = frame(b, true, WS_OP_CLOSE, c999, 2);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "close code 999", 0);
  n = frame(b, true, WS_OP_CLOSE, c5000, 2);
  expect_fail(b, n, WS_CLOSE_PROTOCOL, "close code 5000", 0);
  const uint8_t bad_reason[] = {0x03, 0xe8, 0xff};
  n = frame(b, true, WS_OP_CLOSE, bad_reason, 3);
  expect_fail(b, n, WS_CLOSE_BAD_DATA, "UTF-8", 0);
}

/* The client's side: it sends masked frames the server parses, and parses unmasked ones. */
static void test_client_side(void **state)
{
  (void) state;
  size_t sizes[] = {0, 5, 126, 70000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t len = sizes[k];
    char *payload = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
      payload[i] = (char) ('a' + i % 26);
    sbx_buf_t out = {0};
    sbxd_ws_client_frame(&out, WS_OP_TEXT, payload, len);
    struct ws_rx server = {0}, client = {.client = true};
    struct ws_event ev;
    sbxd_ws_feed(&server, out.data, out.len);
    assert_int_equal(sbxd_ws_next(&server, &ev), 1);
    assert_int_equal(ev.len, len);
    if (len)
      assert_memory_equal(ev.data, payload, len);
    sbxd_ws_feed(&client, out.data, out.len); /* a masked frame: not from a server */
    assert_int_equal(sbxd_ws_next(&client, &ev), -1);
    assert_int_equal(client.close_code, WS_CLOSE_PROTOCOL);
    struct ws_rx client2 = {.client = true};
    out.len = 0;
    sbxd_ws_frame(&out, WS_OP_BINARY, payload, len);
    sbxd_ws_feed(&client2, out.data, out.len);
    assert_int_equal(sbxd_ws_next(&client2, &ev), 1);
    assert_int_equal(ev.op, WS_OP_BINARY);
    assert_int_equal(ev.len, len);
    if (len)
      assert_memory_equal(ev.data, payload, len);
    sbxd_ws_rx_free(&server);
    sbxd_ws_rx_free(&client);
    sbxd_ws_rx_free(&client2);
    sbx__buf_free(&out);
    free(payload);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha1),
      cmocka_unit_test(test_accept),
      cmocka_unit_test(test_text_whole_and_split),
      cmocka_unit_test(test_lengths),
      cmocka_unit_test(test_fragments_with_ping),
      cmocka_unit_test(test_close),
      cmocka_unit_test(test_violations),
      cmocka_unit_test(test_client_side),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
