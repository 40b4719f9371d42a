/* Unit tests for src/net/dns.c: queries, replies and the answer walk, over packets built here
 * byte by byte (and one made by the system's resolver library, res_mkquery). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <resolv.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/net/dns.h"
#include "util.h"

struct pkt {
  uint8_t b[4096];
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

static void put32(struct pkt *p, uint32_t v)
{
  put16(p, v >> 16);
  put16(p, v & 0xffff);
}

/* a name as labels ("a.b" -> 1a1b0); ptr >= 0 ends it with a pointer instead of the root */
static void put_name(struct pkt *p, const char *name, int ptr)
{
  while (*name) {
    const char *dot = strchr(name, '.');
    size_t l = dot ? (size_t) (dot - name) : strlen(name);
    put8(p, (unsigned) l);
    memcpy(p->b + p->n, name, l);
    p->n += l;
    name += l + (dot ? 1 : 0);
  }
  if (ptr >= 0)
    put16(p, 0xc000 | (unsigned) ptr);
  else
    put8(p, 0);
}

static void header(struct pkt *p, unsigned id, unsigned flags, unsigned qd, unsigned an)
{
  p->n = 0;
  put16(p, id);
  put16(p, flags);
  put16(p, qd);
  put16(p, an);
  put16(p, 0);
  put16(p, 0);
}

static void query_refused(const struct pkt *p, const char *why)
{
  struct sbx_dns_query q;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__dns_parse_query(p->b, p->n, &q, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  if (strstr(err->msg, why) == NULL)
    fail_msg("`%s` lacks `%s`", err->msg, why);
  sbx_error_release(&err);
}

static void test_query(void **state)
{
  (void) state;
  struct pkt p;
  header(&p, 0x1234, 0x0100, 1, 0);
  put_name(&p, "PyPI.Test", -1);
  put16(&p, SBX_DNS_TYPE_AAAA);
  put16(&p, SBX_DNS_CLASS_IN);
  size_t qend = p.n;
  /* an EDNS OPT record after the question is allowed */
  put8(&p, 0);
  put16(&p, 41);
  put16(&p, 1232);
  put32(&p, 0);
  put16(&p, 0);
  p.b[11] = 1; /* ARCOUNT */
  struct sbx_dns_query q;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__dns_parse_query(p.b, p.n, &q, &err), 0);
  assert_int_equal(q.id, 0x1234);
  assert_string_equal(q.name, "pypi.test");
  assert_int_equal(q.qtype, SBX_DNS_TYPE_AAAA);
  assert_int_equal(q.qclass, SBX_DNS_CLASS_IN);
  assert_int_equal(q.question_end, qend);

  uint8_t out[512];
  size_t n = sbx__dns_build_reply(p.b, &q, SBX_DNS_RCODE_NXDOMAIN, out, sizeof out);
  assert_int_equal(n, qend);
  assert_int_equal(out[0], 0x12);
  assert_int_equal(out[1], 0x34);
  assert_int_equal(out[2], 0x81); /* QR, RD copied */
  assert_int_equal(out[3], 0x83); /* RA, NXDOMAIN */
  assert_int_equal(out[5], 1);
  for (int i = 6; i < 12; i++)
    assert_int_equal(out[i], 0);
  /* the question as parsed (lowercase, uncompressed) */
  assert_memory_equal(out + 12, "\x04pypi\x04test\x00\x00\x1c\x00\x01", qend - 12);
  assert_int_equal(sbx__dns_build_reply(p.b, &q, SBX_DNS_RCODE_REFUSED, out, 10), 0);
  n = sbx__dns_build_reply(p.b, &q, SBX_DNS_RCODE_REFUSED, out, sizeof out);
  assert_int_equal(out[3] & 0xf, 5);
  /* the reply is a response the walk reads back, with no answers */
  struct sbx_dns_response r;
  assert_int_equal(sbx__dns_parse_response(out, n, &r, &err), 0);
  assert_int_equal(r.rcode, SBX_DNS_RCODE_REFUSED);
  assert_string_equal(r.qname, "pypi.test");
  assert_int_equal(r.n_pins, 0);
  sbx__dns_response_clear(&r);

  /* the system resolver's own encoding */
  unsigned char buf[512];
  int len =
      res_mkquery(QUERY, "files.PythonHosted.org.", C_IN, T_A, NULL, 0, NULL, buf, sizeof buf);
  assert_true(len > 0);
  assert_int_equal(sbx__dns_parse_query(buf, (size_t) len, &q, &err), 0);
  assert_string_equal(q.name, "files.pythonhosted.org");
  assert_int_equal(q.qtype, SBX_DNS_TYPE_A);
}

