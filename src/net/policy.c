/* The egress policy model (see policy.h for the semantics). */
#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "policy.h"
#include "util.h"

#define V4(a, b, c, d)                                                                             \
  {                                                                                                \
    AF_INET,                                                                                       \
    {                                                                                              \
      a, b, c, d                                                                                   \
    }                                                                                              \
  }
#define V6(...)                                                                                    \
  {                                                                                                \
    AF_INET6,                                                                                      \
    {                                                                                              \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  }

/* Ordered from the most specific, so a decision names the narrowest range (metadata before
 * link-local). */
const struct sbx_net_range sbx__net_always_denied[] = {
    {V4(169, 254, 169, 254), 32, "169.254.169.254/32"},
    {V6(0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54), 128,
     "fd00:ec2::254/128"},
    {V4(0, 0, 0, 0), 8, "0.0.0.0/8"},
    {V4(127, 0, 0, 0), 8, "127.0.0.0/8"},
    {V4(10, 0, 0, 0), 8, "10.0.0.0/8"},
    {V4(100, 64, 0, 0), 10, "100.64.0.0/10"},
    {V4(169, 254, 0, 0), 16, "169.254.0.0/16"},
    {V4(172, 16, 0, 0), 12, "172.16.0.0/12"},
    {V4(192, 168, 0, 0), 16, "192.168.0.0/16"},
    {V4(224, 0, 0, 0), 4, "224.0.0.0/4"},
    {V4(240, 0, 0, 0), 4, "240.0.0.0/4"},
    {V6(0), 128, "::/128"},
    {V6(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), 128, "::1/128"},
    {V6(0xfc), 7, "fc00::/7"},
    {V6(0xfe, 0x80), 10, "fe80::/10"},
    {V6(0xff), 8, "ff00::/8"},
};
const size_t sbx__net_n_always_denied = ARRAY_SIZE(sbx__net_always_denied);

sbx_net_policy_t *sbx__net_policy_new(int default_action)
{
  sbx_net_policy_t *p = xzalloc(sizeof *p);
  p->default_action = default_action;
  return p;
}

void sbx__net_rule_clear(struct sbx_net_rule *r)
{
  free(r->target);
  r->target = NULL;
}

void sbx__net_rules_free(struct sbx_net_rule *rules, size_t n)
{
  for (size_t i = 0; i < n; i++)
    sbx__net_rule_clear(&rules[i]);
  free(rules);
}

void sbx__net_policy_free(sbx_net_policy_t *p)
{
  if (p == NULL)
    return;
  sbx__net_rules_free(p->rules, p->n);
  free(p);
}

static struct sbx_net_rule rule_copy(const struct sbx_net_rule *r)
{
  struct sbx_net_rule c = *r;
  c.target = xstrdup(r->target);
  return c;
}

sbx_net_policy_t *sbx__net_policy_dup(const sbx_net_policy_t *p)
{
  sbx_net_policy_t *c = sbx__net_policy_new(p->default_action);
  c->rules = xreallocarray(NULL, p->n ? p->n : 1, sizeof *c->rules);
  for (size_t i = 0; i < p->n; i++)
    c->rules[i] = rule_copy(&p->rules[i]);
  c->n = p->n;
  return c;
}

bool sbx__net_addr_parse(const char *s, struct sbx_net_addr *a)
{
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, s, a->a) == 1) {
    a->family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, s, a->a) == 1) {
    a->family = AF_INET6;
    return true;
  }
  return false;
}

const char *sbx__net_addr_str(const struct sbx_net_addr *a, char *buf, size_t len)
{
  if (inet_ntop(a->family, a->a, buf, (socklen_t) len) == NULL)
    snprintf(buf, len, "?");
  return buf;
}

static int family_bits(int family)
{
  return family == AF_INET ? 32 : 128;
}

bool sbx__net_addr_in(const struct sbx_net_addr *a, const struct sbx_net_addr *net, int prefix)
{
  if (a->family != net->family)
    return false;
  int full = prefix / 8, rest = prefix % 8;
  if (memcmp(a->a, net->a, (size_t) full) != 0)
    return false;
  if (rest == 0)
    return true;
  uint8_t mask = (uint8_t) (0xff << (8 - rest));
  return (a->a[full] & mask) == (net->a[full] & mask);
}

