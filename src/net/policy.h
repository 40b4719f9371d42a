/* The egress policy model: OpenSandbox's NetworkPolicy shape ({defaultAction, egress: [{action,
 * target}]}) plus DeerFlow's keys ({mode: open|isolated|allowlist, allowlist: [...]}), parsed,
 * serialized, merged (PATCH), pruned (DELETE), and the decisions the enforcer takes with it.
 *
 * Semantics (pinned by tests/unit/test_net_policy.c):
 * - A target is a domain (`pypi.org`, lowercased, one trailing dot dropped), a leading wildcard
 *   (`*.pythonhosted.org`: any name below it, not the name itself), an IPv4/IPv6 literal, or a
 *   CIDR (`10.0.0.0/8`; host bits are cleared, so `10.1.2.3/8` is stored as `10.0.0.0/8`).
 * - Rules are evaluated in order; the first rule whose target matches decides. Names are matched
 *   by domain and wildcard rules only; addresses by IP and CIDR rules only.
 * - defaultAction omitted means deny (OpenSandbox's sidecar does the same).
 * - The always-denied set (every host address, loopback, link-local, 169.254.169.254,
 *   fd00:ec2::254, RFC 1918, CGNAT 100.64.0.0/10, ULA fc00::/7, and the unspecified/multicast
 *   ranges) is denied unless an IP or CIDR *allow* rule covers the address ("explicitly"): neither
 *   defaultAction allow nor an allowed domain whose answer is such an address reaches it.
 * - Two rules have the same target when their normalized targets are equal (the merge key). */
#ifndef SBX_NET_POLICY_H
#define SBX_NET_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sbx/error.h>

#define SBX_NET_MAX_RULES 4096 /* rules in one policy (OpenSandbox's sidecar caps it too) */
#define SBX_NET_MAX_TARGET 253 /* a DNS name's longest text form */

enum sbx_net_action { SBX_NET_DENY = 0, SBX_NET_ALLOW = 1 };
enum sbx_net_kind { SBX_NET_DOMAIN, SBX_NET_WILDCARD, SBX_NET_IP, SBX_NET_CIDR };

/* An address: family AF_INET (the first 4 bytes of a) or AF_INET6. */
struct sbx_net_addr {
  int family;
  uint8_t a[16];
};

struct sbx_net_rule {
  int action;   /* enum sbx_net_action */
  int kind;     /* enum sbx_net_kind */
  char *target; /* normalized text: the merge key and what is serialized */
  /* IP and CIDR rules: the network and its prefix length (32 or 128 for an IP) */
  struct sbx_net_addr net;
  int prefix;
};

typedef struct sbx_net_policy {
  int default_action; /* enum sbx_net_action */
  struct sbx_net_rule *rules;
  size_t n;
} sbx_net_policy_t;

/* What decided: the rule (NULL for the default or the always-denied set) and a text for logs
 * and the denied log's "rule" field: the rule's "allow TARGET"/"deny TARGET", "default", or
 * "always-denied: RANGE" (e.g. "always-denied: 10.0.0.0/8", "always-denied: host 192.0.2.7"). */
struct sbx_net_decision {
  int action;
  const struct sbx_net_rule *rule;
  char why[96];
};

sbx_net_policy_t *sbx__net_policy_new(int default_action);
void sbx__net_policy_free(sbx_net_policy_t *p);
sbx_net_policy_t *sbx__net_policy_dup(const sbx_net_policy_t *p);

/* Parses a policy object: OpenSandbox's {defaultAction?, egress?} or DeerFlow's {mode,
 * allowlist?} (not both shapes at once). null or {} is default deny with no rules. Errors are
 * SBX_E_INVALID and name the field: "egress[2].target: ...". what names the input in messages
 * (e.g. "networkPolicy"); NULL means "policy". */
sbx_net_policy_t *sbx__net_policy_from_json(const json_t *j, const char *what, sbx_error_t *err);
sbx_net_policy_t *sbx__net_policy_parse(const char *text, size_t len, const char *what,
                                        sbx_error_t *err);
