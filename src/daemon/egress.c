/* OpenSandbox's egress API (specs/egress-api.yaml: GET, PATCH and DELETE /policy) for one
 * sandbox, served below its endpoint for the egress port (18080, where the official SDK looks:
 * GET /sandboxes/{id}/endpoints/18080), over the sandbox's net/policy.json, which its enforcer
 * applies within a second. Errors are text/plain, as the sidecar's. And sbxd's GET /metrics: the
 * enforcers' counters of denied lookups and connections, per sandbox (Prometheus text). */
#include "egress.h"
#include "ctx.h"
#include "registry.h"

#include <stdarg.h>
#include <string.h>

#include "../lib/state.h"
#include "../net/policy.h"
#include "../net/store.h"

/* what the enforcer does (net-path's datapath): the policy resolver and nft sets */
#define ENFORCEMENT "dns+nft"

static enum MHD_Result text_error(struct req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result text_error(struct req *r, unsigned status, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *m = xvasprintf(fmt, ap);
  va_end(ap);
  cleanup_free char *line = xasprintf("%s\n", m);
  return sbxd_text(r, status, "text/plain; charset=utf-8", line, strlen(line));
}

static char *box_dir(const struct box *b)
{
  return sbx__state_dir(sbx_provider_home(srv.p), b->id);
}

static json_t *status_json(const sbx_net_policy_t *p, const char *enforcement, const char *reason,
                           bool with_policy)
{
  json_t *j = json_pack("{s:s, s:s, s:s}", "status", "ok", "mode", sbx__net_policy_mode(p),
                        "enforcementMode", enforcement);
  if (reason)
    json_object_set_new(j, "reason", json_string(reason));
  if (with_policy)
    json_object_set_new(j, "policy", sbx__net_policy_to_json(p));
  return j;
}

/* egress.updated, as the sidecar logs it: the request's delta and the policy after it */
static void log_update(struct req *r, const char *op, json_t *delta, const sbx_net_policy_t *p)
{
  sbxd_log_json(SBXD_INFO, "egress policy updated",
                json_pack("{s:s, s:s, s:s, s:o, s:s, s:I}", "request_id", r->rid, "sandbox_id",
                          r->box->id, "op", op, "delta", delta, "mode", sbx__net_policy_mode(p),
                          "rules", (json_int_t) p->n));
}

static enum MHD_Result no_policy(struct req *r, sbx_error_t *err)
{
  const char *net = srv.cfg->network ? srv.cfg->network : "none";
  enum MHD_Result ret =
      text_error(r, 409,
                 "sandbox %s has no egress policy to change: its network is not egress "
                 "(sbxd's sandbox.network is %s; with `egress` each sandbox gets one)",
                 r->box->id, net);
  sbx_error_release(err);
  return ret;
}

static enum MHD_Result store_error(struct req *r, sbx_error_t *err)
{
  if ((*err)->kind == SBX_E_NOT_FOUND)
    return no_policy(r, err);
  unsigned status = (*err)->kind == SBX_E_INVALID ? 400 : 500;
  enum MHD_Result ret = text_error(r, status, "%s", (*err)->msg);
  sbx_error_release(err);
  return ret;
}

enum MHD_Result h_egress_get(struct req *r)
{
  cleanup_free char *dir = box_dir(r->box);
  sbx_error_t err = NULL;
  sbx_net_policy_t *p = sbx__net_store_read(dir, &err);
  if (p == NULL && err->kind == SBX_E_NOT_FOUND) {
    /* no egress datapath: the policy in force is the configured network's, fixed */
    sbx_error_release(&err);
    bool host = srv.cfg->network && strcmp(srv.cfg->network, "host") == 0;
    sbx_net_policy_t *fixed = sbx__net_policy_new(host ? SBX_NET_ALLOW : SBX_NET_DENY);
    cleanup_free char *why =
        xasprintf("sandbox.network is %s: %s; the policy cannot be changed", host ? "host" : "none",
                  host ? "the sandbox shares the host's network" : "the sandbox has loopback only");
    enum MHD_Result ret = sbxd_json(r, 200, status_json(fixed, "none", why, true));
    sbx__net_policy_free(fixed);
    return ret;
  }
  if (p == NULL)
    return store_error(r, &err);
  enum MHD_Result ret = sbxd_json(r, 200, status_json(p, ENFORCEMENT, NULL, true));
  sbx__net_policy_free(p);
  return ret;
}

/* The body as a JSON array (the sidecar's words for what is wrong), or NULL after answering. */
static json_t *array_body(struct req *r, const char *what, enum MHD_Result *ret)
{
  const char *s = r->body.data ? r->body.data : "";
  size_t n = r->body.len;
  while (n && strchr(" \t\r\n", s[n - 1]))
    n--;
  while (n && strchr(" \t\r\n", *s))
    s++, n--;
  if (n == 0) {
    *ret = text_error(r, 400, "empty body");
    return NULL;
  }
  json_error_t je;
  json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &je);
  if (j == NULL) {
    *ret = text_error(r, 400, "invalid %s: not JSON (line %d: %s)", what, je.line, je.text);
    return NULL;
  }
  if (!json_is_array(j)) {
    json_decref(j);
    *ret = text_error(r, 400, "invalid %s: must be a JSON array", what);
    return NULL;
  }
  if (json_array_size(j) == 0) {
    json_decref(j);
    *ret = text_error(r, 400, "invalid %s: empty array", what);
    return NULL;
  }
  return j;
}

struct patch {
  struct sbx_net_rule *rules;
  size_t n;
};

static int do_patch(sbx_net_policy_t *p, void *data, sbx_error_t *err)
{
  struct patch *pa = data;
  return sbx__net_policy_merge(p, pa->rules, pa->n, err);
}

