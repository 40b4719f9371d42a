/* The name a connection asks for, from the first bytes the sandbox sends on it (docs/network.md,
 * "Host and SNI"): the Host header of an HTTP/1.x request, or the server_name of a TLS
 * ClientHello. Nothing is decrypted; the bytes are only looked at. Written for hostile input:
 * every length is checked against what is there, and nothing beyond n bytes is read. */
#ifndef SBX_NET_PEEK_H
#define SBX_NET_PEEK_H

#include <stddef.h>
#include <stdint.h>

#define SBX_PEEK_MAX 16384    /* bytes looked at, at most: a longer start is refused */
#define SBX_PEEK_NAME_MAX 253 /* a DNS name's longest text form */

enum sbx_peek_result {
  SBX_PEEK_MORE,      /* not enough bytes yet to tell */
  SBX_PEEK_NAME,      /* name holds the name asked for (lowercased, no trailing dot, no port) */
  SBX_PEEK_NO_NAME,   /* an HTTP request without Host, a ClientHello without server_name */
  SBX_PEEK_ECH,       /* a ClientHello with encrypted_client_hello (0xfe0d): its name is hidden */
  SBX_PEEK_UNKNOWN,   /* neither HTTP/1.x nor TLS (HTTP/2 with prior knowledge among them) */
  SBX_PEEK_MALFORMED, /* HTTP/1.x or TLS, but broken or ambiguous (two Hosts, a bad name...) */
  SBX_PEEK_TOO_LONG,  /* no answer within SBX_PEEK_MAX bytes */
};

/* Looks at buf[0..n). full: no more bytes will come (EOF or the limit), so MORE becomes a
 * verdict. name must hold SBX_PEEK_NAME_MAX + 1 bytes; it is "" unless the result is NAME
 * (for MALFORMED it may hold why, for logs). */
enum sbx_peek_result sbx__peek_name(const uint8_t *buf, size_t n, int full, char *name);
/* A word for a result ("name", "no name", "encrypted ClientHello", ...). */
const char *sbx__peek_result_str(enum sbx_peek_result r);

#endif