static void mask_addr(struct sbx_net_addr *a, int prefix)
{
  int bits = family_bits(a->family);
  for (int i = prefix; i < bits; i++)
    a->a[i / 8] &= (uint8_t) ~(0x80 >> (i % 8));
}

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it is. */
static struct sbx_net_addr unmap(const struct sbx_net_addr *a)
{
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  struct sbx_net_addr r = *a;
  if (a->family == AF_INET6 && memcmp(a->a, mapped, 12) == 0) {
    memset(&r, 0, sizeof r);
    r.family = AF_INET;
    memcpy(r.a, a->a + 12, 4);
  }
  return r;
}

/* A domain: LDH labels of 1..63 (underscores too, for service names), at least one dot is not
 * required (`localhost`-like names are names). */
static bool valid_domain(const char *s, const char **why)
{
  size_t label = 0, n = strlen(s);
  if (n == 0) {
    *why = "empty name";
    return false;
  }
  if (n > SBX_NET_MAX_TARGET) {
    *why = "longer than 253 characters";
    return false;
  }
  for (const char *c = s;; c++) {
    if (*c == '.' || *c == '\0') {
      if (label == 0) {
        *why = "empty label";
        return false;
      }
      if (label > 63) {
        *why = "label longer than 63 characters";
        return false;
      }
      if (c[-1] == '-' || c[-(ptrdiff_t) label] == '-') {
        *why = "label starts or ends with '-'";
        return false;
      }
      if (*c == '\0')
        break;
      label = 0;
      continue;
    }
    if (!(isalnum((unsigned char) *c) || *c == '-' || *c == '_')) {
      *why = *c == '*' ? "'*' only as a leading \"*.\" label" : "a character outside [a-z0-9-_.]";
      return false;
    }
    label++;
  }
  return true;
}

int sbx__net_target_parse(const char *target, struct sbx_net_rule *r, sbx_error_t *err)
{
  size_t n = strlen(target);
  if (n == 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "empty target");
  if (n > SBX_NET_MAX_TARGET + 2)
    return sbx__make_error(err, 0, SBX_E_INVALID, "target longer than %d characters",
                           SBX_NET_MAX_TARGET);
  cleanup_free char *t = xstrdup(target);
  const char *slash = strchr(t, '/');
  struct sbx_net_addr a;
  if (slash) {
    t[slash - t] = '\0';
    const char *len = slash + 1;
    char *end;
    if (!sbx__net_addr_parse(t, &a))
      return sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: CIDR with a bad address", target);
    long pl = strtol(len, &end, 10);
    if (*len == '\0' || !isdigit((unsigned char) *len) || *end != '\0' || pl < 0 ||
        pl > family_bits(a.family) || (len[0] == '0' && len[1] != '\0'))
      return sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: CIDR prefix length must be 0..%d",
                             target, family_bits(a.family));
    mask_addr(&a, (int) pl);
    char buf[INET6_ADDRSTRLEN];
    r->kind = SBX_NET_CIDR;
    r->net = a;
    r->prefix = (int) pl;
    r->target = xasprintf("%s/%ld", sbx__net_addr_str(&a, buf, sizeof buf), pl);
    return 0;
  }
  if (sbx__net_addr_parse(t, &a)) {
    char buf[INET6_ADDRSTRLEN];
    r->kind = SBX_NET_IP;
    r->net = a;
    r->prefix = family_bits(a.family);
    r->target = xstrdup(sbx__net_addr_str(&a, buf, sizeof buf));
    return 0;
  }
  if (strchr(t, ':'))
    return sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: not an IPv6 address", target);
  for (char *c = t; *c; c++)
    *c = (char) tolower((unsigned char) *c);
  if (n > 1 && t[n - 1] == '.')
    t[--n] = '\0';
  bool wild = sbx__str_has_prefix(t, "*.");
  const char *why = NULL;
  if (!valid_domain(wild ? t + 2 : t, &why))
    return sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: not a domain, wildcard, IP or CIDR (%s)",
                           target, why);
  /* a name made of digits and dots only would read as an address to a resolver */
  if (strspn(wild ? t + 2 : t, "0123456789.") == strlen(wild ? t + 2 : t))
    return sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: not a valid IP address", target);
  memset(&r->net, 0, sizeof r->net);
  r->prefix = 0;
  r->kind = wild ? SBX_NET_WILDCARD : SBX_NET_DOMAIN;
  r->target = steal_pointer(&t);
  return 0;
}

