/* WebSocket framing, server side (ws.h). The parser keeps unparsed bytes and takes a frame only
 * once all of it has arrived, so a read may split a frame anywhere. */
#include "ws.h"
#include "base64.h"
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SHA-1 ---- */

static uint32_t rol(uint32_t v, int n)
{
  return (v << n) | (v >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
  uint32_t w[80];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t) p[4 * i] << 24 | (uint32_t) p[4 * i + 1] << 16 |
           (uint32_t) p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 80; i++)
    w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int i = 0; i < 80; i++) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6;
    }
    uint32_t t = rol(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rol(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void sbxd_sha1(const void *data, size_t n, uint8_t out[20])
{
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  const uint8_t *p = data;
  size_t left = n;
  for (; left >= 64; left -= 64, p += 64)
    sha1_block(h, p);
  uint8_t tail[128] = {0};
  memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tl = left + 9 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t) n * 8;
  for (int i = 0; i < 8; i++)
    tail[tl - 1 - (size_t) i] = (uint8_t) (bits >> (8 * i));
  sha1_block(h, tail);
  if (tl == 128)
    sha1_block(h, tail + 64);
  for (int i = 0; i < 5; i++) {
    out[4 * i] = (uint8_t) (h[i] >> 24);
    out[4 * i + 1] = (uint8_t) (h[i] >> 16);
    out[4 * i + 2] = (uint8_t) (h[i] >> 8);
    out[4 * i + 3] = (uint8_t) h[i];
  }
}

/* ---- the handshake ---- */

bool sbxd_ws_accept(const char *key, char out[29])
{
  /* a key is 16 random bytes in base64: exactly 24 characters */
  if (key == NULL || strlen(key) != 24)
    return false;
  size_t n = 0;
  unsigned char *raw = sbx__base64_decode(key, 24, &n);
  free(raw);
  if (raw == NULL || n != 16)
    return false;
  char cat[64];
  snprintf(cat, sizeof cat, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
  uint8_t digest[20];
  sbxd_sha1(cat, strlen(cat), digest);
  char *b64 = sbx__base64_encode(digest, sizeof digest);
  snprintf(out, 29, "%s", b64);
  free(b64);
  return true;
}

/* ---- parsing ---- */

__attribute__((format(printf, 3, 4))) static int fail(struct ws_rx *rx, int code, const char *fmt,
                                                      ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rx->err, sizeof rx->err, fmt, ap);
  va_end(ap);
  rx->close_code = code;
  return -1;
}

void sbxd_ws_feed(struct ws_rx *rx, const void *d, size_t n)
{
  if (rx->in_off > 0) {
    memmove(rx->in.data, rx->in.data + rx->in_off, rx->in.len - rx->in_off);
    rx->in.len -= rx->in_off;
    rx->in_off = 0;
  }
  sbx__buf_append(&rx->in, d, n);
}

static void unmask_into(sbx_buf_t *b, const uint8_t *src, size_t n, const uint8_t key[4])
{
  sbx__buf_reserve(b, n);
  uint8_t *dst = (uint8_t *) b->data + b->len;
  for (size_t i = 0; i < n; i++)
    dst[i] = src[i] ^ key[i & 3];
  b->len += n;
  b->data[b->len] = '\0';
}

static bool close_code_ok(unsigned c)
{
  return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1011) || (c >= 3000 && c <= 4999);
}

