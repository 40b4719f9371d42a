/* sandbox.network egress, the host side (docs/network.md): the sandbox's network namespace is
 * made by the launcher like any other (owned by the host's user namespace); once its init runs,
 * this starts the sandbox's enforcer, sbx-net (src/net/enforcer.c), which attaches pasta to that
 * namespace and filters it. The enforcer records itself in net/enforcer and lives as long as the
 * init: it survives the front-end (nothing here needs to be adopted), and destroy kills it.
 *
 * The policy: net/policy.json (src/net/store.h), written before the enforcer starts for a new
 * sandbox. A spare starts with none (everything denied) and gets the new sandbox's when it is
 * taken (net/applied says when the enforcer has it in force). */
#include "linux.h"
#include "../../../lib/backend.h"
#include "../../../net/store.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

bool sbx__linux_egress(const struct sbx_config *c)
{
  return c->network && strcmp(c->network, "egress") == 0;
}

/* $SBX_NET, else sbx-net next to sbx-init */
static char *enforcer_path(void)
{
  const char *env = getenv("SBX_NET");
  if (env && *env)
    return xstrdup(env);
  char *init = sbx__init_path();
  char *slash = strrchr(init, '/');
  char *p = xasprintf("%.*ssbx-net", slash ? (int) (slash - init + 1) : 0, init);
  free(init);
  return p;
}

/* sbx_create's policy, else the configured one, else allow (but the always-denied ranges). A new
 * sandbox's file, which nobody else writes yet: temp + rename without the store's lock or fsync
 * (a crash takes the sandbox with it; an fsync costs milliseconds on a busy disk, at every take
 * of a spare). */
static int write_policy(struct sbx_instance *in, sbx_error_t *err)
{
  const char *text = in->network_policy ? in->network_policy : in->cfg->network_policy;
  sbx_net_policy_t *p = text ? sbx__net_policy_parse(text, strlen(text), "network_policy", err)
                             : sbx__net_policy_new(SBX_NET_ALLOW);
  if (p == NULL)
    return -1;
  cleanup_free char *json = sbx__net_policy_serialize(p);
  sbx__net_policy_free(p);
  cleanup_free char *dir = xasprintf("%s/" SBX_NET_DIR, in->dir);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", dir);
  cleanup_free char *path = xasprintf("%s/policy.json", dir);
  if (sbx__write_file_at(AT_FDCWD, path, json, strlen(json), 0600, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write `%s`", path);
  /* a spare's enforcer runs: now, not at its next look at the file */
  sbx__net_enforcer_signal(in->dir, SBX_NET_RELOAD_SIGNAL);
  return 0;
}

int sbx__linux_net_start(struct sbx_instance *in, int netns_fd, sbx_error_t *err)
{
  if (netns_fd < 0)
    return sbx__make_error(err, EPROTO, SBX_E_INTERNAL,
                           "sandbox %s: the launcher sent no network namespace", in->meta.id);
  if (in->provider != NULL && write_policy(in, err) < 0)
    return -1;
  cleanup_free char *exe = enforcer_path();
  cleanup_free char *pid = xasprintf("%ld", in->meta.pid);
  cleanup_free char *start = xasprintf("%llu", in->meta.pid_start);
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, 0, 2);
  posix_spawn_file_actions_adddup2(&fa, netns_fd, 3); /* sbx-net's fd 3 */
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  char verb[] = "serve";
  char *argv[] = {exe, verb, in->dir, pid, start, NULL};
  pid_t child;
  int r = posix_spawn(&child, exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  cleanup_close int rd = out[0];
  if (r != 0)
    return sbx__make_error(err, r, SBX_E_UNSUPPORTED,
                           "sandbox.network egress: run `%s` (is sbx installed whole?)", exe);
  /* it answers one line once the sandbox's network is up, then leaves its enforcer behind */
  char line[1024];
  size_t got = 0;
  bool late = false;
  for (uint64_t until = sbx__now_ms() + 15000; got < sizeof line - 1;) {
    struct pollfd p = {rd, POLLIN, 0};
    int64_t left = (int64_t) (until - sbx__now_ms());
    if (left <= 0 || poll(&p, 1, (int) left) == 0) {
      late = true;
      break;
    }
    if (p.revents == 0)
      break;
    ssize_t n = read(rd, line + got, sizeof line - 1 - got);
    if (n <= 0)
      break;
    got += (size_t) n;
    if (memchr(line, '\n', got))
      break;
  }
  line[got] = '\0';
  line[strcspn(line, "\n")] = '\0';
  int status = 0;
  if (strncmp(line, "ok", 2) != 0)
    kill(child, SIGKILL);
  TEMP_FAILURE_RETRY(waitpid(child, &status, 0));
  if (strncmp(line, "ok", 2) == 0)
    return 0;
  sbx__linux_net_stop(in->dir);
  return sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s: sandbox.network egress: %s",
                         in->meta.id,
                         sbx__str_has_prefix(line, "error: ") ? line + 7
                         : *line                              ? line
                         : late ? "the enforcer (sbx-net) was not ready within 15 s"
                                : "the enforcer (sbx-net) died");
}

int sbx__linux_net_adopt(struct sbx_instance *in, sbx_error_t *err)
{
  /* Not waited for: the enforcer reads a policy change before any DNS query that came after it,
   * and until it has applied the change (milliseconds) the spare's deny-all stays: fail closed.
   * Waiting for net/applied would cost a ruleset rebuild on every take. */
  return write_policy(in, err);
}

void sbx__linux_net_stop(const char *dir)
{
  /* not waited for: SIGKILL cannot be refused, and pasta goes with it (its pid namespace) */
  sbx__net_enforcer_signal(dir, SIGKILL);
}
