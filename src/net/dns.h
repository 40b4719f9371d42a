/* DNS wire format (RFC 1035) for the policy resolver: a query's question, the NXDOMAIN/REFUSED
 * replies it answers denied names with, and a walk of an upstream response's answers (A/AAAA with
 * their TTL along the CNAME chain from the question) to pin the addresses an allowed name got.
 * Only what the resolver needs: one question, no EDNS handling beyond passing it through. */
#ifndef SBX_NET_DNS_H
#define SBX_NET_DNS_H

#include <stddef.h>
#include <stdint.h>

#include <sbx/error.h>

#include "policy.h"

#define SBX_DNS_MAX_NAME 253 /* text form, no trailing dot */
#define SBX_DNS_HEADER 12

enum {
  SBX_DNS_TYPE_A = 1,
  SBX_DNS_TYPE_CNAME = 5,
  SBX_DNS_TYPE_AAAA = 28,
  SBX_DNS_CLASS_IN = 1,
  SBX_DNS_RCODE_NOERROR = 0,
  SBX_DNS_RCODE_SERVFAIL = 2,
  SBX_DNS_RCODE_NXDOMAIN = 3,
  SBX_DNS_RCODE_REFUSED = 5,
  SBX_DNS_FLAG_QR = 0x8000,
};

struct sbx_dns_query {
  uint16_t id;
  uint16_t flags;                  /* the header's second word as sent */
  char name[SBX_DNS_MAX_NAME + 1]; /* lowercased, no trailing dot; "" for the root */
  uint16_t qtype, qclass;
  size_t question_end; /* offset just past the question */
};

/* Parses a query: QR clear, opcode QUERY, exactly one question, the name uncompressed or
 * compressed without loops, every label 1..63 bytes, the name <= 253 characters. Bytes after
 * the question (EDNS OPT records) are allowed. SBX_E_INVALID with what was wrong. */
int sbx__dns_parse_query(const uint8_t *pkt, size_t len, struct sbx_dns_query *q, sbx_error_t *err);

/* A reply to q with rcode and no answers: the header (id, RD copied, QR and RA set) and the
 * question (the parsed name, uncompressed, its type and class). Returns its length, or 0 if cap
 * is too small. */
size_t sbx__dns_build_reply(const uint8_t *query, const struct sbx_dns_query *q, int rcode,
                            uint8_t *out, size_t cap);

/* One address pinned from a response: the name in the CNAME chain that owned it. */
struct sbx_dns_pin {
  struct sbx_net_addr addr;
  uint32_t ttl;
  char owner[SBX_DNS_MAX_NAME + 1];
};

struct sbx_dns_response {
  uint16_t id;
  int rcode;
  char qname[SBX_DNS_MAX_NAME + 1];
  uint16_t qtype;
  /* the CNAME chain from qname (each target once; qname not included) */
  char (*chain)[SBX_DNS_MAX_NAME + 1];
  size_t n_chain;
  struct sbx_dns_pin *pins; /* A/AAAA records owned by qname or a name of the chain */
  size_t n_pins;
};

/* Walks a response: QR set, one question, every answer record read with bounds and loop checks.
 * Answers not on the chain from the question (unrelated names) are skipped, never pinned.
 * r is filled (free with sbx__dns_response_clear). */
int sbx__dns_parse_response(const uint8_t *pkt, size_t len, struct sbx_dns_response *r,
                            sbx_error_t *err);
void sbx__dns_response_clear(struct sbx_dns_response *r);

/* RFC 7766 framing (DNS over TCP): each message is preceded by its length, two bytes in network
 * order. The first message of a stream buffer: 1 with *msg and *msg_len when it is all there, 0
 * when more bytes are needed, -1 when its length is shorter than a header (not DNS). */
int sbx__dns_tcp_frame(const uint8_t *buf, size_t len, const uint8_t **msg, size_t *msg_len);

/* Reads a (possibly compressed) name at *off into out (lowercased, no trailing dot); *off moves
 * past it in the packet. -1 with a reason on truncation, loops, bad labels or length. */
int sbx__dns_read_name(const uint8_t *pkt, size_t len, size_t *off, char out[SBX_DNS_MAX_NAME + 1],
                       sbx_error_t *err);

#endif
