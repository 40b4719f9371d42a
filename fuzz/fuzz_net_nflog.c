/* libFuzzer target for the enforcer's small parsers: a denied packet's network header
 * (sbx__nflog_describe, src/net/nflog.c: what the kernel copies is the sandbox's packet) and
 * the host's resolv.conf (sbx__resolver_upstream, src/net/resolver.c).
 *
 * Oracles: the description is NUL-terminated inside its buffer and names an address; an
 * upstream that parses is AF_INET or AF_INET6 on port 53; nothing reads outside the input
 * (ASan). Run: fuzz/run.sh 60 fuzz_net_nflog */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/nflog.c"
#include "../src/net/resolver.c"

/* resolver.c's packet paths are not exercised here; these satisfy its references */
size_t sbx__dns_build_reply(const uint8_t *query, const struct sbx_dns_query *q, int rcode,
                            uint8_t *out, size_t cap)
{
  (void) query, (void) q, (void) rcode, (void) out, (void) cap;
  return 0;
}
int sbx__dns_parse_query(const uint8_t *pkt, size_t len, struct sbx_dns_query *q, sbx_error_t *err)
{
  (void) pkt, (void) len, (void) q, (void) err;
  return -1;
}
int sbx__dns_parse_response(const uint8_t *pkt, size_t len, struct sbx_dns_response *r,
                            sbx_error_t *err)
{
  (void) pkt, (void) len, (void) r, (void) err;
  return -1;
}
void sbx__dns_response_clear(struct sbx_dns_response *r)
{
  (void) r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char out[96];
  memset(out, 'x', sizeof out);
  if (sbx__nflog_describe(data, size, out, sizeof out) == 0 &&
      (memchr(out, '\0', sizeof out) == NULL || strlen(out) < 3))
    abort();
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  struct sockaddr_storage ss;
  socklen_t len = 0;
  if (sbx__resolver_upstream(text, &ss, &len) == 0) {
    if (ss.ss_family == AF_INET) {
      if (len != sizeof(struct sockaddr_in) || ((struct sockaddr_in *) &ss)->sin_port != htons(53))
        abort();
    } else if (ss.ss_family != AF_INET6 || len != sizeof(struct sockaddr_in6)) {
      abort();
    }
  }
  free(text);
  return 0;
}