enum MHD_Result h_egress_patch(struct req *r)
{
  enum MHD_Result ret;
  json_t *j = array_body(r, "patch rules", &ret);
  if (j == NULL)
    return ret;
  struct patch pa = {0};
  sbx_error_t err = NULL;
  int rc = sbx__net_rules_from_json(j, "patch rules", &pa.rules, &pa.n, &err);
  json_decref(j);
  if (rc < 0) {
    ret = text_error(r, 400, "invalid %s", err->msg);
    sbx_error_release(&err);
    return ret;
  }
  cleanup_free char *dir = box_dir(r->box);
  sbx_net_policy_t *p = NULL;
  rc = sbx__net_store_update(dir, false, do_patch, &pa, &p, &err);
  if (rc == 0) {
    json_t *delta = json_array();
    for (size_t i = 0; i < pa.n; i++)
      json_array_append_new(
          delta, json_sprintf("%s %s", pa.rules[i].action == SBX_NET_ALLOW ? "allow" : "deny",
                              pa.rules[i].target));
    log_update(r, "patch", delta, p);
  }
  sbx__net_rules_free(pa.rules, pa.n);
  if (rc < 0)
    return store_error(r, &err);
  ret = sbxd_json(r, 200, status_json(p, ENFORCEMENT, NULL, false));
  sbx__net_policy_free(p);
  return ret;
}

struct removal {
  const char **targets;
  size_t n;
  int removed;
};

static int do_remove(sbx_net_policy_t *p, void *data, sbx_error_t *err)
{
  struct removal *rm = data;
  rm->removed = sbx__net_policy_remove(p, rm->targets, rm->n, err);
  return rm->removed < 0 ? -1 : 0;
}

enum MHD_Result h_egress_delete(struct req *r)
{
  enum MHD_Result ret;
  json_t *j = array_body(r, "delete targets", &ret);
  if (j == NULL)
    return ret;
  size_t n = json_array_size(j);
  cleanup_free const char **targets = xreallocarray(NULL, n, sizeof *targets);
  for (size_t i = 0; i < n; i++) {
    json_t *t = json_array_get(j, i);
    if (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t)) {
      json_decref(j);
      return text_error(r, 400, "invalid delete targets: [%zu] must be a string", i);
    }
    targets[i] = json_string_value(t);
  }
  struct removal rm = {targets, n, 0};
  cleanup_free char *dir = box_dir(r->box);
  sbx_net_policy_t *p = NULL;
  sbx_error_t err = NULL;
  int rc = sbx__net_store_update(dir, false, do_remove, &rm, &p, &err);
  if (rc == 0 && rm.removed > 0)
    log_update(r, "delete", json_deep_copy(j), p);
  json_decref(j);
  if (rc < 0) {
    if (err->kind == SBX_E_INVALID) {
      ret = text_error(r, 400, "invalid delete targets: %s", err->msg);
      sbx_error_release(&err);
      return ret;
    }
    return store_error(r, &err);
  }
  ret = sbxd_json(
      r, 200, status_json(p, ENFORCEMENT, rm.removed ? NULL : "no matching targets found", false));
  sbx__net_policy_free(p);
  return ret;
}

enum MHD_Result h_egress_method(struct req *r)
{
  return text_error(r, 405, "method %s not allowed", r->method);
}

enum MHD_Result h_egress_not_found(struct req *r)
{
  return text_error(r, 404, "%s: not found (the egress API serves /policy)", r->sub);
}

/* ---- sbxd's /metrics ---- */

enum MHD_Result h_net_metrics(struct req *r)
{
  sbx_strv_t ids = {0};
  sbx_error_t err = NULL;
  if (sbx__state_list_ids(sbx_provider_home(srv.p), &ids, &err) < 0)
    return sbxd_lib_error(r, &err);
  sbx__strv_sort(&ids);
  static const char *const names[] = {"sbx_egress_denied_lookups_total",
                                      "sbx_egress_denied_connections_total",
                                      "sbx_egress_allowed_lookups_total"};
  static const char *const help[] = {
      "DNS lookups the sandbox's egress policy denied (NXDOMAIN or REFUSED).",
      "Connections the sandbox's egress policy denied (dropped at the enforcer).",
      "DNS lookups the sandbox's egress policy allowed."};
  struct sbx_net_counters *c = xzalloc((ids.n + 1) * sizeof *c);
  bool *has = xzalloc(ids.n + 1);
  for (size_t i = 0; i < ids.n; i++) {
    cleanup_free char *dir = sbx__state_dir(sbx_provider_home(srv.p), ids.v[i]);
    cleanup_free char *pol = xasprintf("%s/%s", dir, SBX_NET_POLICY_FILE);
    has[i] = access(pol, F_OK) == 0;
    if (has[i] && sbx__net_counters_read(dir, &c[i], &err) < 0)
      sbx_error_release(&err); /* a torn or foreign file: report zeros rather than fail all */
  }
  sbx_buf_t b = {0};
  for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
    sbx__buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n", names[k], help[k], names[k]);
    for (size_t i = 0; i < ids.n; i++) {
      if (!has[i])
        continue;
      uint64_t v = k == 0   ? c[i].denied_lookups
                   : k == 1 ? c[i].denied_connections
                            : c[i].allowed_lookups;
      sbx__buf_printf(&b, "%s{sandbox=\"%s\"} %llu\n", names[k], ids.v[i], (unsigned long long) v);
    }
  }
  free(c);
  free(has);
  sbx__strv_free(&ids);
  enum MHD_Result ret =
      sbxd_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len);
  sbx__buf_free(&b);
  return ret;
}