static void test_query_errors(void **state)
{
  (void) state;
  struct pkt p;
  header(&p, 1, 0, 1, 0);
  p.n = 11;
  query_refused(&p, "shorter than a header");
  header(&p, 1, 0x8000, 1, 0);
  put_name(&p, "a.test", -1);
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "a response");
  header(&p, 1, 0x2800 /* UPDATE */, 1, 0);
  query_refused(&p, "opcode 5");
  header(&p, 1, 0, 2, 0);
  query_refused(&p, "2 questions");
  header(&p, 1, 0, 1, 0);
  put_name(&p, "a.test", -1);
  put16(&p, 1);
  query_refused(&p, "question truncated");
  header(&p, 1, 0, 1, 0);
  put8(&p, 5);
  put8(&p, 'a');
  query_refused(&p, "label runs past");
  header(&p, 1, 0, 1, 0);
  put8(&p, 1);
  put8(&p, 'a');
  query_refused(&p, "name runs past");
  /* a pointer to itself, and one forward */
  header(&p, 1, 0, 1, 0);
  put16(&p, 0xc000 | 12);
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "compression loop");
  header(&p, 1, 0, 1, 0);
  put8(&p, 1);
  put8(&p, 'a');
  put16(&p, 0xc000 | 12); /* back to the start: a.a.a... */
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "compression loop");
  header(&p, 1, 0, 1, 0);
  put16(&p, 0xc000 | 40);
  query_refused(&p, "compression loop");
  /* into the header: a reply changes those bytes */
  header(&p, 1, 0, 1, 0);
  put8(&p, 1);
  put8(&p, 'a');
  put16(&p, 0xc000 | 2);
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "pointer into the header");
  header(&p, 1, 0, 1, 0);
  put8(&p, 0x40);
  query_refused(&p, "reserved label type");
  header(&p, 1, 0, 1, 0);
  put8(&p, 0xc0);
  query_refused(&p, "truncated compression pointer");
  /* 4 labels of 63: 255 characters, over 253 */
  header(&p, 1, 0, 1, 0);
  for (int i = 0; i < 4; i++) {
    put8(&p, 63);
    memset(p.b + p.n, 'x', 63);
    p.n += 63;
  }
  put8(&p, 0);
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "longer than 253");
  header(&p, 1, 0, 1, 0);
  put8(&p, 3);
  put8(&p, 'a');
  put8(&p, '.');
  put8(&p, 'b');
  put8(&p, 0);
  put16(&p, 1);
  put16(&p, 1);
  query_refused(&p, "NUL or '.'");
}

static void answer(struct pkt *p, const char *name, int ptr, unsigned type, uint32_t ttl,
                   const void *rdata, size_t rdlen)
{
  put_name(p, name, ptr);
  put16(p, type);
  put16(p, SBX_DNS_CLASS_IN);
  put32(p, ttl);
  put16(p, (unsigned) rdlen);
  memcpy(p->b + p->n, rdata, rdlen);
  p->n += rdlen;
}

static void test_response_chain(void **state)
{
  (void) state;
  struct pkt p, cn;
  header(&p, 7, 0x8180, 1, 6);
  put_name(&p, "www.pypi.test", -1); /* at 12 */
  put16(&p, SBX_DNS_TYPE_A);
  put16(&p, 1);
  uint8_t a1[4] = {198, 51, 100, 1}, a2[4] = {198, 51, 100, 2}, evil[4] = {203, 0, 113, 66};
  /* an A for the final name before the CNAMEs that lead to it */
  cn.n = 0;
  put_name(&cn, "edge.cdn.test", -1);
  answer(&p, "edge.cdn.test", -1, SBX_DNS_TYPE_A, 30, a2, 4);
  /* www.pypi.test CNAME pypi.cdn.test (compressed owner), pypi.cdn.test CNAME edge.cdn.test */
  struct pkt c1;
  c1.n = 0;
  put_name(&c1, "pypi.cdn.test", -1);
  answer(&p, "", 12, SBX_DNS_TYPE_CNAME, 300, c1.b, c1.n);
  answer(&p, "pypi.cdn.test", -1, SBX_DNS_TYPE_CNAME, 300, cn.b, cn.n);
  answer(&p, "edge.cdn.test", -1, SBX_DNS_TYPE_A, 0x80000000u, a1, 4);
  /* an unrelated name's address is never pinned */
  answer(&p, "evil.test", -1, SBX_DNS_TYPE_A, 30, evil, 4);
  uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 9};
  answer(&p, "www.pypi.test", -1, SBX_DNS_TYPE_AAAA, 60, v6, 16);
  struct sbx_dns_response r;
  sbx_error_t err = NULL;
  if (sbx__dns_parse_response(p.b, p.n, &r, &err) < 0)
    fail_msg("%s", err->msg);
  assert_int_equal(r.id, 7);
  assert_int_equal(r.rcode, 0);
  assert_string_equal(r.qname, "www.pypi.test");
  assert_int_equal(r.n_chain, 2);
  assert_string_equal(r.chain[0], "pypi.cdn.test");
  assert_string_equal(r.chain[1], "edge.cdn.test");
  assert_int_equal(r.n_pins, 3);
  assert_memory_equal(r.pins[0].addr.a, a2, 4);
  assert_int_equal(r.pins[0].ttl, 30);
  assert_string_equal(r.pins[0].owner, "edge.cdn.test");
  assert_int_equal(r.pins[1].ttl, 0); /* TTL with the top bit set reads as 0 */
  assert_int_equal(r.pins[2].addr.family, AF_INET6);
  assert_memory_equal(r.pins[2].addr.a, v6, 16);
  sbx__dns_response_clear(&r);

  /* a CNAME loop ends (each target once) */
  header(&p, 8, 0x8180, 1, 2);
  put_name(&p, "a.test", -1);
  put16(&p, 1);
  put16(&p, 1);
  struct pkt ta, tb;
  ta.n = tb.n = 0;
  put_name(&ta, "b.test", -1);
  put_name(&tb, "a.test", -1);
  answer(&p, "a.test", -1, SBX_DNS_TYPE_CNAME, 1, ta.b, ta.n);
  answer(&p, "b.test", -1, SBX_DNS_TYPE_CNAME, 1, tb.b, tb.n);
  assert_int_equal(sbx__dns_parse_response(p.b, p.n, &r, &err), 0);
  assert_int_equal(r.n_chain, 1);
  assert_int_equal(r.n_pins, 0);
  sbx__dns_response_clear(&r);
}

