/* Unit tests for src/lib/image/ref.c (Docker's reference grammar) and auth.c's parsers (the
 * WWW-Authenticate challenge, the token answer, base64). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "image/auth.h"
#include "image/ref.h"
#include "util.h"

static void parses(const char *s, const char *domain, const char *path, const char *tag,
                   const char *digest, const char *store)
{
  struct sbx_ref r;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__ref_parse(s, &r, &err), 0);
  assert_null(err);
  assert_string_equal(r.domain, domain);
  assert_string_equal(r.path, path);
  if (tag)
    assert_string_equal(r.tag, tag);
  else
    assert_null(r.tag);
  if (digest)
    assert_string_equal(r.digest, digest);
  else
    assert_null(r.digest);
  char *n = sbx__ref_store_name(&r);
  assert_string_equal(n, store);
  free(n);
  sbx__ref_free(&r);
}

static void refused(const char *s, const char *why)
{
  struct sbx_ref r;
  sbx_error_t err = NULL;
  if (sbx__ref_parse(s, &r, &err) == 0)
    fail_msg("`%s` parsed", s);
  assert_non_null(err);
  assert_int_equal(err->kind, SBX_E_INVALID);
  if (strstr(err->msg, why) == NULL)
    fail_msg("`%s`: `%s` lacks `%s`", s, err->msg, why);
  sbx_error_release(&err);
}

#define D64 "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_ref_grammar(void **state)
{
  (void) state;
  parses("python:3.12-slim", "docker.io", "library/python", "3.12-slim", NULL,
         "docker.io/library/python:3.12-slim");
  parses("python", "docker.io", "library/python", "latest", NULL,
         "docker.io/library/python:latest");
  parses("user/app", "docker.io", "user/app", "latest", NULL, "docker.io/user/app:latest");
  parses("index.docker.io/library/busybox:1", "docker.io", "library/busybox", "1", NULL,
         "docker.io/library/busybox:1");
  parses("127.0.0.1:5000/a/b:v1", "127.0.0.1:5000", "a/b", "v1", NULL, "127.0.0.1:5000/a/b:v1");
  parses("localhost/x", "localhost", "x", "latest", NULL, "localhost/x:latest");
  parses("ghcr.io/o/r-x__y.z@" D64, "ghcr.io", "o/r-x__y.z", NULL, D64, "ghcr.io/o/r-x__y.z@" D64);
  parses("quay.io/a:t@" D64, "quay.io", "a", "t", D64, "quay.io/a@" D64);
  parses("[::1]:5000/x:y", "[::1]:5000", "x", "y", NULL, "[::1]:5000/x:y");
  parses("a--b/c", "docker.io", "a--b/c", "latest", NULL, "docker.io/a--b/c:latest");
  refused("", "empty");
  refused("Python", "bad name component `Python`");
  refused("a//b", "bad name component ``");
  refused("a/b/", "bad name component ``");
  refused("-a", "bad name component");
  refused("a_", "bad name component");
  refused("a___b", "bad name component");
  refused("a:", "bad tag");
  refused("a:-x", "bad tag");
  refused("a@sha256:abc", "64 lower-case hex");
  refused("a@md5:0123456789abcdef0123456789abcdef", "64 lower-case hex");
  refused("ex ample", "space");
  refused("a\nb", "control");
  refused("bad_host.io:99999999/x", "bad registry");
  refused("-bad.io/x", "bad registry");
}

static void test_challenge(void **state)
{
  (void) state;
  struct sbx_auth_challenge c;
  sbx_error_t err = NULL;
  const char *h = "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
                  "scope=\"repository:library/python:pull\"";
  assert_int_equal(sbx__auth_challenge_parse(h, strlen(h), &c, &err), 0);
  assert_int_equal(c.scheme, SBX_AUTH_BEARER);
  assert_string_equal(c.realm, "https://auth.docker.io/token");
  assert_string_equal(c.service, "registry.docker.io");
  assert_string_equal(c.scope, "repository:library/python:pull");
  sbx__auth_challenge_free(&c);
  h = "Negotiate abc, basic realm=\"Registry \\\"Realm\\\"\"";
  assert_int_equal(sbx__auth_challenge_parse(h, strlen(h), &c, &err), 0);
  assert_int_equal(c.scheme, SBX_AUTH_BASIC);
  assert_string_equal(c.realm, "Registry \"Realm\"");
  sbx__auth_challenge_free(&c);
  h = "Bearer realm=\"file:///etc/passwd\"";
  assert_int_equal(sbx__auth_challenge_parse(h, strlen(h), &c, &err), -1);
  assert_non_null(strstr(err->msg, "http(s) realm"));
  sbx_error_release(&err);
  h = "Bearer realm=\"https://x";
  assert_int_equal(sbx__auth_challenge_parse(h, strlen(h), &c, &err), -1);
  sbx_error_release(&err);
  h = "Digest realm=x";
  assert_int_equal(sbx__auth_challenge_parse(h, strlen(h), &c, &err), -1);
  sbx_error_release(&err);
}

static void test_token_and_base64(void **state)
{
  (void) state;
  char *t;
  long exp;
  sbx_error_t err = NULL;
  const char *j = "{\"access_token\":\"abc\",\"expires_in\":300}";
  assert_int_equal(sbx__auth_token_parse(j, strlen(j), &t, &exp, &err), 0);
  assert_string_equal(t, "abc");
  assert_int_equal(exp, 300);
  free(t);
  j = "{\"token\":\"x\"}";
  assert_int_equal(sbx__auth_token_parse(j, strlen(j), &t, &exp, &err), 0);
  assert_int_equal(exp, 60);
  free(t);
  j = "{\"token\":\"a\\r\\nX-Evil: 1\"}";
  assert_int_equal(sbx__auth_token_parse(j, strlen(j), &t, &exp, &err), -1);
  assert_null(t);
  sbx_error_release(&err);
  size_t n;
  char *d = (char *) sbx__base64_decode("YWxpY2U6czNjcmV0", 16, &n);
  assert_string_equal(d, "alice:s3cret");
  char *e = sbx__base64_encode(d, n);
  assert_string_equal(e, "YWxpY2U6czNjcmV0");
  free(d);
  free(e);
  assert_null(sbx__base64_decode("a*b=", 4, &n));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ref_grammar),
      cmocka_unit_test(test_challenge),
      cmocka_unit_test(test_token_and_base64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
