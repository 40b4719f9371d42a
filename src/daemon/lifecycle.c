/* OpenSandbox's lifecycle API (mounted at / and /v1): create, get, list, delete, pause, resume,
 * renew, metadata, endpoints. Validation follows the real server: schema errors are 422, semantic
 * ones 400 with its codes and messages; sbxd plays the role of its single-host Docker runtime, so
 * runtime errors carry the DOCKER:: codes. */
#include "lifecycle.h"
#include "ctx.h"
#include "registry.h"
#include "pending.h"
#include "snapshots.h"
#include "spares.h"
#include "volumes.h"
#include "egress.h"
#include "../lib/image/image.h"
#include "../net/policy.h"
#include "../lib/image/registry.h"

#include <errno.h>
#include <string.h>
#include <sys/utsname.h>

#define VALIDATION "SANDBOX::VALIDATION_ERROR"
#define NOT_FOUND "DOCKER::SANDBOX_NOT_FOUND"
#define INVALID_PARAMETER "SANDBOX::INVALID_PARAMETER"
#define NOT_SUPPORTED "SANDBOX::API_NOT_SUPPORTED"
#define RESERVED_PREFIX "opensandbox.io/"

static enum MHD_Result not_found(struct req *r, const char *id)
{
  return sbxd_error(r, 404, NOT_FOUND, "Sandbox %s not found.", id);
}

/* ---- state ---- */

/* Sandbox states by id from the library (alive, paused); a box whose sandbox vanished is
 * removed. */
struct live {
  struct sbx_sandbox_info *infos;
  size_t n;
};

static void live_load(struct live *l)
{
  l->infos = NULL;
  l->n = 0;
  sbx_error_t err = NULL;
  if (sbx_list(srv.p, &l->infos, &l->n, &err) < 0) {
    sbxd_log(SBXD_WARN, "list sandboxes: %s", err->msg);
    sbx_error_release(&err);
  }
}

static const struct sbx_sandbox_info *live_find(const struct live *l, const char *id)
{
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->infos[i].id, id) == 0)
      return &l->infos[i];
  return NULL;
}

/* Whether b's entrypoint ended with a failure (a non-zero exit, a signal). Its end is looked up
 * until it is known, then kept in extra (entrypointExitCode) and logged once: an entrypoint that
 * cannot start (not found, not executable) or dies makes the sandbox Failed, as a container
 * whose process exited, instead of a Running sandbox that says nothing. Never on a paused
 * sandbox (its init is frozen). */
static bool entrypoint_failed(struct box *b)
{
  pthread_mutex_lock(&b->lock);
  json_t *known = json_object_get(b->extra, "entrypointExitCode");
  const char *ep = json_string_value(json_object_get(b->extra, "entrypointId"));
  cleanup_free char *ep_id = ep && *ep && !known && !b->paused ? xstrdup(ep) : NULL;
  bool failed = json_is_integer(known) && json_integer_value(known) != 0;
  pthread_mutex_unlock(&b->lock);
  if (ep_id == NULL || b->sb == NULL)
    return failed;
  struct sbx_command_status st;
  sbx_error_t err = NULL;
  if (sbx_command_status(b->sb, ep_id, &st, &err) < 0) {
    sbx_error_release(&err);
    return false;
  }
  if (st.running)
    return false;
  pthread_mutex_lock(&b->lock);
  bool first = json_object_get(b->extra, "entrypointExitCode") == NULL;
  json_object_set_new(b->extra, "entrypointExitCode", json_integer(st.exit_code));
  pthread_mutex_unlock(&b->lock);
  if (first)
    sbxd_log_json(st.exit_code ? SBXD_WARN : SBXD_INFO,
                  st.exit_code ? "sandbox entrypoint failed" : "sandbox entrypoint exited",
                  json_pack("{s:s,s:s,s:i}", "sandbox_id", b->id, "entrypoint_id", ep_id,
                            "exit_code", st.exit_code));
  return st.exit_code != 0;
}

/* The OpenSandbox state of b, or NULL if its sandbox no longer exists (b is then removed). */
static const char *box_state(struct box *b, const struct live *l)
{
  const struct sbx_sandbox_info *in = live_find(l, b->id);
  if (in == NULL && l->infos != NULL) {
    box_remove(b, "vanished", NULL);
    return NULL;
  }
  if (in && in->state == SBX_STATE_DEAD)
    return "Failed";
  pthread_mutex_lock(&b->lock);
  bool paused = b->paused;
  pthread_mutex_unlock(&b->lock);
  if (!paused && entrypoint_failed(b))
    return "Failed";
  return paused ? "Paused" : "Running";
}

/* The API's Sandbox from what sbxd keeps (extra), in a state with its reason and message. */
static json_t *extra_json(const char *id, json_t *extra, const char *state, const char *reason,
                          const char *message, int64_t trans, int64_t created_ms,
                          int64_t expires_ms, bool for_create)
{
  json_t *j = json_object();
  json_object_set_new(j, "id", json_string(id));
  json_t *image = json_object_get(extra, "image");
  json_t *snap = json_object_get(extra, "snapshotId");
  if (!for_create && json_is_string(snap))
    json_object_set(j, "snapshotId", snap);
  else if (!for_create && json_is_string(image))
    json_object_set_new(j, "image", json_pack("{s:O}", "uri", image));
  json_t *platform = json_object_get(extra, "platform");
  if (platform)
    json_object_set(j, "platform", platform);
  json_object_set_new(j, "status",
                      json_pack("{s:s,s:s,s:s,s:o}", "state", state, "reason", reason, "message",
                                message, "lastTransitionAt", sbxd_jtime(trans)));
  json_t *md = json_object_get(extra, "metadata");
  if (md)
    json_object_set(j, "metadata", md);
  json_t *ep = json_object_get(extra, "entrypoint");
  json_object_set_new(j, "entrypoint", ep ? json_incref(ep) : json_array());
  if (expires_ms)
    json_object_set_new(j, "expiresAt", sbxd_jtime(expires_ms));
  json_object_set_new(j, "createdAt", sbxd_jtime(created_ms));
  return j;
}

