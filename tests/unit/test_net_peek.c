/* Unit tests for src/net/peek.c, the relay's Host / SNI reader: HTTP requests and ClientHellos
 * built here byte by byte, whole, cut, split across records and broken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "../../src/net/peek.c"

struct pkt {
  uint8_t b[SBX_PEEK_MAX + 64];
  size_t n;
};

static void put8(struct pkt *p, unsigned v)
{
  p->b[p->n++] = (uint8_t) v;
}

static void put16(struct pkt *p, unsigned v)
{
  put8(p, v >> 8);
  put8(p, v & 0xff);
}

static void put(struct pkt *p, const void *d, size_t n)
{
  memcpy(p->b + p->n, d, n);
  p->n += n;
}

/* A ClientHello in one record: an SNI of sni (NULL: none), one more extension ext (0: none),
 * the SNI extension twice with twice. */
static void hello(struct pkt *p, const char *sni, unsigned ext, bool twice)
{
  struct pkt e = {.n = 0};
  for (int k = 0; k < (twice ? 2 : 1) && sni; k++) {
    size_t n = strlen(sni);
    put16(&e, 0);
    put16(&e, (unsigned) n + 5);
    put16(&e, (unsigned) n + 3);
    put8(&e, 0);
    put16(&e, (unsigned) n);
    put(&e, sni, n);
  }
  if (ext) {
    put16(&e, ext);
    put16(&e, 4);
    put(&e, "\0\0\0\0", 4);
  }
  struct pkt b = {.n = 0};
  put16(&b, 0x0303);
  for (int i = 0; i < 32; i++)
    put8(&b, (unsigned) i);
  put8(&b, 0);  /* session id */
  put16(&b, 2); /* cipher suites */
  put16(&b, 0x1301);
  put8(&b, 1); /* compression */
  put8(&b, 0);
  put16(&b, (unsigned) e.n);
  put(&b, e.b, e.n);
  p->n = 0;
  put8(p, 0x16);
  put16(p, 0x0301);
  put16(p, (unsigned) b.n + 4);
  put8(p, 1);
  put8(p, 0);
  put16(p, (unsigned) b.n);
  put(p, b.b, b.n);
}

static enum sbx_peek_result peek_str(const char *s, char *name)
{
  return sbx__peek_name((const uint8_t *) s, strlen(s), 0, name);
}

static void test_http(void **state)
{
  (void) state;
  char name[SBX_PEEK_NAME_MAX + 1];
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: PyPI.test:8080\r\nA: b\r\n\r\n", name),
                   SBX_PEEK_NAME);
  assert_string_equal(name, "pypi.test");
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nhost:pypi.test.\r\n\r\nGET", name), SBX_PEEK_NAME);
  assert_string_equal(name, "pypi.test");
  /* not yet: the header block is not complete, and a second Host may follow */
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: pypi.test\r\n", name), SBX_PEEK_MORE);
  assert_int_equal(sbx__peek_name((const uint8_t *) "GET / HTTP/1.1\r\nHost: a\r\n", 25, 1, name),
                   SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.0\r\n\r\n", name), SBX_PEEK_NO_NAME);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost:\r\n\r\n", name), SBX_PEEK_NO_NAME);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", name),
                   SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", name), SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\nHost: a.test\n\n", name), SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nX: 1\r\n Host: b\r\n\r\n", name),
                   SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", name), SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", name), SBX_PEEK_MALFORMED);
  /* absolute-form: its authority is what a server takes */
  assert_int_equal(peek_str("GET http://other.test/x HTTP/1.1\r\nHost: pypi.test\r\n\r\n", name),
                   SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET HTTP://Pypi.test:80/x HTTP/1.1\r\nHost: pypi.test\r\n\r\n", name),
                   SBX_PEEK_NAME);
  assert_string_equal(name, "pypi.test");
  assert_int_equal(peek_str("GET http://u@pypi.test/ HTTP/1.1\r\n\r\n", name), SBX_PEEK_MALFORMED);
  /* an empty label is not a trailing dot (fuzz/corpus/net_peek/regress-empty-label) */
  assert_int_equal(peek_str("E http://p.. HTTP/1.1\r\n\r\n", name), SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("GET / HTTP/1.1\r\nHost: .p\r\n\r\n", name), SBX_PEEK_MALFORMED);
  assert_int_equal(peek_str("CONNECT other.test:443 HTTP/1.1\r\nHost: other.test\r\n\r\n", name),
                   SBX_PEEK_NAME);
  assert_string_equal(name, "other.test");
  assert_int_equal(peek_str("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", name), SBX_PEEK_UNKNOWN);
  assert_int_equal(peek_str("SSH-2.0-OpenSSH_9\r\n\r\n", name), SBX_PEEK_UNKNOWN);
  assert_int_equal(peek_str("", name), SBX_PEEK_MORE);
  assert_int_equal(sbx__peek_name((const uint8_t *) "", 0, 1, name), SBX_PEEK_NO_NAME);
}

static void test_tls(void **state)
{
  (void) state;
  char name[SBX_PEEK_NAME_MAX + 1];
  struct pkt p;
  hello(&p, "PyPI.test", 0, false);
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_NAME);
  assert_string_equal(name, "pypi.test");
  /* every cut is "more", or a verdict once no more is coming */
  for (size_t cut = 0; cut < p.n; cut++) {
    assert_int_equal(sbx__peek_name(p.b, cut, 0, name), SBX_PEEK_MORE);
    assert_int_not_equal(sbx__peek_name(p.b, cut, 1, name), SBX_PEEK_NAME);
  }
  /* the same handshake split over two records */
  struct pkt s = {.n = 0};
  size_t body = p.n - 5, first = 20;
  put8(&s, 0x16);
  put16(&s, 0x0301);
  put16(&s, (unsigned) first);
  put(&s, p.b + 5, first);
  put8(&s, 0x16);
  put16(&s, 0x0301);
  put16(&s, (unsigned) (body - first));
  put(&s, p.b + 5 + first, body - first);
  assert_int_equal(sbx__peek_name(s.b, s.n, 0, name), SBX_PEEK_NAME);
  assert_string_equal(name, "pypi.test");
  hello(&p, NULL, 0, false);
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_NO_NAME);
  hello(&p, "pypi.test", 0xfe0d, false);
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_ECH);
  assert_string_equal(name, "");
  hello(&p, NULL, 0xfe0d, false);
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_ECH);
  hello(&p, "pypi.test", 0, true); /* the extension twice */
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_MALFORMED);
  hello(&p, "10.0.0.1:80", 0, false);
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_MALFORMED);
  /* a length past the end of its vector */
  hello(&p, "pypi.test", 0, false);
  p.b[p.n - 10] = 0xff;
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_MALFORMED);
  /* not a ClientHello, not a handshake record */
  hello(&p, "pypi.test", 0, false);
  p.b[5] = 2;
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_MALFORMED);
  p.b[5] = 1;
  p.b[0] = 0x17;
  assert_int_equal(sbx__peek_name(p.b, p.n, 0, name), SBX_PEEK_UNKNOWN);
}

int main(void)
{
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_http), cmocka_unit_test(test_tls)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