static void response_refused(const struct pkt *p, const char *why)
{
  struct sbx_dns_response r;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__dns_parse_response(p->b, p->n, &r, &err), -1);
  if (strstr(err->msg, why) == NULL)
    fail_msg("`%s` lacks `%s`", err->msg, why);
  sbx_error_release(&err);
  assert_null(r.pins);
}

static void test_response_errors(void **state)
{
  (void) state;
  struct pkt p;
  uint8_t a[4] = {1, 2, 3, 4};
  header(&p, 1, 0x0100, 1, 0);
  put_name(&p, "a.test", -1);
  put16(&p, 1);
  put16(&p, 1);
  response_refused(&p, "a query");
  header(&p, 1, 0x8180, 1, 1);
  put_name(&p, "a.test", -1);
  put16(&p, 1);
  put16(&p, 1);
  size_t q = p.n;
  answer(&p, "a.test", -1, SBX_DNS_TYPE_A, 1, a, 4);
  p.n -= 2;
  response_refused(&p, "data runs past");
  p.n = q + 8;
  response_refused(&p, "answer 0");
  p.n = q;
  answer(&p, "a.test", -1, SBX_DNS_TYPE_A, 1, a, 3);
  response_refused(&p, "address of 3 bytes");
  /* the answer count claims more than there is */
  p.n = q;
  answer(&p, "a.test", -1, SBX_DNS_TYPE_A, 1, a, 4);
  p.b[7] = 2;
  response_refused(&p, "answer 1");
}

/* RFC 7766 framing: whole, partial, too short to be DNS, pipelined */
static void test_tcp_frame(void **state)
{
  (void) state;
  uint8_t b[2 + 12 + 2 + 13] = {0, 12};
  b[14] = 0, b[15] = 13;
  const uint8_t *msg = NULL;
  size_t len = 0;
  assert_int_equal(sbx__dns_tcp_frame(b, 0, &msg, &len), 0);
  assert_int_equal(sbx__dns_tcp_frame(b, 1, &msg, &len), 0);
  assert_int_equal(sbx__dns_tcp_frame(b, 13, &msg, &len), 0); /* one byte short */
  assert_int_equal(sbx__dns_tcp_frame(b, 14, &msg, &len), 1);
  assert_ptr_equal(msg, b + 2);
  assert_int_equal(len, 12);
  assert_int_equal(sbx__dns_tcp_frame(b + 14, sizeof b - 14, &msg, &len), 1);
  assert_int_equal(len, 13);
  assert_int_equal(sbx__dns_tcp_frame(b + 14, sizeof b - 15, &msg, &len), 0);
  uint8_t shorter[2 + 11] = {0, 11};
  assert_int_equal(sbx__dns_tcp_frame(shorter, sizeof shorter, &msg, &len), -1);
  uint8_t empty[2] = {0, 0};
  assert_int_equal(sbx__dns_tcp_frame(empty, sizeof empty, &msg, &len), -1);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_query),          cmocka_unit_test(test_query_errors),
      cmocka_unit_test(test_response_chain), cmocka_unit_test(test_response_errors),
      cmocka_unit_test(test_tcp_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
