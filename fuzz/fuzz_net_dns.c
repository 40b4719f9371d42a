/* libFuzzer target for the policy resolver's DNS wire format (src/net/dns.c).
 *
 * The input is one packet, read as a query and as a response. Oracles:
 * - a query that parses has a name of at most 253 characters, lowercase, with no empty label,
 *   and its REFUSED/NXDOMAIN reply is a response that parses back with the same name and type;
 * - a response that parses pins only addresses owned by its question's name or a name of the
 *   CNAME chain, each chain name once, never more than the caps;
 * - read as a TCP stream (RFC 7766 framing, the resolver's TCP side), every frame lies inside the
 *   input, is at least a header and starts right after its length; each is parsed as a query;
 * - nothing reads outside the packet (ASan), loops end (the time-out).
 *
 * Run: fuzz/run.sh 60 fuzz_net_dns */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/dns.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *n)
{
  size_t len = strlen(n);
  if (len > SBX_DNS_MAX_NAME)
    abort();
  for (size_t i = 0; i < len; i++) {
    if (n[i] >= 'A' && n[i] <= 'Z')
      abort();
    if (n[i] == '.' && (i == 0 || i + 1 == len || n[i + 1] == '.'))
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct sbx_dns_query q;
  sbx_error_t err = NULL;
  if (sbx__dns_parse_query(data, size, &q, &err) == 0) {
    check_name(q.name);
    if (q.question_end > size)
      abort();
    uint8_t out[65536];
    size_t n = sbx__dns_build_reply(data, &q, SBX_DNS_RCODE_REFUSED, out, sizeof out);
    if (n == 0)
      abort();
    struct sbx_dns_response r;
    if (sbx__dns_parse_response(out, n, &r, &err) < 0)
      abort();
    if (strcmp(r.qname, q.name) != 0 || r.qtype != q.qtype || r.n_pins != 0 || r.rcode != 5)
      abort();
    sbx__dns_response_clear(&r);
  } else {
    sbx_error_release(&err);
  }
  struct sbx_dns_response r;
  if (sbx__dns_parse_response(data, size, &r, &err) == 0) {
    check_name(r.qname);
    if (r.n_chain > MAX_CHAIN || r.n_pins > MAX_PINS)
      abort();
    for (size_t i = 0; i < r.n_chain; i++) {
      check_name(r.chain[i]);
      if (strcmp(r.chain[i], r.qname) == 0)
        abort();
      for (size_t k = 0; k < i; k++)
        if (strcmp(r.chain[i], r.chain[k]) == 0)
          abort();
    }
    for (size_t i = 0; i < r.n_pins; i++) {
      bool owned = strcmp(r.pins[i].owner, r.qname) == 0;
      for (size_t k = 0; k < r.n_chain && !owned; k++)
        owned = strcmp(r.pins[i].owner, r.chain[k]) == 0;
      if (!owned || r.pins[i].ttl > 0x7fffffffu)
        abort();
    }
    sbx__dns_response_clear(&r);
  } else {
    sbx_error_release(&err);
  }
  for (size_t off = 0;;) {
    const uint8_t *msg = NULL;
    size_t len = 0;
    int got = sbx__dns_tcp_frame(data + off, size - off, &msg, &len);
    if (got <= 0)
      break;
    if (msg != data + off + 2 || len < SBX_DNS_HEADER || len > size - off - 2)
      abort();
    struct sbx_dns_query tq;
    if (sbx__dns_parse_query(msg, len, &tq, &err) < 0)
      sbx_error_release(&err);
    off += 2 + len;
  }
  return 0;
}