static int parse_action(const json_t *v, const char *what, int *out, sbx_error_t *err)
{
  const char *s = json_string_value(v);
  if (s && strcmp(s, "allow") == 0)
    *out = SBX_NET_ALLOW;
  else if (s && strcmp(s, "deny") == 0)
    *out = SBX_NET_DENY;
  else
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: must be \"allow\" or \"deny\"", what);
  return 0;
}

static int parse_rule(const json_t *j, const char *what, struct sbx_net_rule *r, sbx_error_t *err)
{
  if (!json_is_object(j))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: must be an object {action, target}", what);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *) j, key, v)
  {
    if (strcmp(key, "action") != 0 && strcmp(key, "target") != 0)
      return sbx__make_error(err, 0, SBX_E_INVALID, "%s.%s: unknown field (only action, target)",
                             what, key);
  }
  json_t *a = json_object_get(j, "action"), *t = json_object_get(j, "target");
  if (a == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s.action: missing", what);
  if (t == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s.target: missing", what);
  cleanup_free char *aw = xasprintf("%s.action", what);
  if (parse_action(a, aw, &r->action, err) < 0)
    return -1;
  if (!json_is_string(t))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s.target: must be a string", what);
  if (strlen(json_string_value(t)) != json_string_length(t))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s.target: contains a NUL byte", what);
  if (sbx__net_target_parse(json_string_value(t), r, err) < 0)
    return sbx__error_wrap(err, "%s.target", what);
  return 0;
}

int sbx__net_rules_from_json(const json_t *j, const char *what, struct sbx_net_rule **rules,
                             size_t *n, sbx_error_t *err)
{
  if (what == NULL)
    what = "rules";
  if (!json_is_array(j))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: must be an array of {action, target}", what);
  size_t len = json_array_size(j);
  if (len > SBX_NET_MAX_RULES)
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: %zu rules, at most %d", what, len,
                           SBX_NET_MAX_RULES);
  struct sbx_net_rule *v = xreallocarray(NULL, len ? len : 1, sizeof *v);
  for (size_t i = 0; i < len; i++) {
    cleanup_free char *w = xasprintf("%s[%zu]", what, i);
    memset(&v[i], 0, sizeof v[i]);
    if (parse_rule(json_array_get(j, i), w, &v[i], err) < 0) {
      sbx__net_rules_free(v, i);
      return -1;
    }
  }
  *rules = v;
  *n = len;
  return 0;
}

static sbx_net_policy_t *from_deerflow(const json_t *j, const char *what, sbx_error_t *err)
{
  const char *key;
  json_t *v;
  json_object_foreach((json_t *) j, key, v)
  {
    if (strcmp(key, "mode") != 0 && strcmp(key, "allowlist") != 0) {
      sbx__make_error(err, 0, SBX_E_INVALID, "%s.%s: unknown field with mode (only allowlist)",
                      what, key);
      return NULL;
    }
  }
  json_t *mode = json_object_get(j, "mode"), *list = json_object_get(j, "allowlist");
  if (!json_is_string(mode)) {
    sbx__make_error(err, 0, SBX_E_INVALID,
                    "%s.mode: must be \"open\", \"isolated\" or \"allowlist\"", what);
    return NULL;
  }
  if (list && !json_is_array(list)) {
    sbx__make_error(err, 0, SBX_E_INVALID, "%s.allowlist: must be a list of targets", what);
    return NULL;
  }
  size_t n = list ? json_array_size(list) : 0;
  if (n > SBX_NET_MAX_RULES) {
    sbx__make_error(err, 0, SBX_E_INVALID, "%s.allowlist: %zu targets, at most %d", what, n,
                    SBX_NET_MAX_RULES);
    return NULL;
  }
  cleanup_free const char **targets = xreallocarray(NULL, n ? n : 1, sizeof *targets);
  for (size_t i = 0; i < n; i++) {
    json_t *t = json_array_get(list, i);
    if (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t)) {
      sbx__make_error(err, 0, SBX_E_INVALID, "%s.allowlist[%zu]: must be a string", what, i);
      return NULL;
    }
    targets[i] = json_string_value(t);
  }
  sbx_net_policy_t *p = sbx__net_policy_from_mode(json_string_value(mode), targets, n, err);
  if (p == NULL)
    sbx__error_wrap(err, "%s", what);
  return p;
}

