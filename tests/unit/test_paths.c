/* Unit tests for src/common/paths.c: path checks, scope ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "paths.h"
#include "util.h"

static void expect_error(int r, sbx_error_t *err, int kind, const char *msg)
{
  assert_int_equal(r, -1);
  assert_non_null(*err);
  assert_int_equal((*err)->kind, kind);
  assert_string_equal((*err)->msg, msg);
  sbx_error_release(err);
}

static void test_path_check(void **state)
{
  (void) state;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__path_check("/mnt/user-data/workspace/a..b", &err), 0);
  assert_int_equal(sbx__path_check("/x/...", &err), 0);
  expect_error(sbx__path_check("", &err), &err, SBX_E_INVALID, "path must be a non-empty string");
  expect_error(sbx__path_check("rel/x", &err), &err, SBX_E_INVALID,
               "path must be absolute: 'rel/x'");
  expect_error(sbx__path_check("/a/../etc/passwd", &err), &err, SBX_E_DENIED,
               "Access denied: path traversal detected in '/a/../etc/passwd'");
  expect_error(sbx__path_check("/a/..", &err), &err, SBX_E_DENIED,
               "Access denied: path traversal detected in '/a/..'");
  expect_error(sbx__path_check("/a\\..\\b", &err), &err, SBX_E_DENIED,
               "Access denied: path traversal detected in '/a\\..\\b'");
}

static void test_download_prefix(void **state)
{
  (void) state;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__download_path_check("/mnt/user-data/outputs/a.txt", &err), 0);
  assert_int_equal(sbx__download_path_check("/mnt/user-data", &err), 0);
  assert_int_equal(sbx__download_path_check("//mnt/user-data/x", &err), 0);
  expect_error(sbx__download_path_check("/mnt/user-datax/a", &err), &err, SBX_E_DENIED,
               "Access denied: path must be under '/mnt/user-data': '/mnt/user-datax/a'");
  expect_error(sbx__download_path_check("/etc/passwd", &err), &err, SBX_E_DENIED,
               "Access denied: path must be under '/mnt/user-data': '/etc/passwd'");
  expect_error(sbx__download_path_check("/mnt/user-data/../../etc/shadow", &err), &err,
               SBX_E_DENIED,
               "Access denied: path traversal detected in '/mnt/user-data/../../etc/shadow'");
}

static void test_scope(void **state)
{
  (void) state;
  char id[17];
  /* sha256("default:t1") */
  sbx__scope_id("default", "t1", id);
  char want[65];
  sbx__sha256_hex("default:t1", 10, want, 16);
  assert_string_equal(id, want);
  assert_int_equal(strlen(id), 16);
  assert_true(sbx__id_valid(id));
  char other[17];
  sbx__scope_id("default", "t2", other);
  assert_string_not_equal(id, other);
  sbx__scope_id("alice", "t1", other);
  assert_string_not_equal(id, other);
  assert_true(sbx__thread_id_valid("a-b_C9"));
  assert_false(sbx__thread_id_valid(""));
  assert_false(sbx__thread_id_valid("a/b"));
  assert_false(
      sbx__thread_id_valid("0123456789012345678901234567890123456789012345678901234567890123X"));
  assert_true(
      sbx__thread_id_valid("0123456789012345678901234567890123456789012345678901234567890123"));
  sbx_error_t err = NULL;
  expect_error(sbx__scope_check("default", "bad thread", &err), &err, SBX_E_INVALID,
               "Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores");
  assert_false(sbx__id_valid("0123456789ABCDEF"));
  assert_false(sbx__id_valid("0123456789abcde"));
}

static void test_sha256(void **state)
{
  (void) state;
  char out[65];
  sbx__sha256_hex("", 0, out, 64);
  assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sbx__sha256_hex("abc", 3, out, 64);
  assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sbx__sha256_hex(m, strlen(m), out, 64);
  assert_string_equal(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_path_check),
      cmocka_unit_test(test_download_prefix),
      cmocka_unit_test(test_scope),
      cmocka_unit_test(test_sha256),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