static json_t *sandbox_json(struct box *b, const char *state, bool for_create)
{
  pthread_mutex_lock(&b->lock);
  const char *reason = "CONTAINER_RUNNING", *message = "Sandbox container started successfully.";
  if (strcmp(state, "Paused") == 0) {
    reason = "CONTAINER_PAUSED";
    message = "Sandbox container is paused.";
  } else if (strcmp(state, "Failed") == 0) {
    reason = "SANDBOX_EXITED";
    message = "The sandbox's init process is gone; delete the sandbox.";
  }
  cleanup_free char *ep_msg = NULL;
  json_t *code = json_object_get(b->extra, "entrypointExitCode");
  if (strcmp(state, "Failed") == 0 && json_is_integer(code) && json_integer_value(code) != 0) {
    int c = (int) json_integer_value(code);
    reason = "ENTRYPOINT_FAILED";
    ep_msg = c < 0 ? xasprintf("The sandbox's entrypoint was killed by signal %d; its output: "
                               "GET /command/%s/logs on the sandbox's execd endpoint.",
                               -c, json_string_value(json_object_get(b->extra, "entrypointId")))
                   : xasprintf("The sandbox's entrypoint exited with code %d; its output: GET "
                               "/command/%s/logs on the sandbox's execd endpoint.",
                               c, json_string_value(json_object_get(b->extra, "entrypointId")));
    message = ep_msg;
  }
  int64_t trans = json_is_integer(json_object_get(b->extra, "stateChangedAt"))
                      ? (int64_t) json_integer_value(json_object_get(b->extra, "stateChangedAt"))
                      : b->created_ms;
  json_t *j = extra_json(b->id, b->extra, state, reason, message, trans, b->created_ms,
                         b->expires_ms, for_create);
  pthread_mutex_unlock(&b->lock);
  return j;
}

/* A create still pulling its image, or whose pull failed (pending.c keeps it). */
static json_t *pending_sandbox_json(const struct pending_info *pi, bool for_create)
{
  int64_t exp = json_integer_value(json_object_get(pi->extra, "expiresAt"));
  return extra_json(pi->id, pi->extra, pi->state, pi->reason, pi->message, pi->trans_ms,
                    json_integer_value(json_object_get(pi->extra, "createdAt")), exp, for_create);
}

/* ---- validation helpers ---- */

static bool string_map(json_t *v, bool allow_null_values)
{
  if (!json_is_object(v))
    return false;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x)
  {
    if (!json_is_string(x) && !(allow_null_values && json_is_null(x)))
      return false;
  }
  return true;
}

/* An optional member that is present and not null. */
static json_t *opt(json_t *o, const char *key)
{
  json_t *v = json_object_get(o, key);
  return json_is_null(v) ? NULL : v;
}

/* An optional field is absent, null or of type t (one lookup: gcc -O2 cannot tell that two
 * lookups of one key agree, and warns of a null dereference). */
static bool opt_is(json_t *o, const char *key, json_type t)
{
  json_t *v = opt(o, key);
  return v == NULL || json_typeof(v) == t;
}

/* An optional object field is absent or holds a string under key. */
static bool opt_has_string(json_t *o, const char *field, const char *key)
{
  json_t *v = opt(o, field);
  return v == NULL || json_is_string(json_object_get(v, key));
}