sbx_net_policy_t *sbx__net_policy_from_mode(const char *mode, const char *const *allowlist,
                                            size_t n, sbx_error_t *err)
{
  int def;
  if (strcmp(mode, "open") == 0)
    def = SBX_NET_ALLOW;
  else if (strcmp(mode, "isolated") == 0 || strcmp(mode, "allowlist") == 0)
    def = SBX_NET_DENY;
  else {
    sbx__make_error(err, 0, SBX_E_INVALID,
                    "mode: `%s` is not \"open\", \"isolated\" or \"allowlist\"", mode);
    return NULL;
  }
  if (strcmp(mode, "allowlist") != 0 && n > 0) {
    sbx__make_error(err, 0, SBX_E_INVALID, "allowlist: only with mode \"allowlist\" (mode is %s)",
                    mode);
    return NULL;
  }
  if (n > SBX_NET_MAX_RULES) {
    sbx__make_error(err, 0, SBX_E_INVALID, "allowlist: %zu targets, at most %d", n,
                    SBX_NET_MAX_RULES);
    return NULL;
  }
  sbx_net_policy_t *p = sbx__net_policy_new(def);
  p->rules = xreallocarray(NULL, n ? n : 1, sizeof *p->rules);
  for (size_t i = 0; i < n; i++) {
    struct sbx_net_rule r = {.action = SBX_NET_ALLOW};
    if (sbx__net_target_parse(allowlist[i], &r, err) < 0) {
      sbx__error_wrap(err, "allowlist[%zu]", i);
      sbx__net_policy_free(p);
      return NULL;
    }
    /* the first rule for a target wins, as in a patch */
    bool dup = false;
    for (size_t k = 0; k < p->n && !dup; k++)
      dup = strcmp(p->rules[k].target, r.target) == 0;
    if (dup)
      sbx__net_rule_clear(&r);
    else
      p->rules[p->n++] = r;
  }
  return p;
}

sbx_net_policy_t *sbx__net_policy_from_json(const json_t *j, const char *what, sbx_error_t *err)
{
  if (what == NULL)
    what = "policy";
  if (j == NULL || json_is_null(j))
    return sbx__net_policy_new(SBX_NET_DENY);
  if (!json_is_object(j)) {
    sbx__make_error(err, 0, SBX_E_INVALID, "%s: must be an object {defaultAction, egress}", what);
    return NULL;
  }
  if (json_object_get(j, "mode")) {
    if (json_object_get(j, "defaultAction") || json_object_get(j, "egress")) {
      sbx__make_error(err, 0, SBX_E_INVALID,
                      "%s: either {defaultAction, egress} or DeerFlow's {mode, allowlist}, not "
                      "both",
                      what);
      return NULL;
    }
    return from_deerflow(j, what, err);
  }
  const char *key;
  json_t *v;
  json_object_foreach((json_t *) j, key, v)
  {
    if (strcmp(key, "defaultAction") != 0 && strcmp(key, "egress") != 0) {
      sbx__make_error(err, 0, SBX_E_INVALID,
                      "%s.%s: unknown field (only defaultAction, egress; or mode, allowlist)", what,
                      key);
      return NULL;
    }
  }
  int def = SBX_NET_DENY;
  json_t *d = json_object_get(j, "defaultAction");
  if (d && !json_is_null(d)) {
    cleanup_free char *w = xasprintf("%s.defaultAction", what);
    if (parse_action(d, w, &def, err) < 0)
      return NULL;
  }
  sbx_net_policy_t *p = sbx__net_policy_new(def);
  json_t *e = json_object_get(j, "egress");
  if (e && !json_is_null(e)) {
    cleanup_free char *w = xasprintf("%s.egress", what);
    if (sbx__net_rules_from_json(e, w, &p->rules, &p->n, err) < 0) {
      sbx__net_policy_free(p);
      return NULL;
    }
  }
  return p;
}

sbx_net_policy_t *sbx__net_policy_parse(const char *text, size_t len, const char *what,
                                        sbx_error_t *err)
{
  json_error_t je;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (j == NULL) {
    sbx__make_error(err, 0, SBX_E_INVALID, "%s: not JSON (line %d: %s)", what ? what : "policy",
                    je.line, je.text);
    return NULL;
  }
  sbx_net_policy_t *p = sbx__net_policy_from_json(j, what, err);
  json_decref(j);
  return p;
}

