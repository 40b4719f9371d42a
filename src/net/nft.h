/* The enforcer's packet filter: one nftables table (inet sbx) in the sandbox's network
 * namespace, which belongs to the host's user namespace, so root inside holds no capability
 * over it. The table is made whole once; a policy change replaces the policy's part of it (the
 * filter chain's rules and the pin sets) in one transaction; addresses an allowed name resolved
 * to are pinned into timeout sets in between. */
#ifndef SBX_NET_NFT_H
#define SBX_NET_NFT_H

#include <stdbool.h>
#include <stdint.h>

#include <sbx/error.h>

#include "policy.h"
#include "util.h"

#define SBX_NFT_TABLE "sbx"
#define SBX_NFT_LOG_GROUP 7   /* nflog group of denied packets (the enforcer reads it) */
#define SBX_NFT_PIN_FLOOR 30  /* seconds an answer's address stays pinned at least */
#define SBX_NFT_PIN_CEIL 3600 /* and at most */

/* A pinned address and the name whose answer pinned it (re-decided on a policy change). */
struct sbx_nft_pin {
  struct sbx_net_addr addr;
  uint64_t until_ms; /* CLOCK_MONOTONIC */
  char name[SBX_NET_MAX_TARGET + 1];
};

struct sbx_nft;

/* A libnftables context in the calling thread's network namespace. */
struct sbx_nft *sbx__nft_new(sbx_error_t *err);
void sbx__nft_free(struct sbx_nft *n);

/* The whole table for p as nft text: the explicit IP/CIDR rules in order, then the
 * always-denied set (fixed ranges and host_addrs), other resolvers (ports 53 and 853), the
 * pinned addresses, the default. gen marks the connections this ruleset accepted: established
 * ones from an earlier ruleset are decided again. pins are included with their remaining
 * time (at now_ms). tcp_port: non-zero adds the nat chain that redirects the TCP connections
 * the filter let out to the enforcer's relay on that loopback port (the filter runs first). */
void sbx__nft_ruleset(sbx_buf_t *out, const sbx_net_policy_t *p,
                      const struct sbx_net_addr *host_addrs, size_t n_host, uint32_t gen,
                      const struct sbx_nft_pin *pins, size_t n_pins, uint64_t now_ms,
                      uint16_t tcp_port);

/* The policy's part of a table sbx__nft_ruleset made, as nft commands that replace it: the
 * filter chain's rules and the pin sets (same arguments). The hooks, the always-denied sets and
 * the relay's chain stay, neither re-registered nor re-parsed. */
void sbx__nft_policy_update(sbx_buf_t *out, const sbx_net_policy_t *p, uint32_t gen,
                            const struct sbx_nft_pin *pins, size_t n_pins, uint64_t now_ms);

/* Runs nft text (one transaction). SBX_E_BACKEND with nft's message. */
int sbx__nft_run(struct sbx_nft *n, const char *text, sbx_error_t *err);

/* Adds a to the pin set for secs (replacing a shorter pin: existed says one is there). */
int sbx__nft_pin(struct sbx_nft *n, const struct sbx_net_addr *a, uint32_t secs, bool existed,
                 sbx_error_t *err);

#endif