static const char *metadata_error(json_t *md, char **msg)
{
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v)
  {
    if (strncmp(k, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0) {
      *msg = xasprintf("Metadata key '%s' uses the reserved prefix '" RESERVED_PREFIX
                       "'. Keys under this prefix are managed by the system and cannot be set "
                       "via metadata.",
                       k);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
    if (!sbxd_label_key_valid(k)) {
      *msg = xasprintf(
          "Metadata key '%s' is invalid: must be either a name or a DNS-subdomain prefix and "
          "name separated by /, where the name is up to 63 characters and matches "
          "[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, and the optional prefix is a valid DNS "
          "subdomain up to 253 characters.",
          k);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
    const char *s = json_string_value(v);
    if (s && !sbxd_label_value_valid(s)) {
      *msg = xasprintf("Metadata value '%s' is invalid: must be 63 characters or less, "
                       "start/end with an alphanumeric character, and contain only "
                       "alphanumeric, '-', '_', or '.' characters.",
                       s);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
  }
  return NULL;
}

static const char *host_arch(void)
{
  struct utsname u;
  if (uname(&u) == 0 && (strcmp(u.machine, "aarch64") == 0 || strcmp(u.machine, "arm64") == 0))
    return "arm64";
  return "amd64";
}

/* ---- create ---- */

static const char *resolve_image(const char *uri, json_t *auth, bool *pull, char **why)
{
  if (strcmp(uri, "host") == 0)
    return "host";
  for (size_t i = 0; i < srv.cfg->n_images; i++)
    if (strcmp(srv.cfg->images[i].name, uri) == 0)
      return srv.cfg->images[i].target;
  /* a pull is done after the answer: the create reports Pending meanwhile */
  if (sbx__image_pull_needed(sbx_provider_home(srv.p), uri)) {
    *pull = true;
    return uri;
  }
  /* an image of the store (sbx image import), else a reference pulled now with image.auth */
  struct sbx_pull_opts po = {0};
  sbx__pull_opts_from_config(srv.cfg, &po);
  po.username = json_string_value(json_object_get(auth, "username"));
  po.password = json_string_value(json_object_get(auth, "password"));
  sbx_error_t err = NULL;
  if (sbx__image_ensure(sbx_provider_home(srv.p), uri, &po, &err) < 0) {
    *why = xstrdup(err->msg);
    sbx_error_release(&err);
    return NULL;
  }
  return uri;
}

/* What a create request asks for, its members borrowed from the body. */
struct create {
  json_t *image, *snap, *entry, *timeout, *limits, *env, *md, *platform, *netpol, *cred, *vols,
      *ext, *secure;
  int64_t tmo;        /* seconds (when timeout) */
  const char *uri;    /* image.uri, or the snapshot's image */
  const char *target; /* the image sbx makes it from */
  char *snap_image;   /* owned: the snapshot's image (snapshotId) */
  json_t *default_entry;
  unsigned status; /* of the answer when create_unsupported says no (0: 400) */
  bool pull;       /* the image must be pulled first */
  double cpus;
  uint64_t memory;
  sbx_strv_t envv; /* "KEY=VALUE" */
  char *netpol_s;  /* the validated networkPolicy for an egress sandbox (owned) */
};

static void create_members(struct create *c, json_t *body)
{
  c->image = opt(body, "image");
  c->snap = opt(body, "snapshotId");
  c->entry = opt(body, "entrypoint");
  c->timeout = opt(body, "timeout");
  c->limits = opt(body, "resourceLimits");
  c->env = opt(body, "env");
  c->md = opt(body, "metadata");
  c->platform = opt(body, "platform");
  c->netpol = opt(body, "networkPolicy");
  c->cred = opt(body, "credentialProxy");
  c->vols = opt(body, "volumes");
  c->ext = opt(body, "extensions");
  c->secure = opt(body, "secureAccess");
}

/* The request's shape (422, as the real server's schema): the message, or NULL. */
static const char *create_schema(json_t *body, struct create *c)
{
  json_t *image = c->image, *snap = c->snap, *entry = c->entry, *limits = c->limits;
  json_t *ext = c->ext, *platform = c->platform, *cred = c->cred, *netpol = c->netpol;
  if (!json_is_object(body))
    return "body: Input should be a valid dictionary";
  if ((image != NULL) == (snap != NULL))
    return "body: exactly one of image or snapshotId must be provided";
  if (image && (!json_is_object(image) || !json_is_string(json_object_get(image, "uri"))))
    return "body.image.uri: Field required (a string)";
  if (snap && !json_is_string(snap))
    return "body.snapshotId: Input should be a valid string";
  if (image && entry == NULL)
    return "body.entrypoint: Field required when image is given";
  if (entry && (!json_is_array(entry) || json_array_size(entry) == 0))
    return "body.entrypoint: List should have at least 1 item";
  if (ext && !string_map(ext, false))
    return "body.extensions: Input should be a map of strings";
  if (limits == NULL && !(ext && json_object_get(ext, "poolRef")))
    return "body.resourceLimits: Field required";
  if (limits && !string_map(limits, false))
    return "body.resourceLimits: Input should be a map of strings";
  if (c->env && !string_map(c->env, true))
    return "body.env: Input should be a map of strings";
  if (c->md && !string_map(c->md, false))
    return "body.metadata: Input should be a map of strings";
  if (platform && (!json_is_string(json_object_get(platform, "os")) ||
                   !json_is_string(json_object_get(platform, "arch"))))
    return "body.platform: os and arch are required strings";
  if (c->secure && !json_is_boolean(c->secure))
    return "body.secureAccess: Input should be a valid boolean";
  if (cred && (!json_is_object(cred) || (json_object_get(cred, "enabled") &&
                                         !json_is_boolean(json_object_get(cred, "enabled")))))
    return "body.credentialProxy: Input should be an object with a boolean 'enabled'";
  if (netpol && (!json_is_object(netpol) || !opt_is(netpol, "defaultAction", JSON_STRING) ||
                 !opt_is(netpol, "egress", JSON_ARRAY)))
    return "body.networkPolicy: Input should be {defaultAction?: string, egress?: list}";
  if (c->vols && !json_is_array(c->vols))
    return "body.volumes: Input should be a valid list";
  for (size_t i = 0; entry && i < json_array_size(entry); i++)
    if (!json_is_string(json_array_get(entry, i)))
      return "body.entrypoint: items should be strings";
  if (c->timeout) {
    json_t *t = c->timeout;
    double d = json_is_real(t) ? json_real_value(t) : 0;
    if (json_is_integer(t))
      c->tmo = (int64_t) json_integer_value(t);
    else if (json_is_real(t) && d == (double) (int64_t) d)
      c->tmo = (int64_t) d;
    else
      return "body.timeout: Input should be a valid integer";
    if (c->tmo < 60)
      return "body.timeout: Input should be greater than or equal to 60";
  }
  for (size_t i = 0; c->vols && i < json_array_size(c->vols); i++) {
    json_t *v = json_array_get(c->vols, i);
    if (!json_is_object(v) || !json_is_string(json_object_get(v, "name")) ||
        !json_is_string(json_object_get(v, "mountPath")))
      return "body.volumes: each volume needs a string name and mountPath";
    json_t *ro = opt(v, "readOnly");
    if ((ro && !json_is_boolean(ro)) || !opt_is(v, "subPath", JSON_STRING) ||
        !opt_has_string(v, "host", "path") || !opt_has_string(v, "pvc", "claimName"))
      return "body.volumes: host needs a string path, pvc a string claimName";
  }
  return NULL;
}

/* What sbxd cannot give: the code, with *msg (malloc'ed), or NULL. */
static const char *create_unsupported(struct create *c, char **msg)
{
  const char *code = NULL;
  if (c->snap && c->ext && json_object_get(c->ext, "poolRef")) {
    *msg = xstrdup("snapshotId cannot be used together with poolRef.");
    return INVALID_PARAMETER;
  }
  if (c->snap) {
    /* the snapshot's image, with the server's default entrypoint when none is given */
    if (snapshots_restore_image(json_string_value(c->snap), &c->snap_image, &c->status, &code,
                                msg) < 0)
      return code;
    if (c->entry == NULL)
      c->entry = c->default_entry = json_pack("[s,s,s]", "tail", "-f", "/dev/null");
  }
  if (c->ext && json_object_get(c->ext, "poolRef")) {
    *msg = xstrdup("poolRef is not supported by sbxd (a single-host runtime).");
    return "SANDBOX::UNSUPPORTED_POOL_REF";
  }
  if (c->timeout && srv.cfg->max_sandbox_timeout > 0 && c->tmo > srv.cfg->max_sandbox_timeout) {
    *msg = xasprintf("Sandbox timeout %llds exceeds configured maximum of %llds.",
                     (long long) c->tmo, (long long) srv.cfg->max_sandbox_timeout);
    return INVALID_PARAMETER;
  }
  if (c->md && (code = metadata_error(c->md, msg)) != NULL)
    return code;
  c->uri = c->snap_image ? c->snap_image : json_string_value(json_object_get(c->image, "uri"));
  cleanup_free char *pull_why = NULL;
  if (c->snap_image)
    c->target = c->snap_image;
  else if ((c->target = resolve_image(c->uri, json_object_get(c->image, "auth"), &c->pull,
                                      &pull_why)) == NULL) {
    sbx_buf_t known = {0};
    sbx__buf_puts(&known, "host");
    for (size_t i = 0; i < srv.cfg->n_images; i++)
      sbx__buf_printf(&known, ", %s", srv.cfg->images[i].name);
    *msg = xasprintf("Image '%s' is not in sbxd's local image store (known: %s); import it with "
                     "`sbx image import` (sbx images lists them) or declare an alias under "
                     "sbxd.images in the configuration (%s).",
                     c->uri, known.data, pull_why ? pull_why : "not found");
    sbx__buf_free(&known);
    return "SANDBOX::IMAGE_NOT_FOUND";
  }
  if (c->platform) {
    const char *os = json_string_value(json_object_get(c->platform, "os"));
    const char *arch = json_string_value(json_object_get(c->platform, "arch"));
    if (strcasecmp(os, "linux") != 0 && strcasecmp(os, "windows") != 0)
      *msg = xasprintf("Unsupported platform.os '%s'. Supported values: ['linux', 'windows'].", os);
    else if (strcasecmp(arch, "amd64") != 0 && strcasecmp(arch, "arm64") != 0)
      *msg =
          xasprintf("Unsupported platform.arch '%s'. Supported values: ['amd64', 'arm64'].", arch);
    else if (strcasecmp(os, "linux") != 0 || strcasecmp(arch, host_arch()) != 0)
      *msg = xasprintf("Platform %s/%s is not available: sbxd runs linux/%s sandboxes.", os, arch,
                       host_arch());
    if (*msg)
      return INVALID_PARAMETER;
  }
  if (c->netpol) {
    /* the egress policy's own parser (src/net/policy.c): its message names the field */
    sbx_error_t err = NULL;
    sbx_net_policy_t *pol = sbx__net_policy_from_json(c->netpol, "networkPolicy", &err);
    if (pol == NULL) {
      *msg = xstrdup(err->msg);
      sbx_error_release(&err);
      return INVALID_PARAMETER;
    }
    const char *net = srv.cfg->network ? srv.cfg->network : "none";
    bool host_net = strcmp(net, "host") == 0, ok;
    if (strcmp(net, "egress") == 0) {
      c->netpol_s = sbx__net_policy_serialize(pol);
      ok = true;
    } else {
      int want = host_net ? SBX_NET_ALLOW : SBX_NET_DENY;
      ok = pol->default_action == want && pol->n == 0;
    }
    sbx__net_policy_free(pol);
    if (!ok) {
      *msg = xasprintf("networkPolicy is not supported beyond the configured network: sandboxes "
                       "%s (sandbox.network: %s), so only {\"defaultAction\": \"%s\"} with no "
                       "egress rules is accepted; sandbox.network: egress enforces any policy.",
                       host_net ? "share the host's network" : "have no network access",
                       host_net ? "host" : "none", host_net ? "allow" : "deny");
      return NOT_SUPPORTED;
    }
  }
  if (c->cred && json_is_true(json_object_get(c->cred, "enabled"))) {
    *msg = xstrdup("credentialProxy is not supported by sbxd.");
    return NOT_SUPPORTED;
  }
  return NULL;
}

/* resourceLimits and env into c->cpus, c->memory, c->envv: the code, with *msg, or NULL. */
static const char *create_limits_env(struct create *c, char **msg)
{
  const char *k;
  json_t *v;
  json_object_foreach(c->limits, k, v)
  {
    const char *s = json_string_value(v);
    if (strcmp(k, "cpu") == 0 && sbxd_parse_cpu(s, &c->cpus) < 0) {
      *msg = xasprintf("Invalid resourceLimits.cpu '%s': expected a positive number of CPUs or "
                       "millicores (e.g. '1', '0.5', '500m').",
                       s);
      return INVALID_PARAMETER;
    }
    if (strcmp(k, "memory") == 0 && (sbxd_parse_memory(s, &c->memory) < 0 || c->memory == 0)) {
      *msg = xasprintf("Invalid resourceLimits.memory '%s': expected a size such as '512Mi', "
                       "'2Gi' or '1G'.",
                       s);
      return INVALID_PARAMETER;
    }
    if (strcmp(k, "gpu") == 0 && strcmp(s, "0") != 0 && *s != '\0') {
      *msg = xasprintf("resourceLimits.gpu '%s' cannot be satisfied: sbxd has no GPUs.", s);
      return INVALID_PARAMETER;
    }
  }
  json_object_foreach(c->env, k, v)
  {
    if (!sbx__env_key_valid(k, strlen(k))) {
      *msg = xasprintf("env key '%s' is not a valid environment variable name (must match "
                       "^[A-Za-z_][A-Za-z0-9_]*$).",
                       k);
      return INVALID_PARAMETER;
    }
    if (json_is_string(v))
      sbx__strv_push_owned(&c->envv, xasprintf("%s=%s", k, json_string_value(v)));
  }
  return NULL;
}

/* What sbxd keeps with the sandbox (its extra JSON). */
static json_t *create_extra(const struct create *c, const struct volumes *vs)
{
  int64_t now = sbxd_now_ms();
  char token[65];
  sbx__random_hex(token, 64);
  token[64] = '\0';
  json_t *extra = json_object();
  json_object_set_new(extra, "sbxd", json_integer(1));
  json_object_set_new(extra, "token", json_string(token));
  json_object_set_new(extra, "createdAt", json_integer(now));
  if (c->timeout)
    json_object_set_new(extra, "expiresAt", json_integer(now + c->tmo * 1000));
  json_object_set_new(extra, "image", json_string(c->uri));
  if (c->snap)
    json_object_set(extra, "snapshotId", c->snap);
  json_object_set(extra, "entrypoint", c->entry);
  if (c->md)
    json_object_set(extra, "metadata", c->md);
  if (c->platform)
    json_object_set_new(extra, "platform",
                        json_pack("{s:s,s:s}", "os", "linux", "arch", host_arch()));
  if (json_array_size(vs->info))
    json_object_set(extra, "volumes", vs->info);
  return extra;
}

/* Makes the sandbox (sbx_create), checks its volumes and registers its box; answers and
 * returns NULL on failure. Takes extra. */
/* Why a create failed, for an answer now or a Pending record's Failed later. */
struct create_fail {
  unsigned status;
  const char *code;
  char *msg;
};

/* Makes the sandbox (sbx_create; with id, when the answer already named it), checks its volumes
 * and registers its box; NULL with *f on failure. Takes extra. */
static struct box *create_sandbox(const struct create *c, struct volumes *vs, json_t *extra,
                                  const char *id, struct create_fail *f)
{
  cleanup_free char *extra_s = json_dumps(extra, JSON_COMPACT | JSON_PRESERVE_ORDER);
  struct sbx_create_opts o = {.image = c->target,
                              .env = (const char *const *) c->envv.v,
                              .n_env = c->envv.n,
                              .memory_bytes = c->memory,
                              .cpus = c->cpus,
                              .mounts = vs->m,
                              .n_mounts = vs->n,
                              .extra = extra_s,
                              .network_policy = c->netpol_s,
                              .id = id};
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_create(srv.p, &o, &err);
  if (sb && srv.cfg->spares > 0)
    sbxd_spares_kick(); /* it may have taken one */
  cleanup_free char *why = NULL;
  if (sb && volumes_verify(sbx_sandbox_id(sb), vs, &why) < 0) {
    struct box *b = box_add(sb, BOX_MANAGED, extra);
    box_remove(b, "volume_changed", NULL);
    box_put(b);
    *f = (struct create_fail){400, "VOLUME::INVALID_HOST_PATH", xstrdup(why)};
    return NULL;
  }
  if (sb == NULL) {
    json_decref(extra);
    int kind = err->kind;
    bool bad = kind == SBX_E_INVALID || kind == SBX_E_CONFIG;
    if (vs->n && err->status == ELOOP)
      /* the launcher follows no symlink to a volume: one appeared on a path sbxd had walked */
      *f = (struct create_fail){
          400, "VOLUME::INVALID_HOST_PATH",
          xasprintf("the host directory of a volume changed while it was mounted: %s", err->msg)};
    else if (kind == SBX_E_LIMIT) /* a hard limit of the host (docs/configuration.md) */
      *f = (struct create_fail){429, "SANDBOX::LIMIT_EXCEEDED", xstrdup(err->msg)};
    else
      *f = (struct create_fail){bad ? 400 : 500,
                                bad ? INVALID_PARAMETER : "DOCKER::SANDBOX_START_FAILED",
                                xstrdup(err->msg)};
    sbx_error_release(&err);
    return NULL;
  }
  return box_add(sb, BOX_MANAGED, extra);
}

/* Starts the entrypoint in the background, like a container's main process, and records its
 * id; removes the box, with *f, on failure. */
static int create_entrypoint(struct box *b, json_t *entry, struct create_fail *f)
{
  size_t n_ep = json_array_size(entry);
  cleanup_free const char **argv = xzalloc((n_ep + 1) * sizeof *argv);
  for (size_t i = 0; i < n_ep; i++)
    argv[i] = json_string_value(json_array_get(entry, i));
  char ep_id[65] = "";
  struct sbx_exec_opts eo = {.argv = argv, .background = true, .id_out = ep_id, .cwd = "/"};
  struct sbx_exec_result res;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(b->sb, NULL, &eo, &res, &err);
  sbx_exec_result_free(&res);
  if (rc < 0) {
    *f = (struct create_fail){500, "DOCKER::SANDBOX_START_FAILED",
                              xasprintf("start the entrypoint: %s", err->msg)};
    sbx_error_release(&err);
    box_remove(b, "entrypoint_failed", NULL);
    return -1;
  }
  pthread_mutex_lock(&b->lock);
  json_object_set_new(b->extra, "entrypointId", json_string(ep_id));
  if (box_save(b, &err) < 0) {
    sbxd_log(SBXD_WARN, "save sandbox %s: %s", b->id, err->msg);
    sbx_error_release(&err);
  }
  pthread_mutex_unlock(&b->lock);
  return 0;
}

/* ---- a create that pulls: answered Pending at once, made by a thread (pending.c) ---- */

struct pull_job {
  char id[17];
  json_t *body; /* c's members point into it */
  struct create c;
  struct volumes vs;
  json_t *extra;
};

static void *pull_main(void *arg)
{
  struct pull_job *jb = arg;
  struct create *c = &jb->c;
  json_t *auth = json_object_get(c->image, "auth");
  struct sbx_pull_opts po = {0};
  sbx__pull_opts_from_config(srv.cfg, &po);
  po.username = json_string_value(json_object_get(auth, "username"));
  po.password = json_string_value(json_object_get(auth, "password"));
  sbx_error_t err = NULL;
  struct create_fail f = {0};
  struct box *b = NULL;
  if (sbx__image_ensure(sbx_provider_home(srv.p), c->uri, &po, &err) < 0) {
    f = (struct create_fail){0, "SANDBOX::IMAGE_PULL_FAILED", xstrdup(err->msg)};
    sbx_error_release(&err);
    json_decref(jb->extra);
  } else {
    pending_set(jb->id, "Pending", "CONTAINER_STARTING", "Sandbox container is starting.");
    b = create_sandbox(c, &jb->vs, jb->extra, jb->id, &f);
    if (b && create_entrypoint(b, c->entry, &f) < 0) {
      box_put(b);
      b = NULL;
    }
  }
  /* the box answers for it from now on, unless it was deleted meanwhile */
  bool deleted = pending_done(jb->id, b == NULL, f.msg);
  if (b && deleted)
    box_remove(b, "user_delete", NULL);
  if (b) {
    sbxd_expiry_kick();
    sbxd_log_json(
        SBXD_INFO, "sandbox created",
        json_pack("{s:s,s:s,s:b}", "sandbox_id", jb->id, "image", c->uri, "pulled", true));
    box_put(b);
  } else {
    sbxd_log_json(SBXD_WARN, "sandbox create failed",
                  json_pack("{s:s,s:s,s:s}", "sandbox_id", jb->id, "image", c->uri, "error",
                            f.msg ? f.msg : ""));
  }
  free(f.msg);
  volumes_free(&jb->vs);
  sbx__strv_free(&c->envv);
  free(c->snap_image);
  free(c->netpol_s);
  json_decref(c->default_entry);
  json_decref(jb->body);
  free(jb);
  sbxd_worker_done();
  return NULL;
}

/* Answers 202 Pending with a new id and pulls in a thread; takes vs, c's env and extra. */
static enum MHD_Result create_pending(struct req *r, json_t *body, struct create *c,
                                      struct volumes *vs, json_t *extra)
{
  struct pull_job *jb = xzalloc(sizeof *jb);
  sbx__random_hex(jb->id, 16);
  jb->body = json_incref(body);
  jb->c = *c;
  jb->vs = *vs;
  jb->extra = extra;
  /* the job owns these now */
  memset(&c->envv, 0, sizeof c->envv);
  c->snap_image = NULL;
  c->default_entry = NULL;
  c->netpol_s = NULL;
  cleanup_free char *msg = xasprintf("Pulling image %s.", c->uri);
  pending_add(jb->id, extra, "IMAGE_PULLING", msg);
  struct pending_info pi;
  pending_get(jb->id, &pi);
  json_t *answer = pending_sandbox_json(&pi, true);
  sbxd_worker_start();
  if (sbxd_spawn(pull_main, jb) < 0) {
    sbxd_worker_done();
    pending_done(jb->id, true, "could not start the pull");
    volumes_free(&jb->vs);
    sbx__strv_free(&jb->c.envv);
    free(jb->c.netpol_s);
    json_decref(jb->extra);
    json_decref(jb->body);
    free(jb);
  }
  sbxd_log_json(
      SBXD_INFO, "sandbox pending",
      json_pack("{s:s,s:s,s:s}", "request_id", r->rid, "sandbox_id", pi.id, "image", c->uri));
  pending_info_free(&pi);
  return sbxd_json(r, 202, answer);
}

static void create_free(struct create *c)
{
  free(c->snap_image);
  free(c->netpol_s);
  json_decref(c->default_entry);
}

/* POST /sandboxes: the schema (422), what sbxd cannot give (400), the volumes, then the
 * sandbox and its entrypoint. */
enum MHD_Result h_sandbox_create(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_LIFECYCLE, SBXD_WANT_ANY, &ret);
  if (body == NULL)
    return ret;
  __attribute__((cleanup(create_free))) struct create c = {0};
  create_members(&c, body);
  const char *bad = create_schema(body, &c);
  if (bad)
    return sbxd_error(r, 422, VALIDATION, "%s", bad);
  cleanup_free char *msg = NULL;
  const char *code = create_unsupported(&c, &msg);
  if (code == NULL)
    code = create_limits_env(&c, &msg);
  if (code) {
    sbx__strv_free(&c.envv);
    return sbxd_error(r, c.status ? c.status : 400, code, "%s", msg);
  }
  struct volumes vs;
  struct volume_error ve = {0};
  if (volumes_build(c.vols, &vs, &ve) < 0) {
    ret = sbxd_error(r, ve.status, ve.code, "%s", ve.msg);
    free(ve.msg);
    volumes_free(&vs);
    sbx__strv_free(&c.envv);
    return ret;
  }
  if (c.pull)
    return create_pending(r, body, &c, &vs, create_extra(&c, &vs));
  struct create_fail f = {0};
  struct box *b = create_sandbox(&c, &vs, create_extra(&c, &vs), NULL, &f);
  volumes_free(&vs);
  sbx__strv_free(&c.envv);
  if (b && create_entrypoint(b, c.entry, &f) < 0) {
    box_put(b);
    b = NULL;
  }
  if (b == NULL) {
    ret = sbxd_error(r, f.status, f.code, "%s", f.msg);
    free(f.msg);
    return ret;
  }
  sbxd_expiry_kick();
  sbxd_log_json(SBXD_INFO, "sandbox created",
                json_pack("{s:s,s:s,s:s,s:I}", "request_id", r->rid, "sandbox_id", b->id, "image",
                          c.uri, "timeout", (json_int_t) c.tmo));
  ret = sbxd_json(r, 202, sandbox_json(b, "Running", true));
  box_put(b);
  return ret;
}

/* ---- get, list, delete ---- */

enum MHD_Result h_sandbox_get(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  struct pending_info pi;
  if (b == NULL && pending_get(id, &pi)) {
    enum MHD_Result ret = sbxd_json(r, 200, pending_sandbox_json(&pi, false));
    pending_info_free(&pi);
    return ret;
  }
  if (b == NULL)
    return not_found(r, id);
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  enum MHD_Result ret = state ? sbxd_json(r, 200, sandbox_json(b, state, false)) : not_found(r, id);
  sbx_sandbox_info_free(l.infos, l.n);
  box_put(b);
  return ret;
}

static bool parse_page(const char *s, int64_t def, int64_t *out)
{
  if (s == NULL) {
    *out = def;
    return true;
  }
  return sbxd_parse_i64(s, out);
}

enum MHD_Result h_sandbox_list(struct req *r)
{
  int64_t page, size;
  if (!parse_page(sbxd_query(r, "page"), 1, &page) || page < 1)
    return sbxd_error(r, 422, VALIDATION, "query.page: Input should be an integer >= 1");
  if (!parse_page(sbxd_query(r, "pageSize"), 20, &size) || size < 1 || size > 200)
    return sbxd_error(r, 422, VALIDATION,
                      "query.pageSize: Input should be an integer between 1 and 200");
  const char *states[64];
  size_t n_states = sbxd_query_all(r, "state", states, ARRAY_SIZE(states));
  sbx_strv_t mk = {0}, mv = {0};
  const char *mdq = sbxd_query(r, "metadata");
  if (mdq && *mdq) {
    char *bad = NULL;
    if (sbxd_parse_qsl(mdq, &mk, &mv, &bad) < 0) {
      enum MHD_Result ret = sbxd_error(r, 400, "INVALID_METADATA_FORMAT",
                                       "Invalid metadata format: bad query field: '%s'", bad);
      free(bad);
      sbx__strv_free(&mk);
      sbx__strv_free(&mv);
      return ret;
    }
  }
  size_t n;
  struct box **boxes = box_list(BOX_MANAGED, &n);
  struct live l;
  live_load(&l);
  json_t *items = json_array();
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    struct box *b = boxes[i];
    const char *state = box_state(b, &l);
    if (state == NULL)
      continue;
    bool ok = n_states == 0;
    for (size_t k = 0; k < n_states && !ok; k++)
      ok = strcasecmp(states[k], state) == 0;
    pthread_mutex_lock(&b->lock);
    json_t *md = json_object_get(b->extra, "metadata");
    for (size_t k = 0; k < mk.n && ok; k++) {
      const char *have = json_string_value(json_object_get(md, mk.v[k]));
      ok = have && strcmp(have, mv.v[k]) == 0;
    }
    pthread_mutex_unlock(&b->lock);
    if (!ok)
      continue;
    total++;
    if (total > (page - 1) * size && total <= page * size)
      json_array_append_new(items, sandbox_json(b, state, false));
  }
  /* creates still pulling (or failed), after the sandboxes */
  struct pending_info *pv;
  size_t np = pending_list(&pv);
  for (size_t i = 0; i < np; i++) {
    bool ok = n_states == 0;
    for (size_t k = 0; k < n_states && !ok; k++)
      ok = strcasecmp(states[k], pv[i].state) == 0;
    json_t *md = json_object_get(pv[i].extra, "metadata");
    for (size_t k = 0; k < mk.n && ok; k++) {
      const char *have = json_string_value(json_object_get(md, mk.v[k]));
      ok = have && strcmp(have, mv.v[k]) == 0;
    }
    if (ok && ++total > (page - 1) * size && total <= page * size)
      json_array_append_new(items, pending_sandbox_json(&pv[i], false));
    pending_info_free(&pv[i]);
  }
  free(pv);
  sbx_sandbox_info_free(l.infos, l.n);
  box_list_free(boxes, n);
  sbx__strv_free(&mk);
  sbx__strv_free(&mv);
  int64_t pages = (total + size - 1) / size;
  json_t *pag = json_pack("{s:I,s:I,s:I,s:I,s:b}", "page", (json_int_t) page, "pageSize",
                          (json_int_t) size, "totalItems", (json_int_t) total, "totalPages",
                          (json_int_t) pages, "hasNextPage", page < pages);
  return sbxd_json(r, 200, json_pack("{s:o,s:o}", "items", items, "pagination", pag));
}

enum MHD_Result h_sandbox_delete(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  if (b == NULL && pending_delete(id))
    return sbxd_empty(r, 204); /* a create still pulling: its thread removes what it makes */
  if (b == NULL)
    return not_found(r, id);
  sbx_error_t err = NULL;
  int rc = box_remove(b, "user_delete", &err);
  box_put(b);
  if (rc < 0) {
    enum MHD_Result ret = sbxd_error(r, 500, "DOCKER::SANDBOX_DELETE_FAILED",
                                     "Failed to delete sandbox container: %s", err->msg);
    sbx_error_release(&err);
    return ret;
  }
  return sbxd_empty(r, 204);
}

/* ---- pause, resume ---- */

static enum MHD_Result pause_resume(struct req *r, bool pause)
{
  const char *id = sbxd_param(r, "id");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  if (b == NULL)
    return not_found(r, id);
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  sbx_sandbox_info_free(l.infos, l.n);
  enum MHD_Result ret;
  if (state == NULL) {
    ret = not_found(r, id);
  } else if (pause && strcmp(state, "Running") != 0) {
    ret = sbxd_error(r, 409, "DOCKER::SANDBOX_NOT_RUNNING", "Sandbox is not in a running state.");
  } else if (!pause && strcmp(state, "Paused") != 0) {
    ret = sbxd_error(r, 409, "DOCKER::SANDBOX_NOT_PAUSED", "Sandbox is not in a paused state.");
  } else {
    sbx_error_t err = NULL;
    if (sbx_pause(srv.p, id, pause, &err) < 0) {
      ret = sbxd_error(r, 500,
                       pause ? "DOCKER::SANDBOX_PAUSE_FAILED" : "DOCKER::SANDBOX_RESUME_FAILED",
                       "Failed to %s sandbox container: %s", pause ? "pause" : "resume", err->msg);
      sbx_error_release(&err);
    } else {
      pthread_mutex_lock(&b->lock);
      b->paused = pause;
      json_object_set_new(b->extra, "stateChangedAt", json_integer(sbxd_now_ms()));
      box_save(b, NULL);
      pthread_mutex_unlock(&b->lock);
      ret = sbxd_empty(r, 202);
    }
  }
  box_put(b);
  return ret;
}

enum MHD_Result h_sandbox_pause(struct req *r)
{
  return pause_resume(r, true);
}

enum MHD_Result h_sandbox_resume(struct req *r)
{
  return pause_resume(r, false);
}

/* ---- renew, metadata ---- */

enum MHD_Result h_sandbox_renew(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_LIFECYCLE, SBXD_WANT_ANY, &ret);
  if (body == NULL)
    return ret;
  const char *s = json_string_value(json_object_get(body, "expiresAt"));
  int64_t ms;
  if (s == NULL || sbxd_time_parse(s, &ms) < 0) {
    return sbxd_error(r, 422, VALIDATION,
                      "body.expiresAt: Input should be a valid RFC 3339 datetime");
  }
  const char *id = sbxd_param(r, "id");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  if (b == NULL)
    return not_found(r, id);
  if (ms <= sbxd_now_ms()) {
    ret = sbxd_error(r, 400, "DOCKER::INVALID_EXPIRATION",
                     "New expiration time must be in the future.");
  } else {
    pthread_mutex_lock(&b->lock);
    bool manual = b->expires_ms == 0;
    sbx_error_t err = NULL;
    int rc = 0;
    if (!manual) {
      b->expires_ms = ms;
      json_object_set_new(b->extra, "expiresAt", json_integer(ms));
      rc = box_save(b, &err);
    }
    pthread_mutex_unlock(&b->lock);
    if (manual)
      ret = sbxd_error(r, 409, "DOCKER::INVALID_EXPIRATION",
                       "Sandbox %s does not have automatic expiration enabled.", id);
    else if (rc < 0)
      ret = sbxd_lib_error(r, &err);
    else
      ret = sbxd_json(r, 200, json_pack("{s:o}", "expiresAt", sbxd_jtime(ms)));
    sbxd_expiry_kick();
  }
  box_put(b);
  return ret;
}

