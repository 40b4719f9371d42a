/* The enforcer's nftables table (see nft.h). Text through libnftables: a policy change is one
 * atomic transaction (delete the table, make it again with the pins still valid), so there is
 * no moment with half a ruleset. */
#include "error.h"
#include "nft.h"

#include <nftables/libnftables.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

struct sbx_nft {
  struct nft_ctx *ctx;
};

struct sbx_nft *sbx__nft_new(sbx_error_t *err)
{
  struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == NULL) {
    sbx__make_error(err, ENOMEM, SBX_E_BACKEND, "libnftables: no context");
    return NULL;
  }
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  struct sbx_nft *n = xzalloc(sizeof *n);
  n->ctx = ctx;
  return n;
}

void sbx__nft_free(struct sbx_nft *n)
{
  if (n == NULL)
    return;
  nft_ctx_free(n->ctx);
  free(n);
}

int sbx__nft_run(struct sbx_nft *n, const char *text, sbx_error_t *err)
{
  if (nft_run_cmd_from_buffer(n->ctx, text) == 0)
    return 0;
  const char *e = nft_ctx_get_error_buffer(n->ctx);
  size_t len = e ? strcspn(e, "\n") : 0;
  return sbx__make_error(err, 0, SBX_E_BACKEND, "nftables refused the ruleset: %.*s",
                         (int) (len > 300 ? 300 : len), e ? e : "");
}

static const char *fam(const struct sbx_net_addr *a)
{
  return a->family == AF_INET6 ? "ip6" : "ip";
}

static void put_addr(sbx_buf_t *b, const struct sbx_net_addr *a, int prefix)
{
  char text[64];
  sbx__net_addr_str(a, text, sizeof text);
  int full = a->family == AF_INET6 ? 128 : 32;
  if (prefix < full)
    sbx__buf_printf(b, "%s/%d", text, prefix);
  else
    sbx__buf_puts(b, text);
}

/* one family's always-denied elements, comma-separated */
static bool put_always(sbx_buf_t *b, int family, const struct sbx_net_addr *host, size_t n_host)
{
  bool any = false;
  for (size_t i = 0; i < sbx__net_n_always_denied; i++) {
    const struct sbx_net_range *r = &sbx__net_always_denied[i];
    if (r->net.family != family)
      continue;
    sbx__buf_puts(b, any ? ", " : "");
    put_addr(b, &r->net, r->prefix);
    any = true;
  }
  for (size_t i = 0; i < n_host; i++) {
    if (host[i].family != family)
      continue;
    /* a host address inside a fixed range is already covered (auto-merge refuses overlaps) */
    bool covered = false;
    for (size_t k = 0; k < sbx__net_n_always_denied && !covered; k++)
      covered = sbx__net_always_denied[k].net.family == family &&
                sbx__net_addr_in(&host[i], &sbx__net_always_denied[k].net,
                                 sbx__net_always_denied[k].prefix);
    for (size_t k = 0; k < i && !covered; k++)
      covered = host[k].family == family && memcmp(host[k].a, host[i].a, 16) == 0;
    if (covered)
      continue;
    sbx__buf_puts(b, any ? ", " : "");
    put_addr(b, &host[i], family == AF_INET6 ? 128 : 32);
    any = true;
  }
  return any;
}

/* one family's pins as set elements with their remaining time, comma-separated between open and
 * close; nothing at all when there is none (nft refuses an empty element list) */
static void put_pins(sbx_buf_t *b, int family, const struct sbx_nft_pin *pins, size_t n,
                     uint64_t now_ms, const char *open, const char *close)
{
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    if (pins[i].addr.family != family || pins[i].until_ms <= now_ms + 1000)
      continue;
    /* one address pinned by two names: the set holds it once, with the longer time */
    bool dup = false;
    for (size_t k = 0; k < n && !dup; k++)
      dup =
          k != i && pins[k].addr.family == family &&
          memcmp(pins[k].addr.a, pins[i].addr.a, 16) == 0 &&
          (pins[k].until_ms > pins[i].until_ms || (pins[k].until_ms == pins[i].until_ms && k < i));
    if (dup)
      continue;
    sbx__buf_puts(b, any ? ", " : open);
    put_addr(b, &pins[i].addr, 128);
    sbx__buf_printf(b, " timeout %llus", (unsigned long long) ((pins[i].until_ms - now_ms) / 1000));
    any = true;
  }
  if (any)
    sbx__buf_puts(b, close);
}

/* The out chain's rules, each line led by lead (indentation inside a table block, or an
 * "add rule" command) */
