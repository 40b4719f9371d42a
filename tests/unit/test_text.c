/* Unit tests for src/common/text.c: UTF-8, read_file ranges, the rendered exec result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "text.h"
#include "util.h"

static void check_range(const char *text, int64_t start, int64_t end, const char *want)
{
  size_t n;
  char *got = sbx__text_line_range(text, strlen(text), start, end, &n);
  assert_string_equal(got, want);
  assert_int_equal(n, strlen(want));
  free(got);
}

static void test_line_range(void **state)
{
  (void) state;
  const char *t = "one\ntwo\r\nthree\nfour\n";
  check_range(t, SBX_LINE_NONE, SBX_LINE_NONE, t); /* no range: unchanged */
  check_range(t, 2, 3, "two\nthree");              /* inclusive, CRLF stripped */
  check_range(t, -5, 1, "one");                    /* start below 1 clamps to 1 */
  check_range(t, 0, 2, "one\ntwo");
  check_range(t, 3, SBX_LINE_NONE, "three\nfour"); /* no end: to EOF */
  check_range(t, SBX_LINE_NONE, 2, "one\ntwo");
  check_range(t, 5, 9, "");  /* past EOF */
  check_range(t, 2, 0, "");  /* end <= 0 */
  check_range(t, 2, -3, ""); /* negative end */
  check_range(t, 3, 2, "");  /* end < start */
  check_range("a\n\nb", 1, 3, "a\n\nb");
  check_range("no newline", 1, 1, "no newline");
  check_range("", 1, 5, "");
}