static const char *action_str(int a)
{
  return a == SBX_NET_ALLOW ? "allow" : "deny";
}

json_t *sbx__net_policy_to_json(const sbx_net_policy_t *p)
{
  json_t *egress = json_array();
  for (size_t i = 0; i < p->n; i++)
    json_array_append_new(egress, json_pack("{s:s, s:s}", "action", action_str(p->rules[i].action),
                                            "target", p->rules[i].target));
  return json_pack("{s:s, s:o}", "defaultAction", action_str(p->default_action), "egress", egress);
}

char *sbx__net_policy_serialize(const sbx_net_policy_t *p)
{
  json_t *j = sbx__net_policy_to_json(p);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (s == NULL)
    abort(); /* only allocation fails here */
  return s;
}

static bool has_target(const struct sbx_net_rule *v, size_t n, const char *target)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i].target, target) == 0)
      return true;
  return false;
}

int sbx__net_policy_merge(sbx_net_policy_t *p, const struct sbx_net_rule *in, size_t n,
                          sbx_error_t *err)
{
  struct sbx_net_rule *out = xreallocarray(NULL, p->n + n + 1, sizeof *out);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!has_target(out, k, in[i].target))
      out[k++] = rule_copy(&in[i]);
  /* count first: a refused merge changes nothing */
  size_t total = k;
  bool *keep = xzalloc(p->n + 1);
  for (size_t i = 0; i < p->n; i++) {
    bool dup = has_target(out, k, p->rules[i].target);
    for (size_t m = 0; m < i && !dup; m++)
      dup = keep[m] && strcmp(p->rules[m].target, p->rules[i].target) == 0;
    keep[i] = !dup;
    total += keep[i];
  }
  if (total > SBX_NET_MAX_RULES) {
    sbx__net_rules_free(out, k);
    free(keep);
    return sbx__make_error(err, 0, SBX_E_INVALID, "the policy would have %zu rules, at most %d",
                           total, SBX_NET_MAX_RULES);
  }
  for (size_t i = 0; i < p->n; i++) {
    if (keep[i])
      out[k++] = p->rules[i];
    else
      sbx__net_rule_clear(&p->rules[i]);
  }
  free(keep);
  free(p->rules);
  p->rules = out;
  p->n = k;
  return 0;
}

int sbx__net_policy_remove(sbx_net_policy_t *p, const char *const *targets, size_t n,
                           sbx_error_t *err)
{
  cleanup_free char **keys = xreallocarray(NULL, n ? n : 1, sizeof *keys);
  for (size_t i = 0; i < n; i++) {
    struct sbx_net_rule r = {0};
    if (sbx__net_target_parse(targets[i], &r, err) < 0) {
      for (size_t k = 0; k < i; k++)
        free(keys[k]);
      return sbx__error_wrap(err, "target %zu", i);
    }
    keys[i] = r.target;
  }
  size_t k = 0, removed = 0;
  for (size_t i = 0; i < p->n; i++) {
    bool hit = false;
    for (size_t m = 0; m < n && !hit; m++)
      hit = strcmp(p->rules[i].target, keys[m]) == 0;
    if (hit) {
      sbx__net_rule_clear(&p->rules[i]);
      removed++;
    } else
      p->rules[k++] = p->rules[i];
  }
  p->n = k;
  for (size_t i = 0; i < n; i++)
    free(keys[i]);
  return (int) removed;
}

const char *sbx__net_policy_mode(const sbx_net_policy_t *p)
{
  if (p->n > 0)
    return "enforcing";
  return p->default_action == SBX_NET_ALLOW ? "allow_all" : "deny_all";
}

