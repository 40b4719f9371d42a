/* Standard base64 (RFC 4648 section 4): the contract's update_file and download_file payloads
 * in sbxd and MCP. */
#pragma once

#include <stddef.h>

/* n bytes as padded base64 (NUL-terminated, caller frees). */
char *sbx__base64_encode(const void *d, size_t n);
/* s[0..n) decoded; whitespace is ignored, padding optional but only at the end. NULL (nothing
 * allocated) when malformed; else *len bytes and a NUL after them (text such as a registry's
 * "user:password" can be used as a string), caller frees. */
unsigned char *sbx__base64_decode(const char *s, size_t n, size_t *len);
