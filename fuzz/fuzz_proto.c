/* libFuzzer target for the sbx-init protocol's framing (src/common/proto.c): the input is the
 * byte stream one peer would read from a unix socket, fed through sbx__frame_recv (or
 * sbx__frame_recv_fd, with descriptors attached to the stream) until the stream ends.
 *
 * Input: one mode byte (bit 0: receive with sbx__frame_recv_fd; bits 1-2: 0-3 descriptors passed
 * with the first bytes; bits 3-7: the max_payload bound, 0 = SBX_PROTO_MAX_PAYLOAD), then the
 * stream. Oracles:
 * - every frame received has len <= the bound, its payload NUL-terminated past len, and a header
 *   that re-encodes to the bytes read;
 * - the stream is consumed exactly: the frames' sizes add up to what precedes the failure, and a
 *   failure is EOF (ECONNRESET / a short read) or EMSGSIZE, never anything else;
 * - at most one descriptor is ever handed out per frame, and no descriptor leaks (the count of
 *   open descriptors is the same before and after);
 * - a payload that is valid TLV walks to its end, and every field re-encodes to the same bytes.
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_proto fuzz/corpus/proto */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <dirent.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STREAM (160u << 10) /* below a unix socket's default buffer: one write suffices */

static int count_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    abort();
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static void send_stream(int fd, const uint8_t *p, size_t n, int nfds)
{
  if (nfds > 0) {
    int fds[3];
    for (int i = 0; i < nfds; i++)
      fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    union {
      char raw[CMSG_SPACE(sizeof(int) * 3)];
      struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    size_t first = n < 7 ? n : 7; /* descriptors ride on the first bytes */
    struct iovec iov = {(void *) p, first ? first : 1};
    char zero = 0;
    if (first == 0)
      iov.iov_base = &zero;
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = u.raw,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t) nfds)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t) nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t) nfds);
    if (sendmsg(fd, &m, 0) < 0)
      abort();
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    if (first == 0)
      return; /* the stream is the one zero byte */
    p += first;
    n -= first;
  }
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      abort();
    p += w;
    n -= (size_t) w;
  }
}

static void check_tlv(const char *payload, size_t len)
{
  if (!sbx__tlv_valid(payload, len))
    return;
  sbx_tlv_reader_t r;
  sbx_tlv_t f;
  sbx_tlv_writer_t w = {0};
  sbx__tlv_reader_init(&r, payload, len);
  int ret;
  while ((ret = sbx__tlv_next(&r, &f)) > 0)
    sbx__tlv_put(&w, f.tag, f.data, f.len);
  if (ret != 0 || w.buf.len != len || (len && memcmp(w.buf.data, payload, len) != 0))
    abort();
  sbx__tlv_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > MAX_STREAM)
    return 0;
  uint8_t mode = data[0];
  bool with_fd = mode & 1;
  int nfds = (mode >> 1) & 3;
  size_t bound = (size_t) (mode >> 3) * 4096;
  if (bound == 0)
    bound = SBX_PROTO_MAX_PAYLOAD;
  data++;
  size--;
  if (nfds > 0 && size == 0)
    return 0;

  int before = count_fds();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    abort();
  send_stream(sv[1], data, size, nfds);
  close(sv[1]);

  size_t consumed = 0;
  for (;;) {
    sbx_frame_hdr_t hdr;
    char *payload = NULL;
    int passed = -1;
    errno = 0;
    int r = with_fd ? sbx__frame_recv_fd(sv[0], &hdr, &payload, bound, &passed)
                    : sbx__frame_recv(sv[0], &hdr, &payload, bound);
    if (r < 0) {
      if (payload != NULL || passed >= 0)
        abort(); /* a failed receive hands nothing out */
      if (errno != ECONNRESET && errno != EMSGSIZE && errno != EIO && errno != 0)
        abort();
      if (errno == EMSGSIZE && consumed + SBX_PROTO_HDR > size)
        abort(); /* EMSGSIZE only after a whole header */
      break;
    }
    if (hdr.len > bound || payload == NULL || payload[hdr.len] != '\0')
      abort();
    unsigned char h[SBX_PROTO_HDR];
    sbx__frame_hdr_encode(h, &hdr);
    if (memcmp(h, data + consumed, SBX_PROTO_HDR) != 0 ||
        memcmp(payload, data + consumed + SBX_PROTO_HDR, hdr.len) != 0)
      abort();
    consumed += SBX_PROTO_HDR + hdr.len;
    if (consumed > size)
      abort();
    check_tlv(payload, hdr.len);
    if (passed >= 0)
      close(passed);
    free(payload);
  }
  close(sv[0]);
  if (count_fds() != before)
    abort(); /* a passed descriptor leaked */
  return 0;
}