/* DeerFlow's modes: open = default allow, no rules; isolated = default deny, no rules (and
 * no route: the caller maps it to sandbox.network none); allowlist = default deny plus an allow
 * rule per target. */
sbx_net_policy_t *sbx__net_policy_from_mode(const char *mode, const char *const *allowlist,
                                            size_t n, sbx_error_t *err);

/* {"defaultAction": "...", "egress": [{"action", "target"}...]} (always both keys). */
json_t *sbx__net_policy_to_json(const sbx_net_policy_t *p);
char *sbx__net_policy_serialize(const sbx_net_policy_t *p); /* compact JSON text, malloc'ed */

/* Parses one rule target into r (action left alone; r->target malloc'ed). */
int sbx__net_target_parse(const char *target, struct sbx_net_rule *r, sbx_error_t *err);
void sbx__net_rule_clear(struct sbx_net_rule *r);
/* Parses a PATCH body: a non-empty array of {action, target}. */
int sbx__net_rules_from_json(const json_t *j, const char *what, struct sbx_net_rule **rules,
                             size_t *n, sbx_error_t *err);
void sbx__net_rules_free(struct sbx_net_rule *rules, size_t n);

/* PATCH: the incoming rules first (the first of several with one target wins), then the
 * existing rules whose target the patch does not name. Refuses (changing nothing) when the
 * result would exceed SBX_NET_MAX_RULES. */
int sbx__net_policy_merge(sbx_net_policy_t *p, const struct sbx_net_rule *in, size_t n,
                          sbx_error_t *err);
/* DELETE: removes the rules whose target (normalized) is one of targets; unknown targets are
 * ignored. Returns the number removed, or -1 when a target does not parse. */
int sbx__net_policy_remove(sbx_net_policy_t *p, const char *const *targets, size_t n,
                           sbx_error_t *err);

/* OpenSandbox's derived mode: "allow_all" (default allow, no rules), "deny_all" (default deny,
 * no rules) or "enforcing". */
const char *sbx__net_policy_mode(const sbx_net_policy_t *p);

/* The always-denied ranges (fixed part; the host's own addresses come on top). */
struct sbx_net_range {
  struct sbx_net_addr net;
  int prefix;
  const char *text;
};
extern const struct sbx_net_range sbx__net_always_denied[];
extern const size_t sbx__net_n_always_denied;

/* The host's own addresses (getifaddrs, every interface). */
int sbx__net_host_addrs(struct sbx_net_addr **out, size_t *n, sbx_error_t *err);

/* Parses an IPv4/IPv6 literal (no brackets, no zone). */
bool sbx__net_addr_parse(const char *s, struct sbx_net_addr *a);
/* Text form into buf (INET6_ADDRSTRLEN is enough). */
const char *sbx__net_addr_str(const struct sbx_net_addr *a, char *buf, size_t len);
bool sbx__net_addr_in(const struct sbx_net_addr *a, const struct sbx_net_addr *net, int prefix);

/* A DNS name (lowercase or not, trailing dot or not): the first domain/wildcard rule matching
 * it, else the default. Never consults the always-denied set (that is about addresses). A name
 * longer than 254 characters is denied ("invalid name: ..."). */
void sbx__net_policy_decide_name(const sbx_net_policy_t *p, const char *name,
                                 struct sbx_net_decision *d);
/* An address the sandbox connects to. via_name: NULL for a connection to a literal address;
 * otherwise the (allow) decision of the name whose answer pinned this address, which then takes
 * the place of the default. Order: the first IP/CIDR rule covering it; else the always-denied set
 * (host_addrs, then the fixed ranges) denies; else via_name's decision or the default. An
 * IPv4-mapped IPv6 address is decided as its IPv4 address. */
void sbx__net_policy_decide_addr(const sbx_net_policy_t *p, const struct sbx_net_addr *a,
                                 const struct sbx_net_addr *host_addrs, size_t n_host,
                                 const struct sbx_net_decision *via_name,
                                 struct sbx_net_decision *d);

#endif