enum MHD_Result h_sandbox_metadata(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_LIFECYCLE, SBXD_WANT_ANY, &ret);
  if (body == NULL)
    return ret;
  if (!string_map(body, true)) {
    return sbxd_error(r, 422, VALIDATION,
                      "body: Input should be a map of strings (null removes a key)");
  }
  const char *id = sbxd_param(r, "id");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  if (b == NULL) {
    return not_found(r, id);
  }
  const char *k;
  json_t *v;
  json_t *additions = json_object();
  const char *bad_key = NULL;
  json_object_foreach(body, k, v)
  {
    if (strncmp(k, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0 && !bad_key)
      bad_key = k;
    if (json_is_string(v))
      json_object_set(additions, k, v);
  }
  char *msg = NULL;
  const char *code = NULL;
  if (bad_key)
    ret = sbxd_error(r, 400, "INVALID_METADATA_LABEL",
                     "Metadata key '%s' is reserved (opensandbox.io/ prefix).", bad_key);
  else if ((code = metadata_error(additions, &msg)) != NULL)
    ret = sbxd_error(r, 400, code, "%s", msg);
  free(msg);
  json_decref(additions);
  if (bad_key || code) {
    box_put(b);
    return ret;
  }
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  sbx_sandbox_info_free(l.infos, l.n);
  if (state == NULL) {
    box_put(b);
    return not_found(r, id);
  }
  pthread_mutex_lock(&b->lock);
  json_t *md = json_object_get(b->extra, "metadata");
  if (!json_is_object(md)) {
    md = json_object();
    json_object_set_new(b->extra, "metadata", md);
  }
  json_object_foreach(body, k, v)
  {
    if (json_is_null(v))
      json_object_del(md, k);
    else
      json_object_set(md, k, v);
  }
  sbx_error_t err = NULL;
  int rc = box_save(b, &err);
  pthread_mutex_unlock(&b->lock);
  ret = rc < 0 ? sbxd_lib_error(r, &err) : sbxd_json(r, 200, sandbox_json(b, state, false));
  box_put(b);
  return ret;
}

