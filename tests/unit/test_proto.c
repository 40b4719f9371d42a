/* Unit tests for src/common/proto.c: framing and TLV bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proto.h"

static void test_tlv_roundtrip(void **state)
{
  (void) state;
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, "/a/b");
  sbx__tlv_put_u64(&w, SBX_T_MAX, 1234567890123ull);
  sbx__tlv_put_i64(&w, SBX_T_START, -5);
  sbx__tlv_put(&w, SBX_T_TEXT, "x\0y", 3);
  char *s = NULL;
  uint64_t u;
  int64_t i;
  assert_int_equal(sbx__tlv_get_str(w.buf.data, w.buf.len, SBX_T_PATH, &s), 1);
  assert_string_equal(s, "/a/b");
  free(s);
  assert_int_equal(sbx__tlv_get_u64(w.buf.data, w.buf.len, SBX_T_MAX, 0, &u), 1);
  assert_true(u == 1234567890123ull);
  assert_int_equal(sbx__tlv_get_i64(w.buf.data, w.buf.len, SBX_T_START, 0, &i), 1);
  assert_true(i == -5);
  assert_int_equal(sbx__tlv_get_u64(w.buf.data, w.buf.len, SBX_T_LIMIT, 7, &u), 0);
  assert_true(u == 7);
  /* a string with a NUL inside is refused */
  assert_int_equal(sbx__tlv_get_str(w.buf.data, w.buf.len, SBX_T_TEXT, &s), -1);
  /* a number of the wrong width is refused */
  assert_int_equal(sbx__tlv_get_u64(w.buf.data, w.buf.len, SBX_T_PATH, 0, &u), -1);
  assert_true(sbx__tlv_valid(w.buf.data, w.buf.len));
  sbx__tlv_free(&w);
}

static void test_tlv_malformed(void **state)
{
  (void) state;
  /* a field claiming more bytes than the payload has */
  unsigned char bad[] = {2, 0, 0xff, 0xff, 0xff, 0x7f, 'a'};
  assert_false(sbx__tlv_valid(bad, sizeof bad));
  char *s;
  assert_int_equal(sbx__tlv_get_str(bad, sizeof bad, SBX_T_PATH, &s), -1);
  unsigned char shorthdr[] = {2, 0, 1};
  assert_false(sbx__tlv_valid(shorthdr, sizeof shorthdr));
  assert_true(sbx__tlv_valid(NULL, 0));
}

static void test_frames(void **state)
{
  (void) state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(sbx__frame_send(sv[0], SBX_MSG_DATA, 42, "hello", 5), 0);
  sbx_frame_hdr_t h;
  char *p;
  assert_int_equal(sbx__frame_recv(sv[1], &h, &p, 1024), 0);
  assert_int_equal(h.type, SBX_MSG_DATA);
  assert_int_equal(h.req, 42);
  assert_int_equal(h.len, 5);
  assert_memory_equal(p, "hello", 5);
  free(p);
  /* a frame over the receiver's bound is refused before any allocation */
  assert_int_equal(sbx__frame_send(sv[0], SBX_MSG_DATA, 1, "0123456789", 10), 0);
  assert_int_equal(sbx__frame_recv(sv[1], &h, &p, 4), -1);
  assert_int_equal(errno, EMSGSIZE);
  /* an error frame round trip */
  assert_int_equal(sbx__frame_send_error(sv[0], 9, SBX_E_NOT_FOUND, ENOENT, "File not found: /x"),
                   0);
  close(sv[1]);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(sbx__frame_send_error(sv[0], 9, SBX_E_NOT_FOUND, ENOENT, "File not found: /x"),
                   0);
  assert_int_equal(sbx__frame_recv(sv[1], &h, &p, 1024), 0);
  assert_int_equal(h.type, SBX_MSG_ERR);
  sbx_error_t err = NULL;
  assert_int_equal(sbx__error_from_frame(p, h.len, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  assert_int_equal(err->status, ENOENT);
  assert_string_equal(err->msg, "File not found: /x");
  sbx_error_release(&err);
  free(p);
  /* EOF mid-header */
  close(sv[0]);
  assert_int_equal(sbx__frame_recv(sv[1], &h, &p, 1024), -1);
  close(sv[1]);
}

/* A buffer is a string at every step, even when space was reserved and nothing appended
 * (regression: sbxd's URL decoding of an empty metadata key handed jansson unterminated
 * memory; found by fuzz_sbxd_request). */
static void test_buf_always_terminated(void **state)
{
  (void) state;
  sbx_buf_t b = {0};
  sbx__buf_reserve(&b, 100);
  char *s = sbx__buf_steal(&b);
  assert_string_equal(s, "");
  free(s);
  sbx__buf_putc(&b, 'x');
  sbx__buf_reserve(&b, 1000);
  assert_string_equal(b.data, "x");
  sbx__buf_free(&b);
}

static void test_fd_passing(void **state)
{
  (void) state;
  int sv[2], pipefd[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(pipe(pipefd), 0);
  assert_int_equal(sbx__frame_send_fd(sv[0], SBX_MSG_OK, 3, "ok", 2, pipefd[1]), 0);
  sbx_frame_hdr_t h;
  char *p;
  int got = -1;
  assert_int_equal(sbx__frame_recv_fd(sv[1], &h, &p, 1024, &got), 0);
  assert_true(got >= 0);
  assert_int_equal(h.len, 2);
  assert_int_equal(write(got, "z", 1), 1);
  char c;
  assert_int_equal(read(pipefd[0], &c, 1), 1);
  assert_int_equal(c, 'z');
  free(p);
  close(got);
  close(pipefd[0]);
  close(pipefd[1]);
  close(sv[0]);
  close(sv[1]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tlv_roundtrip),
      cmocka_unit_test(test_tlv_malformed),
      cmocka_unit_test(test_frames),
      cmocka_unit_test(test_fd_passing),
      cmocka_unit_test(test_buf_always_terminated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
