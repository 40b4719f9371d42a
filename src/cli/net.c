/* sbx net: read and change the egress policy of the scope's sandbox (its net/policy.json, which
 * the sandbox's enforcer applies within a second). */
#include "cli.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>

#include "../lib/state.h"
#include "../net/policy.h"
#include "../net/store.h"
#include "error.h"
#include "util.h"

static const char usage[] =
    "Usage: sbx net -t THREAD [-u USER] [--json] show\n"
    "       sbx net -t THREAD [-u USER] [--json] allow|deny TARGET...\n"
    "       sbx net -t THREAD [-u USER] [--json] rm TARGET...\n"
    "       sbx net -t THREAD [-u USER] [--json] log\n"
    "\n"
    "Reads or changes the egress policy of the scope's sandbox (sandbox.network: egress) while\n"
    "it runs; a change takes effect within a second, without a restart. A TARGET is a domain\n"
    "(pypi.org), a leading wildcard (*.pythonhosted.org: the names below it), an IP address or a\n"
    "CIDR (10.0.0.0/8). allow and deny put their rules first, replacing any rule for the same\n"
    "target (OpenSandbox's PATCH); rm removes the rules for those targets (unknown ones are\n"
    "ignored). Rules are evaluated in order, the first match decides, else the default action.\n"
    "The host's addresses, loopback, link-local, cloud metadata and the private ranges (RFC 1918,\n"
    "CGNAT, ULA) stay denied unless an IP or CIDR rule allows them.\n"
    "\n"
    "Prints the policy after the change: the default action, then one rule a line (--json:\n"
    "{\"mode\", \"policy\": {\"defaultAction\", \"egress\"}}). The sandbox must exist; one whose\n"
    "network is not egress has no policy (an error).\n"
    "\n"
    "log prints what the policy denied, oldest first: time, lookup or connect, the target and the\n"
    "rule that denied it (--json: the log's JSON lines as they are), to decide what to allow.\n";

struct net_opts {
  bool json;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  ((struct net_opts *) ctx)->json = true;
  return 0;
}

static int print_policy(const sbx_net_policy_t *p, bool json)
{
  if (json)
    return cli_print_json(json_pack("{s:s, s:o}", "mode", sbx__net_policy_mode(p), "policy",
                                    sbx__net_policy_to_json(p)));
  printf("default %s\n", p->default_action == SBX_NET_ALLOW ? "allow" : "deny");
  for (size_t i = 0; i < p->n; i++)
    printf("%s %s\n", p->rules[i].action == SBX_NET_ALLOW ? "allow" : "deny", p->rules[i].target);
  return 0;
}

static int print_log(const char *dir, const char *id, bool json)
{
  sbx_error_t err = NULL;
  cleanup_free char *pol = xasprintf("%s/%s", dir, SBX_NET_POLICY_FILE);
  if (access(pol, F_OK) != 0) {
    sbx__make_error(&err, 0, SBX_E_NOT_FOUND,
                    "sandbox %s (sandbox.network is not egress?): sandbox has no egress policy",
                    id);
    return cli_fail(&err);
  }
  cleanup_free char *path = xasprintf("%s/%s", dir, SBX_NET_DENIED_LOG);
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, path, 64u << 20, &text, &len) < 0) {
    if (errno == ENOENT)
      return 0; /* nothing denied yet */
    sbx__make_error(&err, errno, SBX_E_IO, "read `%s`", path);
    return cli_fail(&err);
  }
  if (json) {
    fwrite(text, 1, len, stdout);
    return 0;
  }
  for (char *line = text, *nl; line < text + len; line = nl + 1) {
    nl = memchr(line, '\n', (size_t) (text + len - line));
    if (nl == NULL)
      break; /* a line being written */
    json_t *j = json_loadb(line, (size_t) (nl - line), 0, NULL);
    if (j == NULL)
      continue;
    char ts[32] = "?";
    json_t *t = json_object_get(j, "ts");
    if (json_is_number(t)) {
      time_t sec = (time_t) json_number_value(t);
      struct tm tm;
      gmtime_r(&sec, &tm);
      strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    const char *kind = json_string_value(json_object_get(j, "kind"));
    const char *target = json_string_value(json_object_get(j, "target"));
    const char *rule = json_string_value(json_object_get(j, "rule"));
    printf("%s %s %s (%s)\n", ts, kind ? kind : "?", target ? target : "?", rule ? rule : "?");
    json_decref(j);
  }
  return 0;
}

struct edit {
  const char *verb;
  char **targets;
  size_t n;
};

static int apply(sbx_net_policy_t *p, void *data, sbx_error_t *err)
{
  struct edit *e = data;
  if (strcmp(e->verb, "rm") == 0)
    return sbx__net_policy_remove(p, (const char *const *) e->targets, e->n, err) < 0 ? -1 : 0;
  int action = strcmp(e->verb, "allow") == 0 ? SBX_NET_ALLOW : SBX_NET_DENY;
  struct sbx_net_rule *rules = xzalloc(e->n * sizeof *rules);
  int rc = 0;
  size_t i = 0;
  for (; i < e->n; i++) {
    rules[i].action = action;
    if (sbx__net_target_parse(e->targets[i], &rules[i], err) < 0) {
      rc = -1;
      break;
    }
  }
  if (rc == 0)
    rc = sbx__net_policy_merge(p, rules, e->n, err);
  sbx__net_rules_free(rules, i);
  return rc;
}

int cmd_net(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  struct net_opts o = {0};
  struct cli_scope s = {0};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &o, -1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  const char *verb = argv[optind];
  int n = argc - optind - 1;
  char **targets = argv + optind + 1;
  bool log = strcmp(verb, "log") == 0, show = log || strcmp(verb, "show") == 0;
  if (!show && strcmp(verb, "allow") != 0 && strcmp(verb, "deny") != 0 && strcmp(verb, "rm") != 0)
    return cli_usage_error(c, "unknown command `%s` (show, allow, deny, rm or log)", verb);
  if (show && n != 0)
    return cli_usage_error(c, "%s takes no TARGET", verb);
  if (!show && n == 0)
    return cli_usage_error(c, "%s needs at least one TARGET", verb);
  if (!show && n > SBX_NET_MAX_RULES)
    return cli_usage_error(c, "at most %d targets", SBX_NET_MAX_RULES);
  if ((r = cli_open(c)) != 0)
    return r;
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(s.user, s.thread, id, &err) < 0)
    return cli_fail(&err);
  cleanup_free char *dir = sbx__state_dir(sbx_provider_home(c->provider), id);
  if (access(dir, F_OK) != 0) {
    sbx__make_error(&err, 0, SBX_E_NOT_FOUND, "no sandbox for thread %s (user %s)", s.thread,
                    s.user);
    return cli_fail(&err);
  }
  if (log)
    return print_log(dir, id, o.json);
  sbx_net_policy_t *p = NULL;
  if (show)
    p = sbx__net_store_read(dir, &err);
  else {
    struct edit e = {verb, targets, (size_t) n};
    if (sbx__net_store_update(dir, false, apply, &e, &p, &err) < 0)
      p = NULL;
  }
  if (p == NULL) {
    if (err && err->kind == SBX_E_NOT_FOUND)
      sbx__error_wrap(&err, "sandbox %s (sandbox.network is not egress?)", id);
    return cli_fail(&err);
  }
  r = print_policy(p, o.json);
  sbx__net_policy_free(p);
  return r;
}