static void put_out_rules(sbx_buf_t *b, const char *lead, const sbx_net_policy_t *p, uint32_t gen)
{
  sbx__buf_printf(b, "%soif \"lo\" accept\n", lead);
  /* the kernel's own link traffic (neighbour discovery, multicast listener reports): to pasta */
  sbx__buf_printf(b,
                  "%sicmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert, "
                  "mld-listener-report, mld2-listener-report } accept\n",
                  lead);
  /* a connection this ruleset let through goes on; one of an earlier ruleset is decided anew */
  sbx__buf_printf(b, "%sct state established,related ct mark %u accept\n", lead, gen);
  const char *accept = "ct mark set";
  for (size_t i = 0; p && i < p->n; i++) {
    const struct sbx_net_rule *r = &p->rules[i];
    if (r->kind != SBX_NET_IP && r->kind != SBX_NET_CIDR)
      continue;
    sbx__buf_printf(b, "%s%s daddr ", lead, fam(&r->net));
    put_addr(b, &r->net, r->prefix);
    if (r->action == SBX_NET_ALLOW)
      sbx__buf_printf(b, " %s %u accept\n", accept, gen);
    else
      sbx__buf_puts(b, " goto deny\n");
  }
  sbx__buf_printf(b, "%sip daddr @always4 goto deny\n%sip6 daddr @always6 goto deny\n", lead, lead);
  /* other resolvers (DNS, DNS over TLS) unless a rule above names their address */
  sbx__buf_printf(b, "%smeta l4proto { tcp, udp } th dport { 53, 853 } goto deny\n", lead);
  sbx__buf_printf(b, "%sip daddr @pin4 %s %u accept\n%sip6 daddr @pin6 %s %u accept\n", lead,
                  accept, gen, lead, accept, gen);
  if (p && p->default_action == SBX_NET_ALLOW)
    sbx__buf_printf(b, "%s%s %u accept\n", lead, accept, gen);
  else
    sbx__buf_printf(b, "%sgoto deny\n", lead);
}

void sbx__nft_ruleset(sbx_buf_t *b, const sbx_net_policy_t *p,
                      const struct sbx_net_addr *host_addrs, size_t n_host, uint32_t gen,
                      const struct sbx_nft_pin *pins, size_t n_pins, uint64_t now_ms,
                      uint16_t tcp_port)
{
  /* "table" first makes the delete valid when there is none yet */
  sbx__buf_puts(b, "table inet " SBX_NFT_TABLE "\ndelete table inet " SBX_NFT_TABLE "\n");
  sbx__buf_puts(b, "table inet " SBX_NFT_TABLE " {\n");
  static const int families[] = {AF_INET, AF_INET6};
  for (size_t f = 0; f < 2; f++) {
    const char *t = families[f] == AF_INET ? "ipv4_addr" : "ipv6_addr";
    int v = families[f] == AF_INET ? 4 : 6;
    sbx__buf_printf(b, "  set always%d { type %s; flags interval; auto-merge; elements = { ", v, t);
    put_always(b, families[f], host_addrs, n_host);
    sbx__buf_puts(b, " } }\n");
    sbx__buf_printf(b, "  set pin%d { type %s; flags timeout; ", v, t);
    put_pins(b, families[f], pins, n_pins, now_ms, "elements = { ", " }");
    sbx__buf_puts(b, " }\n");
  }
  sbx__buf_puts(b, "  counter denied { }\n");
  sbx__buf_printf(b,
                  "  chain deny {\n"
                  "    counter name \"denied\"\n"
                  "    log group %d\n"
                  "    reject with icmpx type admin-prohibited\n"
                  "  }\n",
                  SBX_NFT_LOG_GROUP);
  /* before the nat chain (-100): what is decided is the real destination, on every packet of a
   * flow; a redirected flow's packets out of the sandbox still carry it here, and "lo" below is
   * only what really is loopback (the relay's answers to the sandbox) */
  sbx__buf_puts(b, "  chain out {\n    type filter hook output priority -150; policy drop;\n");
  put_out_rules(b, "    ", p, gen);
  sbx__buf_puts(b, "  }\n");
  /* TCP the filter let out goes to the enforcer's relay (tcpproxy.h), not pasta */
  if (tcp_port)
    sbx__buf_printf(b,
                    "  chain relay {\n    type nat hook output priority -100; policy accept;\n"
                    "    oif != \"lo\" meta l4proto tcp redirect to :%u\n  }\n",
                    tcp_port);
  sbx__buf_puts(b, "}\n");
}

void sbx__nft_policy_update(sbx_buf_t *b, const sbx_net_policy_t *p, uint32_t gen,
                            const struct sbx_nft_pin *pins, size_t n_pins, uint64_t now_ms)
{
  sbx__buf_puts(b, "flush chain inet " SBX_NFT_TABLE " out\n");
  sbx__buf_puts(b, "flush set inet " SBX_NFT_TABLE " pin4\n");
  put_pins(b, AF_INET, pins, n_pins, now_ms, "add element inet " SBX_NFT_TABLE " pin4 { ", " }\n");
  sbx__buf_puts(b, "flush set inet " SBX_NFT_TABLE " pin6\n");
  put_pins(b, AF_INET6, pins, n_pins, now_ms, "add element inet " SBX_NFT_TABLE " pin6 { ", " }\n");
  put_out_rules(b, "add rule inet " SBX_NFT_TABLE " out ", p, gen);
}

int sbx__nft_pin(struct sbx_nft *n, const struct sbx_net_addr *a, uint32_t secs, bool existed,
                 sbx_error_t *err)
{
  char text[64];
  sbx__net_addr_str(a, text, sizeof text);
  int v = a->family == AF_INET6 ? 6 : 4;
  /* an element's timeout is not refreshed by adding it again: replace it */
  cleanup_free char *cmd =
      xasprintf("add element inet " SBX_NFT_TABLE " pin%d { %s timeout %us }\n", v, text, secs);
  if (existed) {
    cleanup_free char *both =
        xasprintf("delete element inet " SBX_NFT_TABLE " pin%d { %s }\n%s", v, text, cmd);
    if (nft_run_cmd_from_buffer(n->ctx, both) == 0)
      return 0;
    /* it expired in between: add it alone */
  }
  return sbx__nft_run(n, cmd, err);
}
