/* DNS wire format for the policy resolver (see dns.h). */
#include <arpa/inet.h>
#include <string.h>

#include "dns.h"
#include "error.h"
#include "util.h"

#define MAX_JUMPS 32 /* compression pointers followed in one name (a loop never ends) */
#define MAX_CHAIN 16 /* CNAMEs followed from the question */
#define MAX_PINS 64  /* addresses pinned from one response */

static uint16_t get16(const uint8_t *p)
{
  return (uint16_t) (p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

int sbx__dns_read_name(const uint8_t *pkt, size_t len, size_t *off, char out[SBX_DNS_MAX_NAME + 1],
                       sbx_error_t *err)
{
  size_t pos = *off, n = 0, end = 0;
  int jumps = 0;
  bool jumped = false;
  for (;;) {
    if (pos >= len)
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: name runs past the packet");
    uint8_t l = pkt[pos];
    if ((l & 0xc0) == 0xc0) {
      if (pos + 1 >= len)
        return sbx__make_error(err, 0, SBX_E_INVALID, "dns: truncated compression pointer");
      size_t target = (size_t) (l & 0x3f) << 8 | pkt[pos + 1];
      if (!jumped)
        end = pos + 2;
      jumped = true;
      /* a pointer must point backwards (RFC 1035 4.1.4: to a prior occurrence); with the jump
       * cap this refuses every loop */
      if (target >= pos || ++jumps > MAX_JUMPS)
        return sbx__make_error(err, 0, SBX_E_INVALID, "dns: compression loop");
      if (target < SBX_DNS_HEADER)
        return sbx__make_error(err, 0, SBX_E_INVALID, "dns: compression pointer into the header");
      pos = target;
      continue;
    }
    if ((l & 0xc0) != 0)
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: reserved label type 0x%02x", l);
    if (l == 0) {
      if (!jumped)
        end = pos + 1;
      break;
    }
    if (pos + 1 + l > len)
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: label runs past the packet");
    if (n + (n ? 1 : 0) + l > SBX_DNS_MAX_NAME)
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: name longer than %d characters",
                             SBX_DNS_MAX_NAME);
    if (n)
      out[n++] = '.';
    for (size_t i = 0; i < l; i++) {
      uint8_t c = pkt[pos + 1 + i];
      if (c == 0 || c == '.')
        return sbx__make_error(err, 0, SBX_E_INVALID, "dns: label with a NUL or '.' byte");
      out[n++] = (char) (c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    pos += 1 + l;
  }
  out[n] = '\0';
  *off = end;
  return 0;
}

int sbx__dns_parse_query(const uint8_t *pkt, size_t len, struct sbx_dns_query *q, sbx_error_t *err)
{
  if (len < SBX_DNS_HEADER)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: %zu bytes, shorter than a header", len);
  memset(q, 0, sizeof *q);
  q->id = get16(pkt);
  q->flags = get16(pkt + 2);
  if (q->flags & SBX_DNS_FLAG_QR)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: a response, not a query");
  if ((q->flags >> 11 & 0xf) != 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: opcode %d, only QUERY (0)",
                           q->flags >> 11 & 0xf);
  if (get16(pkt + 4) != 1)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: %u questions, exactly 1 expected",
                           get16(pkt + 4));
  size_t off = SBX_DNS_HEADER;
  if (sbx__dns_read_name(pkt, len, &off, q->name, err) < 0)
    return -1;
  if (off + 4 > len)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: question truncated");
  q->qtype = get16(pkt + off);
  q->qclass = get16(pkt + off + 2);
  q->question_end = off + 4;
  return 0;
}

size_t sbx__dns_build_reply(const uint8_t *query, const struct sbx_dns_query *q, int rcode,
                            uint8_t *out, size_t cap)
{
  /* the question is written anew from the parsed name (uncompressed): a copy could carry
   * pointers into the header, which the reply changes */
  size_t nl = strlen(q->name), need = SBX_DNS_HEADER + (nl ? nl + 2 : 1) + 4;
  if (cap < need)
    return 0;
  memcpy(out, query, 2); /* id */
  uint16_t flags =
      (uint16_t) (SBX_DNS_FLAG_QR | (q->flags & 0x0100) /* RD */ | 0x0080 /* RA */ | (rcode & 0xf));
  out[2] = (uint8_t) (flags >> 8);
  out[3] = (uint8_t) flags;
  out[4] = 0, out[5] = 1; /* QDCOUNT */
  memset(out + 6, 0, 6);  /* AN, NS, AR */
  size_t o = SBX_DNS_HEADER;
  for (const char *l = q->name; *l;) {
    size_t len = strcspn(l, ".");
    out[o++] = (uint8_t) len;
    memcpy(out + o, l, len);
    o += len;
    l += len + (l[len] == '.');
  }
  out[o++] = 0;
  out[o++] = (uint8_t) (q->qtype >> 8), out[o++] = (uint8_t) q->qtype;
  out[o++] = (uint8_t) (q->qclass >> 8), out[o++] = (uint8_t) q->qclass;
  return o;
}

void sbx__dns_response_clear(struct sbx_dns_response *r)
{
  free(r->chain);
  free(r->pins);
  memset(r, 0, sizeof *r);
}

static bool on_chain(const struct sbx_dns_response *r, const char *name)
{
  if (strcmp(name, r->qname) == 0)
    return true;
  for (size_t i = 0; i < r->n_chain; i++)
    if (strcmp(r->chain[i], name) == 0)
      return true;
  return false;
}

struct rr {
  char name[SBX_DNS_MAX_NAME + 1];
  uint16_t type, klass;
  uint32_t ttl;
  size_t rdata, rdlen;
};

int sbx__dns_parse_response(const uint8_t *pkt, size_t len, struct sbx_dns_response *r,
                            sbx_error_t *err)
{
  memset(r, 0, sizeof *r);
  if (len < SBX_DNS_HEADER)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: %zu bytes, shorter than a header", len);
  uint16_t flags = get16(pkt + 2);
  if (!(flags & SBX_DNS_FLAG_QR))
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: a query, not a response");
  if (get16(pkt + 4) != 1)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: %u questions, exactly 1 expected",
                           get16(pkt + 4));
  r->id = get16(pkt);
  r->rcode = flags & 0xf;
  size_t off = SBX_DNS_HEADER;
  if (sbx__dns_read_name(pkt, len, &off, r->qname, err) < 0)
    return -1;
  if (off + 4 > len)
    return sbx__make_error(err, 0, SBX_E_INVALID, "dns: question truncated");
  r->qtype = get16(pkt + off);
  off += 4;
  unsigned an = get16(pkt + 6);
  /* read every answer first (bounds checked), then follow the chain over them: a CNAME may come
   * after the records it leads to */
  struct rr *rrs = xreallocarray(NULL, an ? an : 1, sizeof *rrs);
  for (unsigned i = 0; i < an; i++) {
    struct rr *x = &rrs[i];
    if (sbx__dns_read_name(pkt, len, &off, x->name, err) < 0) {
      free(rrs);
      return sbx__error_wrap(err, "answer %u", i);
    }
    if (off + 10 > len) {
      free(rrs);
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: answer %u truncated", i);
    }
    x->type = get16(pkt + off);
    x->klass = get16(pkt + off + 2);
    x->ttl = get32(pkt + off + 4);
    if (x->ttl > 0x7fffffffu) /* RFC 2181 8: treat as 0 */
      x->ttl = 0;
    x->rdlen = get16(pkt + off + 8);
    x->rdata = off + 10;
    if (x->rdata + x->rdlen > len) {
      free(rrs);
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: answer %u data runs past the packet", i);
    }
    off = x->rdata + x->rdlen;
  }
  r->chain = xreallocarray(NULL, MAX_CHAIN, sizeof *r->chain);
  /* the chain grows while a CNAME owned by a name on it points somewhere new */
  for (bool grew = true; grew;) {
    grew = false;
    for (unsigned i = 0; i < an; i++) {
      struct rr *x = &rrs[i];
      if (x->type != SBX_DNS_TYPE_CNAME || x->klass != SBX_DNS_CLASS_IN || !on_chain(r, x->name))
        continue;
      char target[SBX_DNS_MAX_NAME + 1];
      size_t p = x->rdata;
      if (sbx__dns_read_name(pkt, x->rdata + x->rdlen, &p, target, err) < 0) {
        free(rrs);
        sbx__dns_response_clear(r);
        return sbx__error_wrap(err, "answer %u (CNAME)", i);
      }
      if (on_chain(r, target))
        continue;
      if (r->n_chain == MAX_CHAIN) {
        free(rrs);
        sbx__dns_response_clear(r);
        return sbx__make_error(err, 0, SBX_E_INVALID, "dns: CNAME chain longer than %d", MAX_CHAIN);
      }
      memcpy(r->chain[r->n_chain++], target, sizeof target);
      grew = true;
    }
  }
  r->pins = xreallocarray(NULL, MAX_PINS, sizeof *r->pins);
  for (unsigned i = 0; i < an; i++) {
    struct rr *x = &rrs[i];
    if (x->klass != SBX_DNS_CLASS_IN || !on_chain(r, x->name))
      continue;
    struct sbx_dns_pin pin = {.ttl = x->ttl};
    if (x->type == SBX_DNS_TYPE_A && x->rdlen == 4) {
      pin.addr.family = AF_INET;
      memcpy(pin.addr.a, pkt + x->rdata, 4);
    } else if (x->type == SBX_DNS_TYPE_AAAA && x->rdlen == 16) {
      pin.addr.family = AF_INET6;
      memcpy(pin.addr.a, pkt + x->rdata, 16);
    } else if (x->type == SBX_DNS_TYPE_A || x->type == SBX_DNS_TYPE_AAAA) {
      size_t rdlen = x->rdlen; /* x is in rrs */
      free(rrs);
      sbx__dns_response_clear(r);
      return sbx__make_error(err, 0, SBX_E_INVALID, "dns: answer %u: address of %zu bytes", i,
                             rdlen);
    } else
      continue;
    if (r->n_pins == MAX_PINS)
      break; /* the rest stay unpinned: unreachable, never wrongly reachable */
    memcpy(pin.owner, x->name, sizeof pin.owner);
    r->pins[r->n_pins++] = pin;
  }
  free(rrs);
  return 0;
}

int sbx__dns_tcp_frame(const uint8_t *buf, size_t len, const uint8_t **msg, size_t *msg_len)
{
  if (len < 2)
    return 0;
  size_t n = get16(buf);
  if (n < SBX_DNS_HEADER)
    return -1;
  if (len - 2 < n)
    return 0;
  *msg = buf + 2;
  *msg_len = n;
  return 1;
}
