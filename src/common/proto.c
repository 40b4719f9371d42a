#include "proto.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

static void put_le16(unsigned char *p, uint16_t v)
{
  p[0] = (unsigned char) v;
  p[1] = (unsigned char) (v >> 8);
}

static void put_le32(unsigned char *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static uint16_t get_le16(const unsigned char *p)
{
  return (uint16_t) (p[0] | p[1] << 8);
}

static uint32_t get_le32(const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t get_le64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

void sbx__tlv_put(sbx_tlv_writer_t *w, uint16_t tag, const void *data, size_t len)
{
  unsigned char h[6];
  put_le16(h, tag);
  put_le32(h + 2, (uint32_t) len);
  sbx__buf_append(&w->buf, h, sizeof h);
  sbx__buf_append(&w->buf, data, len);
}

void sbx__tlv_put_str(sbx_tlv_writer_t *w, uint16_t tag, const char *s)
{
  if (s)
    sbx__tlv_put(w, tag, s, strlen(s));
}

void sbx__tlv_put_u64(sbx_tlv_writer_t *w, uint16_t tag, uint64_t v)
{
  unsigned char b[8];
  put_le64(b, v);
  sbx__tlv_put(w, tag, b, sizeof b);
}

void sbx__tlv_put_i64(sbx_tlv_writer_t *w, uint16_t tag, int64_t v)
{
  sbx__tlv_put_u64(w, tag, (uint64_t) v);
}

void sbx__tlv_free(sbx_tlv_writer_t *w)
{
  sbx__buf_free(&w->buf);
}

void sbx__tlv_reader_init(sbx_tlv_reader_t *r, const void *payload, size_t len)
{
  r->p = payload;
  r->len = len;
  r->off = 0;
}

int sbx__tlv_next(sbx_tlv_reader_t *r, sbx_tlv_t *f)
{
  if (r->off == r->len)
    return 0;
  if (r->len - r->off < 6)
    return -1;
  const unsigned char *h = r->p + r->off;
  uint32_t len = get_le32(h + 2);
  if (len > r->len - r->off - 6)
    return -1;
  f->tag = get_le16(h);
  f->len = len;
  f->data = h + 6;
  r->off += 6 + (size_t) len;
  return 1;
}

bool sbx__tlv_valid(const void *payload, size_t len)
{
  sbx_tlv_reader_t r;
  sbx_tlv_t f;
  int ret;
  sbx__tlv_reader_init(&r, payload, len);
  while ((ret = sbx__tlv_next(&r, &f)) > 0)
    ;
  return ret == 0;
}

int sbx__tlv_find(const void *payload, size_t len, uint16_t tag, sbx_tlv_t *f)
{
  sbx_tlv_reader_t r;
  int ret;
  sbx__tlv_reader_init(&r, payload, len);
  while ((ret = sbx__tlv_next(&r, f)) > 0)
    if (f->tag == tag)
      return 1;
  return ret;
}

bool sbx__tlv_has(const void *payload, size_t len, uint16_t tag)
{
  sbx_tlv_t f;
  return sbx__tlv_find(payload, len, tag, &f) == 1;
}

int sbx__tlv_get_str(const void *payload, size_t len, uint16_t tag, char **out)
{
  sbx_tlv_t f;
  int ret = sbx__tlv_find(payload, len, tag, &f);
  *out = NULL;
  if (ret <= 0)
    return ret;
  if (memchr(f.data, '\0', f.len) != NULL)
    return -1;
  *out = xstrndup((const char *) f.data, f.len);
  return 1;
}

int sbx__tlv_get_u64(const void *payload, size_t len, uint16_t tag, uint64_t def, uint64_t *out)
{
  sbx_tlv_t f;
  int ret = sbx__tlv_find(payload, len, tag, &f);
  *out = def;
  if (ret <= 0)
    return ret;
  if (f.len != 8)
    return -1;
  *out = get_le64(f.data);
  return 1;
}

int sbx__tlv_get_i64(const void *payload, size_t len, uint16_t tag, int64_t def, int64_t *out)
{
  uint64_t v;
  int ret = sbx__tlv_get_u64(payload, len, tag, (uint64_t) def, &v);
  *out = (int64_t) v;
  return ret;
}

void sbx__frame_hdr_encode(unsigned char out[SBX_PROTO_HDR], const sbx_frame_hdr_t *h)
{
  put_le32(out, h->len);
  put_le16(out + 4, h->type);
  put_le16(out + 6, h->flags);
  put_le32(out + 8, h->req);
}

void sbx__frame_hdr_decode(const unsigned char in[SBX_PROTO_HDR], sbx_frame_hdr_t *h)
{
  h->len = get_le32(in);
  h->type = get_le16(in + 4);
  h->flags = get_le16(in + 6);
  h->req = get_le32(in + 8);
}

int sbx__frame_send(int fd, uint16_t type, uint32_t req, const void *payload, size_t len)
{
  if (len > SBX_PROTO_MAX_PAYLOAD) {
    errno = EMSGSIZE;
    return -1;
  }
  unsigned char h[SBX_PROTO_HDR];
  sbx_frame_hdr_t hdr = {.len = (uint32_t) len, .type = type, .flags = 0, .req = req};
  sbx__frame_hdr_encode(h, &hdr);
  struct iovec iov[2] = {{h, sizeof h}, {(void *) payload, len}};
  int iovcnt = len ? 2 : 1;
  size_t total = sizeof h + len, done = 0;
  bool sock = true;
  while (done < total) {
    /* MSG_NOSIGNAL: a peer that died (sbx-init killed, a client gone) is an EPIPE error for the
     * caller to report, never a SIGPIPE that kills it silently */
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t) iovcnt};
    ssize_t r = sock ? sendmsg(fd, &m, MSG_NOSIGNAL) : writev(fd, iov, iovcnt);
    if (r < 0 && sock && errno == ENOTSOCK) {
      sock = false;
      continue;
    }
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    done += (size_t) r;
    /* advance the iovecs past what was written */
    size_t adv = (size_t) r;
    for (int i = 0; i < iovcnt && adv > 0; i++) {
      size_t take = adv < iov[i].iov_len ? adv : iov[i].iov_len;
      iov[i].iov_base = (char *) iov[i].iov_base + take;
      iov[i].iov_len -= take;
      adv -= take;
    }
  }
  return 0;
}

