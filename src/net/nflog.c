/* nflog over raw netlink (nfnetlink_log): bind a group, copy the first bytes of each packet,
 * describe its destination. See nflog.h. */
#include "error.h"
#include "nflog.h"
#include "util.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define NLA_ALIGN4(n) (((n) + 3u) & ~3u)

static void put_attr(uint8_t *buf, size_t *off, uint16_t type, const void *data, uint16_t len)
{
  struct nlattr a = {.nla_len = (uint16_t) (NLA_HDRLEN + len), .nla_type = type};
  memcpy(buf + *off, &a, sizeof a);
  memcpy(buf + *off + NLA_HDRLEN, data, len);
  *off += NLA_ALIGN4(NLA_HDRLEN + len);
}

static int config(int fd, uint16_t group, uint16_t type, const void *data, uint16_t len)
{
  uint8_t buf[128] __attribute__((aligned(4))) = {0};
  size_t off = NLMSG_HDRLEN;
  struct nfgenmsg g = {.nfgen_family = AF_UNSPEC, .version = NFNETLINK_V0, .res_id = htons(group)};
  memcpy(buf + off, &g, sizeof g);
  off += NLA_ALIGN4(sizeof g);
  put_attr(buf, &off, type, data, len);
  struct nlmsghdr h = {.nlmsg_len = (uint32_t) off,
                       .nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG,
                       .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK,
                       .nlmsg_seq = 1};
  memcpy(buf, &h, sizeof h);
  if (send(fd, buf, off, 0) < 0)
    return -1;
  /* the ack: an nlmsgerr with error 0 */
  uint8_t reply[256] __attribute__((aligned(4)));
  ssize_t n = recv(fd, reply, sizeof reply, 0);
  if (n < (ssize_t) (NLMSG_HDRLEN + sizeof(int)))
    return -1;
  struct nlmsghdr rh;
  memcpy(&rh, reply, sizeof rh);
  int e = 0;
  if (rh.nlmsg_type == NLMSG_ERROR)
    memcpy(&e, reply + NLMSG_HDRLEN, sizeof e);
  errno = -e;
  return e == 0 ? 0 : -1;
}

int sbx__nflog_open(uint16_t group, sbx_error_t *err)
{
  cleanup_close int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "open an nflog socket");
  struct nfulnl_msg_config_cmd cmd = {.command = NFULNL_CFG_CMD_BIND};
  struct nfulnl_msg_config_mode mode = {.copy_range = htonl(64), .copy_mode = NFULNL_COPY_PACKET};
  /* one message per packet, sent at once (the default batches for up to a second) */
  uint32_t one = htonl(1), zero = 0;
  if (config(fd, group, NFULA_CFG_CMD, &cmd, sizeof cmd) < 0 ||
      config(fd, group, NFULA_CFG_MODE, &mode, sizeof mode) < 0 ||
      config(fd, group, NFULA_CFG_QTHRESH, &one, sizeof one) < 0 ||
      config(fd, group, NFULA_CFG_TIMEOUT, &zero, sizeof zero) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "bind nflog group %u", group);
  int fl = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &fl, sizeof fl);
  struct timeval tv = {0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return steal_fd(&fd);
}

int sbx__nflog_describe(const uint8_t *p, size_t len, char *out, size_t outlen)
{
  char a[INET6_ADDRSTRLEN];
  unsigned proto, hdr;
  if (len >= 20 && p[0] >> 4 == 4) {
    hdr = (p[0] & 15u) * 4;
    proto = p[9];
    if (hdr < 20 || !inet_ntop(AF_INET, p + 16, a, sizeof a))
      return -1;
  } else if (len >= 40 && p[0] >> 4 == 6) {
    hdr = 40;
    proto = p[6];
    if (!inet_ntop(AF_INET6, p + 24, a, sizeof a))
      return -1;
  } else {
    return -1;
  }
  bool v6 = p[0] >> 4 == 6;
  if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && len >= hdr + 4)
    snprintf(out, outlen, "%s%s%s:%u/%s", v6 ? "[" : "", a, v6 ? "]" : "",
             (unsigned) (p[hdr + 2] << 8 | p[hdr + 3]), proto == IPPROTO_TCP ? "tcp" : "udp");
  else
    snprintf(out, outlen, "%s/%s", a,
             proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6 ? "icmp" : "ip");
  return 0;
}

int sbx__nflog_read(int fd, char *out, size_t len)
{
  uint8_t buf[8192] __attribute__((aligned(4)));
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0)
      return 0;
    /* one packet message per datagram is what the kernel sends for us (no batching asked) */
    struct nlmsghdr h;
    memcpy(&h, buf, sizeof h);
    if ((size_t) n < NLMSG_HDRLEN + sizeof(struct nfgenmsg) || h.nlmsg_len > (size_t) n ||
        h.nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
      continue;
    size_t off = NLMSG_HDRLEN + NLA_ALIGN4(sizeof(struct nfgenmsg));
    while (off + NLA_HDRLEN <= h.nlmsg_len) {
      struct nlattr at;
      memcpy(&at, buf + off, sizeof at);
      if (at.nla_len < NLA_HDRLEN || off + at.nla_len > h.nlmsg_len)
        break;
      if ((at.nla_type & NLA_TYPE_MASK) == NFULA_PAYLOAD &&
          sbx__nflog_describe(buf + off + NLA_HDRLEN, at.nla_len - NLA_HDRLEN, out, len) == 0)
        return 1;
      off += NLA_ALIGN4(at.nla_len);
    }
  }
}