/* ---- endpoints ---- */

static int parse_bool_query(const char *s, bool *out)
{
  if (s == NULL) {
    *out = false;
    return 0;
  }
  static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
  static const char *const no[] = {"false", "0", "no", "off", "f", "n"};
  for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -1;
}

enum MHD_Result h_sandbox_endpoint(struct req *r)
{
  const char *id = sbxd_param(r, "id"), *port_s = sbxd_param(r, "port");
  int64_t port;
  bool proxy;
  if (!sbxd_parse_i64(port_s, &port))
    return sbxd_error(r, 422, VALIDATION, "path.port: Input should be a valid integer");
  if (parse_bool_query(sbxd_query(r, "use_server_proxy"), &proxy) < 0)
    return sbxd_error(r, 422, VALIDATION,
                      "query.use_server_proxy: Input should be a valid boolean");
  const char *expires = sbxd_query(r, "expires");
  if (proxy && expires)
    return sbxd_error(r, 400, INVALID_PARAMETER,
                      "use_server_proxy cannot be combined with expires; signed endpoints "
                      "require the gateway route.");
  struct box *b = box_get_kind(id, BOX_MANAGED);
  /* a create still pulling: its token is decided already (its execd answers once it runs) */
  struct pending_info pi;
  cleanup_free char *token = NULL;
  if (b == NULL && pending_get(id, &pi)) {
    token = xstrdup(json_string_value(json_object_get(pi.extra, "token")) ?: "");
    pending_info_free(&pi);
  } else if (b == NULL) {
    return not_found(r, id);
  } else {
    token = xstrdup(b->token);
  }
  enum MHD_Result ret;
  if (port < 1 || port > 65535) {
    ret = sbxd_error(r, 400, "DOCKER::INVALID_PORT", "Port must be between 1 and 65535.");
  } else if (expires) {
    ret = sbxd_error(r, 400, NOT_SUPPORTED,
                     "Signed endpoints (expires) are not supported by sbxd; endpoints are "
                     "protected by the X-EXECD-ACCESS-TOKEN header instead.");
  } else {
    cleanup_free char *host = sbxd_public_host(r, srv.listen);
    cleanup_free char *ep =
        proxy ? xasprintf("%s/sandboxes/%s/proxy/%lld", host, id, (long long) port)
              : xasprintf("%s/direct/%s/%lld", host, id, (long long) port);
    json_t *headers = json_pack("{s:s}", SBXD_TOKEN_HEADER, token);
    if (port == SBXD_EGRESS_PORT) /* the egress API (egress.c) takes the sidecar's header too */
      json_object_set_new(headers, SBXD_EGRESS_AUTH_HEADER, json_string(token));
    ret = sbxd_json(r, 200, json_pack("{s:s,s:o}", "endpoint", ep, "headers", headers));
  }
  if (b)
    box_put(b);
  return ret;
}

/* ---- the rest ---- */

enum MHD_Result h_metrics_events(struct req *r)
{
  return sbxd_empty(r, 204);
}