int sbx__net_host_addrs(struct sbx_net_addr **out, size_t *n, sbx_error_t *err)
{
  struct ifaddrs *ifa;
  if (getifaddrs(&ifa) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "getifaddrs");
  size_t cnt = 0, cap = 8;
  struct sbx_net_addr *v = xreallocarray(NULL, cap, sizeof *v);
  for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
    if (i->ifa_addr == NULL)
      continue;
    struct sbx_net_addr a = {0};
    if (i->ifa_addr->sa_family == AF_INET) {
      a.family = AF_INET;
      memcpy(a.a, &((struct sockaddr_in *) (void *) i->ifa_addr)->sin_addr, 4);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      a.family = AF_INET6;
      memcpy(a.a, &((struct sockaddr_in6 *) (void *) i->ifa_addr)->sin6_addr, 16);
    } else
      continue;
    if (cnt == cap)
      v = xreallocarray(v, cap *= 2, sizeof *v);
    v[cnt++] = a;
  }
  freeifaddrs(ifa);
  *out = v;
  *n = cnt;
  return 0;
}

static void decided_by(struct sbx_net_decision *d, const struct sbx_net_rule *r)
{
  d->action = r->action;
  d->rule = r;
  snprintf(d->why, sizeof d->why, "%s %s", action_str(r->action), r->target);
}

static bool name_matches(const struct sbx_net_rule *r, const char *name, size_t len)
{
  if (r->kind == SBX_NET_DOMAIN)
    return strlen(r->target) == len && memcmp(r->target, name, len) == 0;
  /* "*.x.y" matches "a.x.y" and "a.b.x.y", not "x.y" */
  const char *suffix = r->target + 1; /* ".x.y" */
  size_t sl = strlen(suffix);
  return len > sl && memcmp(name + len - sl, suffix, sl) == 0;
}

void sbx__net_policy_decide_name(const sbx_net_policy_t *p, const char *name,
                                 struct sbx_net_decision *d)
{
  char buf[SBX_NET_MAX_TARGET + 2];
  size_t len = strnlen(name, sizeof buf);
  if (len == sizeof buf) {
    /* longer than any DNS name: never a match for a rule, and never let through */
    d->action = SBX_NET_DENY;
    d->rule = NULL;
    snprintf(d->why, sizeof d->why, "invalid name: longer than %d characters", SBX_NET_MAX_TARGET);
    return;
  }
  for (size_t i = 0; i < len; i++)
    buf[i] = (char) tolower((unsigned char) name[i]);
  if (len > 1 && buf[len - 1] == '.')
    len--;
  buf[len] = '\0';
  for (size_t i = 0; i < p->n; i++) {
    const struct sbx_net_rule *r = &p->rules[i];
    if ((r->kind == SBX_NET_DOMAIN || r->kind == SBX_NET_WILDCARD) && name_matches(r, buf, len)) {
      decided_by(d, r);
      return;
    }
  }
  d->action = p->default_action;
  d->rule = NULL;
  snprintf(d->why, sizeof d->why, "default");
}

void sbx__net_policy_decide_addr(const sbx_net_policy_t *p, const struct sbx_net_addr *addr,
                                 const struct sbx_net_addr *host_addrs, size_t n_host,
                                 const struct sbx_net_decision *via_name,
                                 struct sbx_net_decision *d)
{
  struct sbx_net_addr a = unmap(addr);
  for (size_t i = 0; i < p->n; i++) {
    const struct sbx_net_rule *r = &p->rules[i];
    if ((r->kind == SBX_NET_IP || r->kind == SBX_NET_CIDR) &&
        sbx__net_addr_in(&a, &r->net, r->prefix)) {
      decided_by(d, r);
      return;
    }
  }
  char buf[INET6_ADDRSTRLEN];
  for (size_t i = 0; i < n_host; i++) {
    struct sbx_net_addr h = unmap(&host_addrs[i]);
    if (sbx__net_addr_in(&a, &h, family_bits(h.family))) {
      d->action = SBX_NET_DENY;
      d->rule = NULL;
      snprintf(d->why, sizeof d->why, "always-denied: host %s",
               sbx__net_addr_str(&h, buf, sizeof buf));
      return;
    }
  }
  for (size_t i = 0; i < sbx__net_n_always_denied; i++) {
    const struct sbx_net_range *g = &sbx__net_always_denied[i];
    if (sbx__net_addr_in(&a, &g->net, g->prefix)) {
      d->action = SBX_NET_DENY;
      d->rule = NULL;
      snprintf(d->why, sizeof d->why, "always-denied: %s", g->text);
      return;
    }
  }
  if (via_name) {
    *d = *via_name;
    return;
  }
  d->action = p->default_action;
  d->rule = NULL;
  snprintf(d->why, sizeof d->why, "default");
}
