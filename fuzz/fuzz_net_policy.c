/* libFuzzer target for the egress policy model (src/net/policy.c).
 *
 * Input: a policy document, then optionally "\n--\n" and a PATCH body (an array of rules).
 * Oracles:
 * - a policy that parses serializes to JSON that parses back to the same serialization (a fixed
 *   point: what policy.json holds reads as what was written);
 * - merging the patch keeps the targets unique and the patch's rules first, in their order;
 *   removing every target afterwards leaves no rules;
 * - decisions on each rule's own target (a name for domain rules, the address for IP rules)
 *   never crash and a domain rule decides its own name unless an earlier rule did.
 *
 * Run: fuzz/run.sh 60 fuzz_net_policy */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/policy.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fixed_point(const sbx_net_policy_t *p)
{
  char *s = sbx__net_policy_serialize(p);
  sbx_net_policy_t *q = sbx__net_policy_parse(s, strlen(s), NULL, NULL);
  if (q == NULL)
    abort();
  char *s2 = sbx__net_policy_serialize(q);
  if (strcmp(s, s2) != 0)
    abort();
  free(s);
  free(s2);
  sbx__net_policy_free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *sep = memmem(data, size, "\n--\n", 4);
  size_t plen = sep ? (size_t) (sep - (const char *) data) : size;
  sbx_error_t err = NULL;
  sbx_net_policy_t *p = sbx__net_policy_parse((const char *) data, plen, "policy", &err);
  if (p == NULL) {
    if (err == NULL || err->kind != SBX_E_INVALID)
      abort();
    sbx_error_release(&err);
    return 0;
  }
  fixed_point(p);
  for (size_t i = 0; i < p->n; i++) {
    struct sbx_net_decision d;
    const struct sbx_net_rule *r = &p->rules[i];
    if (r->kind == SBX_NET_DOMAIN) {
      sbx__net_policy_decide_name(p, r->target, &d);
      if (d.rule == NULL || d.rule > r)
        abort();
    } else if (r->kind == SBX_NET_IP || r->kind == SBX_NET_CIDR) {
      sbx__net_policy_decide_addr(p, &r->net, NULL, 0, NULL, &d);
      if (d.rule == NULL || d.rule > r)
        abort();
    }
  }
  if (sep) {
    const char *body = sep + 4;
    size_t blen = size - plen - 4;
    json_t *j = json_loadb(body, blen, JSON_DECODE_ANY, NULL);
    struct sbx_net_rule *in = NULL;
    size_t n = 0;
    if (j && sbx__net_rules_from_json(j, "body", &in, &n, &err) == 0) {
      size_t before = p->n;
      if (sbx__net_policy_merge(p, in, n, &err) == 0) {
        for (size_t i = 0; i < p->n; i++)
          for (size_t k = 0; k < i; k++)
            if (strcmp(p->rules[i].target, p->rules[k].target) == 0)
              abort();
        /* the patch's first rule leads */
        if (n > 0 &&
            (strcmp(p->rules[0].target, in[0].target) != 0 || p->rules[0].action != in[0].action))
          abort();
        fixed_point(p);
        const char **targets = malloc((p->n + 1) * sizeof *targets);
        for (size_t i = 0; i < p->n; i++)
          targets[i] = xstrdup(p->rules[i].target);
        size_t total = p->n;
        if (sbx__net_policy_remove(p, targets, total, NULL) != (int) total || p->n != 0)
          abort();
        for (size_t i = 0; i < total; i++)
          free((char *) targets[i]);
        free(targets);
      } else {
        if (p->n != before)
          abort();
        sbx_error_release(&err);
      }
      sbx__net_rules_free(in, n);
    } else {
      sbx_error_release(&err);
    }
    json_decref(j);
  }
  sbx__net_policy_free(p);
  return 0;
}