static void test_utf8(void **state)
{
  (void) state;
  assert_true(sbx__utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
  assert_false(sbx__utf8_valid("\xff", 1));
  assert_false(sbx__utf8_valid("\xc3", 1));             /* truncated */
  assert_false(sbx__utf8_valid("\xc0\xaf", 2));         /* overlong */
  assert_false(sbx__utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
  assert_false(sbx__utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
  assert_true(sbx__utf8_valid("a\0b", 3));              /* NUL is valid UTF-8 */
  /* every offset around the eight-byte ASCII fast path: a bad byte, a truncated sequence at
   * the end, a good sequence straddling a word */
  char buf[40];
  for (size_t at = 0; at + 3 <= sizeof buf; at++) {
    memset(buf, 'a', sizeof buf);
    buf[at] = (char) 0xff;
    assert_false(sbx__utf8_valid(buf, sizeof buf));
    memset(buf, 'a', sizeof buf);
    memcpy(buf + at, "\xe2\x82\xac", 3);
    assert_true(sbx__utf8_valid(buf, sizeof buf));
    assert_false(sbx__utf8_valid(buf, at + 2));
    buf[at + 1] = 'a';
    assert_false(sbx__utf8_valid(buf, sizeof buf));
  }
  size_t n;
  char *s = sbx__utf8_sanitize("a\xff"
                               "b\xe2\x82"
                               "c",
                               6, &n);
  assert_string_equal(s, "a\xef\xbf\xbd"
                         "b\xef\xbf\xbd"
                         "c");
  free(s);
}

/* The one decoder: lengths and code points, maximal subparts of ill-formed input. */
static void test_utf8_next(void **state)
{
  (void) state;
  static const struct {
    const char *s;
    size_t len, want_len;
    uint32_t cp;
  } cases[] = {
      {"a", 1, 1, 'a'},
      {"\xc3\xa9", 2, 2, 0xe9},
      {"\xe2\x82\xac", 3, 3, 0x20ac},
      {"\xf0\x9f\x98\x80", 4, 4, 0x1f600},
      {"\xf4\x8f\xbf\xbf", 4, 4, 0x10ffff},
      {"\xc0\xaf", 2, 1, SBX_UTF8_BAD},         /* overlong lead */
      {"\xe0\x80\x80", 3, 1, SBX_UTF8_BAD},     /* overlong: E0 wants A0..BF */
      {"\xed\xa0\x80", 3, 1, SBX_UTF8_BAD},     /* surrogate */
      {"\xf4\x90\x80\x80", 4, 1, SBX_UTF8_BAD}, /* past U+10FFFF */
      {"\xe2\x82", 2, 2, SBX_UTF8_BAD},         /* cut short: one U+FFFD for both */
      {"\xe2\x82x", 3, 2, SBX_UTF8_BAD},
      {"\x80", 1, 1, SBX_UTF8_BAD},
      {"\xff", 1, 1, SBX_UTF8_BAD},
      {"\xf0\x9f\x98", 4, 3, SBX_UTF8_BAD}, /* a C string with len 4: stops at the NUL */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t cp = 0;
    assert_int_equal(sbx__utf8_next(cases[i].s, cases[i].len, &cp), cases[i].want_len);
    assert_int_equal(cp, cases[i].cp);
  }
}

static void test_shell_quote(void **state)
{
  (void) state;
  cleanup_free char *a = sbx__shell_quote("it's $HOME");
  assert_string_equal(a, "'it'\\''s $HOME'");
  cleanup_free char *b = sbx__shell_quote("");
  assert_string_equal(b, "''");
}

static void test_env_keys(void **state)
{
  (void) state;
  assert_true(sbx__env_key_valid("A_1", 3));
  assert_true(sbx__env_key_valid("_x", 2));
  assert_false(sbx__env_key_valid("1A", 2));
  assert_false(sbx__env_key_valid("A-B", 3));
  assert_false(sbx__env_key_valid("", 0));
  const char *good[] = {"A=1", "B="};
  sbx_error_t err = NULL;
  assert_int_equal(sbx__env_check(good, 2, &err), 0);
  const char *bad[] = {"OK=1", "BAD;rm -rf /=1"};
  assert_int_equal(sbx__env_check(bad, 2, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  assert_string_equal(err->msg,
                      "extra_env key 'BAD;rm -rf /' is not a valid POSIX environment variable "
                      "name (must match ^[A-Za-z_][A-Za-z0-9_]*$). This protects shell-using "
                      "sandbox implementations from command injection via the key.");
  sbx_error_release(&err);
}

static char *render(const char *out, const char *errs, int code, bool timed_out)
{
  sbx_exec_output_t o = {out,          strlen(out),  strlen(out), errs,
                         strlen(errs), strlen(errs), code,        timed_out};
  size_t n;
  char *r = sbx__exec_render(&o, &n);
  assert_int_equal(n, strlen(r));
  return r;
}

static void test_render(void **state)
{
  (void) state;
  char *r;
  r = render("hi\n", "", 0, false);
  assert_string_equal(r, "hi\n");
  free(r);
  r = render("out", "err", 0, false);
  assert_string_equal(r, "out\nStd Error:\nerr");
  free(r);
  r = render("", "err", 0, false);
  assert_string_equal(r, "err");
  free(r);
  r = render("", "", 0, false);
  assert_string_equal(r, "(no output)");
  free(r);
  r = render("x", "", 3, false);
  assert_string_equal(r, "x\nExit Code: 3");
  free(r);
  r = render("", "", 2, false);
  assert_string_equal(r, "Exit Code: 2");
  free(r);
  r = render("", "", -9, false);
  assert_string_equal(r, "Exit Code: -9");
  free(r);
  r = render("partial", "", 124, true);
  assert_string_equal(r, "partial\nError: command timed out\nExit Code: 124");
  free(r);
  r = render("", "", 124, true);
  assert_string_equal(r, "Error: command timed out\nExit Code: 124");
  free(r);
}

static void test_truncation_marker(void **state)
{
  (void) state;
  sbx_exec_output_t o = {"abc", 3, 10, "", 0, 0, 0, false};
  char *r = sbx__exec_render(&o, NULL);
  assert_string_equal(
      r, "abc\n... [output truncated after 3 of 10 bytes; remaining output discarded] ...");
  free(r);
}

/* A NUL byte of the output stays in the rendered text (and its length counts all of it), as in
 * DeerFlow's providers (bytes.decode("utf-8", errors="replace")); invalid UTF-8 is U+FFFD. */
static void test_render_nul_and_invalid(void **state)
{
  (void) state;
  static const char out[] = "abc\0def\xff\xfeghi\ntail\n", errs[] = "e\0r";
  sbx_exec_output_t o = {out, sizeof out - 1, sizeof out - 1, errs, 3, 3, 1, false};
  size_t n;
  char *r = sbx__exec_render(&o, &n);
  static const char want[] =
      "abc\0def\xef\xbf\xbd\xef\xbf\xbdghi\ntail\n\nStd Error:\ne\0r\nExit Code: 1";
  assert_int_equal(n, sizeof want - 1);
  assert_memory_equal(r, want, n);
  free(r);
}

/* The expected texts are what DeerFlow's _truncate_bash_output, _truncate_read_file_output and
 * _truncate_ls_output (deerflow/sandbox/tools.py) return for the same input and cap. */
static void test_deerflow_truncation(void **state)
{
  (void) state;
  sbx_buf_t b = {0};
  for (int i = 0; i < 10; i++)
    sbx__buf_puts(&b, "h\xc3\xa9llo w\xc3\xb6rld "); /* 12 characters, 14 bytes */
  size_t len = b.len, n;
  static const struct {
    int64_t max;
    const char *want;
  } mid[] = {
      {60, "h\xc3\xa9llo \n... [middle truncated: 107 chars skipped] ...\n w\xc3\xb6rld "},
      {80, "h\xc3\xa9llo w\xc3\xb6rld h\xc3\xa9ll\n... [middle truncated: 87 chars skipped] "
           "...\n\xc3\xb6rld h\xc3\xa9llo w\xc3\xb6rld "},
      {30, "h\xc3\xa9llo w\xc3\xb6rld h\xc3\xa9llo w\xc3\xb6rld h\xc3\xa9llo "},
  };
  for (size_t i = 0; i < sizeof mid / sizeof mid[0]; i++) {
    char *r = sbx__truncate_middle(b.data, len, mid[i].max, &n);
    assert_int_equal(n, strlen(mid[i].want));
    assert_string_equal(r, mid[i].want);
    free(r);
  }
  for (int64_t max = 0; max <= 120; max += 120) { /* 0 = none; 120 = exactly the length */
    char *r = sbx__truncate_middle(b.data, len, max, &n);
    assert_int_equal(n, len);
    assert_memory_equal(r, b.data, len);
    free(r);
  }
  sbx__buf_free(&b);
  char t[201];
  for (int i = 0; i < 200; i++)
    t[i] = (char) ('a' + i % 10);
  t[200] = '\0';
  char *r = sbx__truncate_head(t, 200, 120, "Use start_line/end_line to read a specific range", &n);
  assert_string_equal(r, "abcdefghijabcdefgh\n... [truncated: showing first 18 of 200 chars. Use "
                         "start_line/end_line to read a specific range] ...");
  free(r);
  r = sbx__truncate_head(t, 200, 50, "Use start_line/end_line to read a specific range", &n);
  assert_string_equal(r, "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij");
  free(r);
  r = sbx__truncate_head(t, 200, 110, "Use a more specific path to see fewer results", &n);
  assert_string_equal(r, "abcdefghija\n... [truncated: showing first 11 of 200 chars. Use a more "
                         "specific path to see fewer results] ...");
  free(r);
  /* a NUL is a character like any other, never an end */
  r = sbx__truncate_middle("ab\0cd", 5, 0, &n);
  assert_int_equal(n, 5);
  assert_memory_equal(r, "ab\0cd", 5);
  free(r);
}

static void test_base64(void **state)
{
  (void) state;
  static const struct {
    const char *plain, *enc;
  } v[] = {{"", ""},
           {"f", "Zg=="},
           {"fo", "Zm8="},
           {"foo", "Zm9v"},
           {"foob", "Zm9vYg=="},
           {"fooba", "Zm9vYmE="},
           {"foobar", "Zm9vYmFy"}}; /* RFC 4648 10 */
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char *e = sbx__base64_encode((const unsigned char *) v[i].plain, strlen(v[i].plain));
    assert_string_equal(e, v[i].enc);
    free(e);
    size_t n = 99;
    unsigned char *d = sbx__base64_decode(v[i].enc, strlen(v[i].enc), &n);
    assert_non_null(d);
    assert_int_equal(n, strlen(v[i].plain));
    assert_memory_equal(d, v[i].plain, n);
    free(d);
  }
  size_t n;
  unsigned char *d = sbx__base64_decode("Zm9v\nYmFy", 9, &n); /* whitespace ignored */
  assert_non_null(d);
  assert_memory_equal(d, "foobar", 6);
  free(d);
  d = sbx__base64_decode("Zm8", 3, &n); /* padding optional */
  assert_non_null(d);
  assert_int_equal(n, 2);
  free(d);
  assert_null(sbx__base64_decode("Zm=9v", 5, &n)); /* data after padding */
  assert_null(sbx__base64_decode("Zm9v!", 5, &n)); /* not the alphabet */
  assert_null(sbx__base64_decode("Z", 1, &n));     /* a lone sextet is no byte */
  assert_null(sbx__base64_decode("Zg===", 5, &n)); /* too much padding */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_line_range),
      cmocka_unit_test(test_utf8),
      cmocka_unit_test(test_utf8_next),
      cmocka_unit_test(test_shell_quote),
      cmocka_unit_test(test_env_keys),
      cmocka_unit_test(test_render),
      cmocka_unit_test(test_truncation_marker),
      cmocka_unit_test(test_base64),
      cmocka_unit_test(test_render_nul_and_invalid),
      cmocka_unit_test(test_deerflow_truncation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