int sbx__frame_send_tlv(int fd, uint16_t type, uint32_t req, const sbx_tlv_writer_t *w)
{
  return sbx__frame_send(fd, type, req, w->buf.data, w->buf.len);
}

int sbx__frame_recv(int fd, sbx_frame_hdr_t *hdr, char **payload, size_t max_payload)
{
  unsigned char h[SBX_PROTO_HDR];
  *payload = NULL;
  if (sbx__read_exact(fd, h, sizeof h) < 0)
    return -1;
  sbx__frame_hdr_decode(h, hdr);
  if (hdr->len > max_payload || hdr->len > SBX_PROTO_MAX_PAYLOAD) {
    errno = EMSGSIZE;
    return -1;
  }
  char *p = xmalloc((size_t) hdr->len + 1);
  if (hdr->len && sbx__read_exact(fd, p, hdr->len) < 0) {
    free(p);
    return -1;
  }
  p[hdr->len] = '\0';
  *payload = p;
  return 0;
}

int sbx__frame_send_error(int fd, uint32_t req, int kind, int status, const char *msg)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_KIND, (uint64_t) kind);
  sbx__tlv_put_u64(&w, SBX_T_STATUS, (uint64_t) status);
  /* Bound the message so a pathological one can never exceed a frame. */
  size_t n = msg ? strlen(msg) : 0;
  if (n > 4096)
    n = 4096;
  sbx__tlv_put(&w, SBX_T_MSG, msg ? msg : "", n);
  int ret = sbx__frame_send_tlv(fd, SBX_MSG_ERR, req, &w);
  sbx__tlv_free(&w);
  return ret;
}

int sbx__error_from_frame(const void *payload, size_t len, sbx_error_t *err)
{
  uint64_t kind = SBX_E_INTERNAL, status = 0;
  cleanup_free char *msg = NULL;
  if (sbx__tlv_get_u64(payload, len, SBX_T_KIND, SBX_E_INTERNAL, &kind) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_STATUS, 0, &status) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_MSG, &msg) < 0)
    return sbx__error_set(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed error frame");
  if (kind == 0 || kind >= SBX_E_KIND_MAX)
    kind = SBX_E_INTERNAL;
  return sbx__error_set(err, (int) (status > 4095 ? 0 : status), (int) kind,
                        msg ? msg : "unknown error");
}

int sbx__frame_send_fd(int fd, uint16_t type, uint32_t req, const void *payload, size_t len,
                       int pass)
{
  if (len > 4096) {
    errno = EMSGSIZE;
    return -1;
  }
  unsigned char buf[SBX_PROTO_HDR + 4096];
  sbx_frame_hdr_t hdr = {.len = (uint32_t) len, .type = type, .flags = 0, .req = req};
  sbx__frame_hdr_encode(buf, &hdr);
  if (len)
    memcpy(buf + SBX_PROTO_HDR, payload, len);
  struct iovec iov = {buf, SBX_PROTO_HDR + len};
  union {
    char raw[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  msg.msg_control = u.raw;
  msg.msg_controllen = sizeof u.raw;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &pass, sizeof(int));
  ssize_t r;
  do
    r = sendmsg(fd, &msg, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return -1;
  /* the rest (if the socket took a partial write) goes without the descriptor */
  return (size_t) r < iov.iov_len ? sbx__write_all(fd, buf + r, iov.iov_len - (size_t) r) : 0;
}

int sbx__frame_recv_fd(int fd, sbx_frame_hdr_t *hdr, char **payload, size_t max_payload,
                       int *passed)
{
  unsigned char h[SBX_PROTO_HDR];
  union {
    char raw[CMSG_SPACE(sizeof(int) * 4)];
    struct cmsghdr align;
  } u;
  struct iovec iov = {h, sizeof h};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  msg.msg_control = u.raw;
  msg.msg_controllen = sizeof u.raw;
  *passed = -1;
  *payload = NULL;
  ssize_t r;
  do
    r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (r < 0 && errno == EINTR);
  if (r <= 0) {
    if (r == 0)
      errno = ECONNRESET;
    return -1;
  }
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int got;
      memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (*passed < 0)
        *passed = got;
      else
        close(got); /* only one descriptor is ever expected */
    }
  }
  if ((size_t) r < sizeof h && sbx__read_exact(fd, h + r, sizeof h - (size_t) r) < 0)
    goto fail;
  sbx__frame_hdr_decode(h, hdr);
  if (hdr->len > max_payload || hdr->len > SBX_PROTO_MAX_PAYLOAD) {
    errno = EMSGSIZE;
    goto fail;
  }
  char *p = xmalloc((size_t) hdr->len + 1);
  if (hdr->len && sbx__read_exact(fd, p, hdr->len) < 0) {
    free(p);
    goto fail;
  }
  p[hdr->len] = '\0';
  *payload = p;
  return 0;
fail:
  if (*passed >= 0) {
    int saved = errno;
    close(*passed);
    errno = saved;
    *passed = -1;
  }
  return -1;
}