int sbxd_ws_next(struct ws_rx *rx, struct ws_event *ev)
{
  if (rx->close_code)
    return -1;
  size_t max = rx->max ? rx->max : SBXD_WS_MAX_MESSAGE;
  while (!rx->closed) {
    const uint8_t *p = (const uint8_t *) rx->in.data + rx->in_off;
    size_t avail = rx->in.len - rx->in_off;
    if (avail < 2)
      return 0;
    bool fin = p[0] & 0x80, masked = p[1] & 0x80;
    int op = p[0] & 0x0F;
    if (p[0] & 0x70)
      return fail(rx, WS_CLOSE_PROTOCOL, "reserved bits set (no extension was negotiated)");
    if (op > WS_OP_BINARY && op < WS_OP_CLOSE)
      return fail(rx, WS_CLOSE_PROTOCOL, "unknown data opcode %d", op);
    if (op > WS_OP_PONG)
      return fail(rx, WS_CLOSE_PROTOCOL, "unknown control opcode %d", op);
    if (!masked && !rx->client)
      return fail(rx, WS_CLOSE_PROTOCOL, "client frames must be masked");
    if (masked && rx->client)
      return fail(rx, WS_CLOSE_PROTOCOL, "server frames must not be masked");
    size_t kl = masked ? 4 : 0;
    size_t hdr = 2;
    uint64_t len = p[1] & 0x7F;
    if (len == 126) {
      if (avail < 4)
        return 0;
      len = (uint64_t) p[2] << 8 | p[3];
      hdr = 4;
      if (len < 126)
        return fail(rx, WS_CLOSE_PROTOCOL, "frame length not in its shortest form");
    } else if (len == 127) {
      if (avail < 10)
        return 0;
      len = 0;
      for (int i = 0; i < 8; i++)
        len = len << 8 | p[2 + i];
      hdr = 10;
      if (len >> 63)
        return fail(rx, WS_CLOSE_PROTOCOL, "frame length has its top bit set");
      if (len <= 0xFFFF)
        return fail(rx, WS_CLOSE_PROTOCOL, "frame length not in its shortest form");
    }
    bool control = op >= WS_OP_CLOSE;
    if (control && !fin)
      return fail(rx, WS_CLOSE_PROTOCOL, "fragmented control frame");
    if (control && len > 125)
      return fail(rx, WS_CLOSE_PROTOCOL, "control frame payload of %llu bytes (at most 125)",
                  (unsigned long long) len);
    if (!control) {
      if (op == WS_OP_CONT && rx->msg_op == 0)
        return fail(rx, WS_CLOSE_PROTOCOL, "continuation frame without a message to continue");
      if (op != WS_OP_CONT && rx->msg_op != 0)
        return fail(rx, WS_CLOSE_PROTOCOL, "new message before the fragmented one ended");
      uint64_t total = (op == WS_OP_CONT ? rx->msg.len : 0) + len;
      if (total > max)
        return fail(rx, WS_CLOSE_TOO_BIG, "message of more than %zu bytes", max);
    }
    if (avail - hdr < kl || avail - hdr - kl < len)
      return 0;
    static const uint8_t nokey[4] = {0};
    const uint8_t *key = masked ? p + hdr : nokey, *payload = p + hdr + kl;
    rx->in_off += hdr + kl + (size_t) len;
    if (control) {
      rx->ctl.len = 0;
      unmask_into(&rx->ctl, payload, (size_t) len, key);
      ev->op = op;
      ev->data = rx->ctl.data;
      ev->len = rx->ctl.len;
      ev->code = 0;
      if (op != WS_OP_CLOSE)
        return 1;
      rx->closed = true;
      ev->code = WS_CLOSE_NO_STATUS;
      if (len == 1)
        return fail(rx, WS_CLOSE_PROTOCOL, "close frame with a 1-byte payload");
      if (len >= 2) {
        unsigned code = (unsigned) (uint8_t) rx->ctl.data[0] << 8 | (uint8_t) rx->ctl.data[1];
        if (!close_code_ok(code))
          return fail(rx, WS_CLOSE_PROTOCOL, "invalid close code %u", code);
        if (!sbx__utf8_valid(rx->ctl.data + 2, rx->ctl.len - 2))
          return fail(rx, WS_CLOSE_BAD_DATA, "close reason is not valid UTF-8");
        ev->code = (int) code;
        ev->data = rx->ctl.data + 2;
        ev->len = rx->ctl.len - 2;
      }
      return 1;
    }
    if (op != WS_OP_CONT) {
      rx->msg.len = 0;
      rx->msg_op = op;
    }
    unmask_into(&rx->msg, payload, (size_t) len, key);
    if (!fin)
      continue;
    op = rx->msg_op;
    rx->msg_op = 0;
    if (op == WS_OP_TEXT && !sbx__utf8_valid(rx->msg.data, rx->msg.len))
      return fail(rx, WS_CLOSE_BAD_DATA, "text message is not valid UTF-8");
    ev->op = op;
    ev->data = rx->msg.data ? rx->msg.data : "";
    ev->len = rx->msg.len;
    ev->code = 0;
    return 1;
  }
  return 0;
}

void sbxd_ws_rx_free(struct ws_rx *rx)
{
  sbx__buf_free(&rx->in);
  sbx__buf_free(&rx->msg);
  sbx__buf_free(&rx->ctl);
}

/* ---- encoding ---- */

void sbxd_ws_frame(sbx_buf_t *out, int op, const void *d, size_t n)
{
  uint8_t h[10];
  size_t hl = 2;
  h[0] = (uint8_t) (0x80 | (op & 0x0F));
  if (n < 126) {
    h[1] = (uint8_t) n;
  } else if (n <= 0xFFFF) {
    h[1] = 126;
    h[2] = (uint8_t) (n >> 8);
    h[3] = (uint8_t) n;
    hl = 4;
  } else {
    h[1] = 127;
    for (int i = 0; i < 8; i++)
      h[2 + i] = (uint8_t) ((uint64_t) n >> (56 - 8 * i));
    hl = 10;
  }
  sbx__buf_append(out, h, hl);
  if (n)
    sbx__buf_append(out, d, n);
}

void sbxd_ws_client_frame(sbx_buf_t *out, int op, const void *d, size_t n)
{
  char hex[9];
  uint8_t key[4];
  sbx__random_hex(hex, 8);
  for (int i = 0; i < 4; i++) {
    char two[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
    key[i] = (uint8_t) strtoul(two, NULL, 16);
  }
  size_t at = out->len;
  sbxd_ws_frame(out, op, d, n);
  size_t hl = out->len - at - n;
  sbx__buf_reserve(out, 4);
  uint8_t *f = (uint8_t *) out->data + at;
  memmove(f + hl + 4, f + hl, n);
  f[1] = (uint8_t) (f[1] | 0x80);
  memcpy(f + hl, key, 4);
  for (size_t i = 0; i < n; i++)
    f[hl + 4 + i] ^= key[i & 3];
  out->len += 4;
  out->data[out->len] = '\0';
}

void sbxd_ws_close_frame(sbx_buf_t *out, int code, const char *reason)
{
  uint8_t p[125];
  size_t rl = reason ? strlen(reason) : 0;
  if (rl > 123)
    rl = 123;
  p[0] = (uint8_t) (code >> 8);
  p[1] = (uint8_t) code;
  if (rl)
    memcpy(p + 2, reason, rl);
  sbxd_ws_frame(out, WS_OP_CLOSE, p, 2 + rl);
}
