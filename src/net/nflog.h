/* Denied packets, as the kernel reports them to an nflog group (nft's `log group N`), read in
 * the sandbox's network namespace: the enforcer logs each one with its destination. */
#ifndef SBX_NET_NFLOG_H
#define SBX_NET_NFLOG_H

#include <stddef.h>
#include <stdint.h>

#include <sbx/error.h>

/* A netlink socket bound to group (non-blocking), or -1. */
int sbx__nflog_open(uint16_t group, sbx_error_t *err);
/* The next denied packet's destination ("ADDR:PORT/tcp", "[ADDR]:PORT/udp", "ADDR/icmp") in
 * out: 1, or 0 when none is waiting. */
int sbx__nflog_read(int fd, char *out, size_t len);
/* The same from one packet's network header (fuzzable): 0, or -1 if it is not IP. */
int sbx__nflog_describe(const uint8_t *pkt, size_t len, char *out, size_t outlen);

#endif
