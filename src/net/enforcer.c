/* sbx-net: a sandbox's network enforcer (sandbox.network egress, docs/network.md). One per
 * egress sandbox, started by libsbx after the launch (host/net.c), for the sandbox's life:
 *
 *   sbx-net serve DIR PID START      (fd 3: the sandbox's network namespace)
 *
 * DIR is the sandbox's state folder, PID and START its init (pid and /proc start time); the
 * namespace comes open from libsbx, which had it from the launcher (an ordinary user cannot
 * open /proc/PID/ns/net of the non-dumpable init). The
 * enforcer makes itself PID 1 of a pid namespace of its own and starts pasta (passt's
 * userspace forwarder) there, attached to the sandbox's network namespace: the tap pasta makes
 * is the sandbox's only way out. If the enforcer dies, the kernel kills pasta with it, its tap
 * goes, and the sandbox has no route left (fail closed). It then enters the sandbox's network
 * namespace (owned by the host's user namespace, or rootless by the sandbox's outer one, which
 * it joins first: nothing inside can change what it sets there),
 * keeps the nftables table (nft.c) in step with net/policy.json (its writers signal us, and we
 * look at it every 250 ms), answers DNS on
 * 127.0.0.53 (resolver.c) with an upstream socket opened before it left the host's namespace
 * (TCP ones come from a thread that stays there, hostsock.c),
 * reads the denied packets (nflog.c), logs them and counts them (store.h's files), and relays the
 * TCP connections the table redirects to it over host sockets (tcpproxy.c). It exits
 * when the sandbox's init does. Its stdout says "ok" or "error: ..." once it is ready. */
#include "error.h"
#include "hostsock.h"
#include "nflog.h"
#include "nft.h"
#include "resolver.h"
#include "resolver_tcp.h"
#include "store.h"
#include "tcpproxy.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define PASTA "pasta"

/* A name an address was pinned for, and the allow rule's text that allowed the name (the Host and
 * SNI check: docs/network.md). An address has one entry per name. */
struct pin_name {
  struct sbx_net_addr addr;
  uint64_t until_ms;
  char name[SBX_NET_MAX_TARGET + 1];
  char why[96];
};
#define MAX_PIN_NAMES 8192 /* beyond (after pruning), a new name is not recorded: refused */

struct enforcer {
  int dirfd;
  char dir[64]; /* /proc/self/fd/<dirfd>: the folder, wherever a spare's rename moved it */
  sbx_net_policy_t *policy;
  struct sbx_net_addr *host;
  size_t n_host;
  struct sbx_nft *nft;
  uint32_t gen;
  struct sbx_nft_pin *pins;
  size_t n_pins, cap_pins;
  struct pin_name *names;
  size_t n_names, cap_names;
  struct sbx_net_counters counters;
  bool counters_dirty;
  struct sbx_tcpproxy *tcp;
  struct stat policy_st; /* policy.json as last loaded (st_ino 0: none) */
};

static void sandbox_id(struct enforcer *e, char *out, size_t len)
{
  char link[PATH_MAX];
  ssize_t n = readlink(e->dir, link, sizeof link - 1);
  link[n > 0 ? n : 0] = '\0';
  const char *slash = strrchr(link, '/');
  snprintf(out, len, "%.*s", (int) (len - 1), slash ? slash + 1 : link);
}

static void log_denied(struct enforcer *e, const char *kind, const char *target, const char *why)
{
  char id[128];
  sandbox_id(e, id, sizeof id);
  sbx__net_denied_log(e->dir, id, kind, target, why, NULL);
  if (strcmp(kind, "lookup") == 0)
    e->counters.denied_lookups++;
  else
    e->counters.denied_connections++;
  e->counters_dirty = true;
}

/* ---- pins ---- */

static void prune_pins(struct enforcer *e, uint64_t now)
{
  size_t k = 0;
  for (size_t i = 0; i < e->n_pins; i++) {
    struct sbx_net_decision d;
    sbx__net_policy_decide_name(e->policy, e->pins[i].name, &d);
    if (e->pins[i].until_ms > now + 1000 && d.action == SBX_NET_ALLOW)
      e->pins[k++] = e->pins[i];
  }
  e->n_pins = k;
  k = 0;
  for (size_t i = 0; i < e->n_names; i++) {
    struct sbx_net_decision d;
    sbx__net_policy_decide_name(e->policy, e->names[i].name, &d);
    if (e->names[i].until_ms > now + 1000 && d.action == SBX_NET_ALLOW)
      e->names[k++] = e->names[i];
  }
  e->n_names = k;
}

static bool same_addr(const struct sbx_net_addr *a, const struct sbx_net_addr *b)
{
  return a->family == b->family && memcmp(a->a, b->a, 16) == 0;
}

static void record_name(struct enforcer *e, const struct sbx_net_addr *a, const char *name,
                        const struct sbx_net_decision *via, uint64_t until, uint64_t now)
{
  struct pin_name *p = NULL;
  for (size_t k = 0; k < e->n_names && !p; k++)
    if (same_addr(&e->names[k].addr, a) && strcmp(e->names[k].name, name) == 0)
      p = &e->names[k];
  if (p == NULL) {
    if (e->n_names >= MAX_PIN_NAMES)
      prune_pins(e, now);
    if (e->n_names >= MAX_PIN_NAMES)
      return;
    if (e->n_names == e->cap_names)
      e->names = xreallocarray(e->names, e->cap_names = e->cap_names ? 2 * e->cap_names : 64,
                               sizeof *e->names);
    p = &e->names[e->n_names++];
    p->addr = *a;
    p->until_ms = 0;
    snprintf(p->name, sizeof p->name, "%s", name);
  }
  if (until > p->until_ms)
    p->until_ms = until;
  snprintf(p->why, sizeof p->why, "%s", via ? via->why : "");
}

static int apply(struct enforcer *e, sbx_error_t *err)
{
  uint64_t now = sbx__now_ms();
  prune_pins(e, now);
  sbx_buf_t b = {0};
  int r = -1;
  if (e->gen > 0) {
    /* the table is there: replace the policy's part; whole again if that fails (the table
     * touched from outside) */
    sbx__nft_policy_update(&b, e->policy, e->gen + 1, e->pins, e->n_pins, now);
    r = sbx__nft_run(e->nft, b.data, NULL);
    sbx__buf_free(&b);
  }
  if (r < 0) {
    sbx__nft_ruleset(&b, e->policy, e->host, e->n_host, e->gen + 1, e->pins, e->n_pins, now,
                     e->tcp ? sbx__tcpproxy_port(e->tcp) : 0);
    r = sbx__nft_run(e->nft, b.data, err);
  }
  sbx__buf_free(&b);
  if (r == 0)
    e->gen++;
  return r;
}

static bool tcp_still_allowed(void *data, const struct sbx_net_addr *a, char *why, size_t len);

/* net/policy.json (again); a missing one is default deny (a spare's, until it is taken) */
static int load_policy(struct enforcer *e, sbx_error_t *err)
{
  /* looked at before the read: a write after it is seen at the next look */
  if (fstatat(e->dirfd, SBX_NET_POLICY_FILE, &e->policy_st, 0) < 0)
    memset(&e->policy_st, 0, sizeof e->policy_st);
  sbx_error_t rerr = NULL;
  sbx_net_policy_t *p = sbx__net_store_read(e->dir, &rerr);
  if (p == NULL) {
    if (rerr->kind != SBX_E_NOT_FOUND) {
      /* a bad file changes nothing: the last good policy stays */
      fprintf(stderr, "sbx-net: %s\n", rerr->msg);
      if (err)
        *err = rerr;
      else
        sbx_error_release(&rerr);
      return -1;
    }
    sbx_error_release(&rerr);
    p = sbx__net_policy_new(SBX_NET_DENY);
  }
  sbx_net_policy_t *old = e->policy;
  e->policy = p;
  if (apply(e, err) < 0) {
    e->policy = old;
    sbx__net_policy_free(p);
    return -1;
  }
  sbx__net_policy_free(old);
  if (e->tcp)
    sbx__tcpproxy_recheck(e->tcp, tcp_still_allowed);
  /* the enforcer's acknowledgement: this generation is in force (host/net.c waits for it) */
  char text[32];
  int n = snprintf(text, sizeof text, "%u\n", e->gen);
  sbx__write_file_at(e->dirfd, SBX_NET_DIR "/applied", text, (size_t) n, 0644, false);
  return 0;
}

/* ---- resolver hooks ---- */

static void hook_decide(void *data, const char *name, struct sbx_net_decision *d)
{
  struct enforcer *e = data;
  sbx__net_policy_decide_name(e->policy, name, d);
  if (d->action == SBX_NET_ALLOW) {
    e->counters.allowed_lookups++;
    e->counters_dirty = true;
  }
}

static void hook_denied(void *data, const char *name, const struct sbx_net_decision *d)
{
  log_denied(data, "lookup", name, d->why);
}

static void hook_pin(void *data, const char *name, const struct sbx_net_decision *via,
                     const struct sbx_dns_pin *pins, size_t n)
{
  struct enforcer *e = data;
  uint64_t now = sbx__now_ms();
  for (size_t i = 0; i < n; i++) {
    struct sbx_net_decision d;
    sbx__net_policy_decide_addr(e->policy, &pins[i].addr, e->host, e->n_host, via, &d);
    if (d.action != SBX_NET_ALLOW) {
      /* an allowed name answering a host, private or denied address (DNS rebinding): the
       * address is not pinned, so it stays unreachable */
      char a[64], target[SBX_NET_MAX_TARGET + 80];
      snprintf(target, sizeof target, "%s=%s", name, sbx__net_addr_str(&pins[i].addr, a, sizeof a));
      log_denied(e, "lookup", target, d.why);
      continue;
    }
    uint32_t secs = pins[i].ttl < SBX_NFT_PIN_FLOOR  ? SBX_NFT_PIN_FLOOR
                    : pins[i].ttl > SBX_NFT_PIN_CEIL ? SBX_NFT_PIN_CEIL
                                                     : pins[i].ttl;
    uint64_t until = now + (uint64_t) secs * 1000;
    record_name(e, &pins[i].addr, name, via, until, now);
    struct sbx_nft_pin *p = NULL;
    for (size_t k = 0; k < e->n_pins && !p; k++)
      if (e->pins[k].addr.family == pins[i].addr.family &&
          memcmp(e->pins[k].addr.a, pins[i].addr.a, 16) == 0)
        p = &e->pins[k];
    /* pinned long enough already: nothing to tell the kernel (the common, fast case) */
    if (p && p->until_ms + 5000 >= until) {
      snprintf(p->name, sizeof p->name, "%s", name);
      continue;
    }
    bool existed = p && p->until_ms > now + 1000;
    sbx_error_t err = NULL;
    if (sbx__nft_pin(e->nft, &pins[i].addr, secs, existed, &err) < 0) {
      fprintf(stderr, "sbx-net: %s\n", err->msg);
      sbx_error_release(&err);
      continue;
    }
    if (p == NULL) {
      if (e->n_pins == e->cap_pins)
        e->pins = xreallocarray(e->pins, e->cap_pins = e->cap_pins ? 2 * e->cap_pins : 64,
                                sizeof *e->pins);
      p = &e->pins[e->n_pins++];
      p->addr = pins[i].addr;
    }
    p->until_ms = until;
    snprintf(p->name, sizeof p->name, "%s", name);
  }
  if (e->n_pins > 4 * 1024)
    prune_pins(e, now);
}

/* ---- TCP relay hooks ---- */

/* the relay's second opinion: what nft let through must still not be in the always-denied set
 * (or an explicit deny) unless an explicit allow rule covers it; pins and the default are
 * nft's alone, so they count as allowed here */
static bool hook_tcp_allow(void *data, const struct sbx_net_addr *a, char *why, size_t len)
{
  struct enforcer *e = data;
  struct sbx_net_decision via = {.action = SBX_NET_ALLOW}, d;
  sbx__net_policy_decide_addr(e->policy, a, e->host, e->n_host, &via, &d);
  snprintf(why, len, "%s", d.why);
  return d.action == SBX_NET_ALLOW;
}

/* the whole decision, as the table takes it: the rules, the always-denied set, the pins, the
 * default (for open connections after a policy change) */
static bool tcp_still_allowed(void *data, const struct sbx_net_addr *a, char *why, size_t len)
{
  struct enforcer *e = data;
  struct sbx_net_decision d;
  sbx__net_policy_decide_addr(e->policy, a, e->host, e->n_host, NULL, &d);
  snprintf(why, len, "%s", d.why);
  if (d.action == SBX_NET_ALLOW)
    return true;
  if (d.rule != NULL || strcmp(d.why, "default") != 0)
    return false;
  uint64_t now = sbx__now_ms();
  for (size_t i = 0; i < e->n_pins; i++)
    if (e->pins[i].addr.family == a->family && memcmp(e->pins[i].addr.a, a->a, 16) == 0 &&
        e->pins[i].until_ms > now + 1000)
      return true;
  return false;
}

static void hook_tcp_denied(void *data, const char *target, const char *why)
{
  log_denied(data, "connect", target, why);
}

/* The Host / SNI check (docs/network.md): under default deny, a connection to port 80 or 443 of
 * an address no IP/CIDR allow rule covers (reachable through a pin alone) must name a name
 * that address was pinned for. */
static bool hook_wants_peek(void *data, const struct sbx_net_addr *a, uint16_t port)
{
  struct enforcer *e = data;
  if ((port != 80 && port != 443) || e->policy->default_action != SBX_NET_DENY)
    return false;
  struct sbx_net_decision d;
  sbx__net_policy_decide_addr(e->policy, a, e->host, e->n_host, NULL, &d);
  return d.action != SBX_NET_ALLOW;
}

static bool hook_peeked(void *data, const struct sbx_net_addr *a, const char *target,
                        enum sbx_peek_result r, const char *name)
{
  struct enforcer *e = data;
  if (!hook_wants_peek(e, a, 443))
    return true; /* the policy changed while the bytes came: no name is needed any more */
  uint64_t now = sbx__now_ms();
  const char *pinned[16];
  size_t n = 0;
  bool ok = false;
  struct sbx_net_decision sent = {0};
  if (r == SBX_PEEK_NAME)
    sbx__net_policy_decide_name(e->policy, name, &sent);
  char rules[256] = "";
  for (size_t i = 0; i < e->n_names; i++) {
    const struct pin_name *p = &e->names[i];
    if (!same_addr(&p->addr, a) || p->until_ms <= now)
      continue;
    if (n < ARRAY_SIZE(pinned)) {
      pinned[n++] = p->name;
      size_t used = strlen(rules);
      if (strstr(rules, p->why) == NULL)
        snprintf(rules + used, sizeof rules - used, "%s%s", used ? ", " : "", p->why);
    }
    /* the name itself, or one the same allow rule covers (a wildcard: another name below it
     * on the same CDN address) */
    if (r == SBX_PEEK_NAME && sent.action == SBX_NET_ALLOW && sent.rule != NULL &&
        (strcmp(p->name, name) == 0 || strcmp(sent.why, p->why) == 0))
      ok = true;
  }
  if (ok)
    return true;
  char why[512];
  if (r == SBX_PEEK_NAME)
    snprintf(why, sizeof why, "name %s is not one %s was pinned for (%s)", name, target,
             n ? rules : "no name pinned");
  else
    snprintf(why, sizeof why, "%s; %s is allowed by name only (%s)", sbx__peek_result_str(r),
             target, n ? rules : "no name pinned");
  char id[128];
  sandbox_id(e, id, sizeof id);
  sbx__net_denied_log_names(e->dir, id, "connect", target, why, r == SBX_PEEK_NAME ? name : "",
                            pinned, n, NULL);
  e->counters.denied_connections++;
  e->counters_dirty = true;
  return false;
}

/* Whether policy.json is another file than the one last loaded (the writers' signal is the
 * fast path; this catches one sent before our record existed, and a hand edit). */
static bool policy_changed(const struct enforcer *e)
{
  struct stat st;
  if (fstatat(e->dirfd, SBX_NET_POLICY_FILE, &st, 0) < 0)
    return e->policy_st.st_ino != 0;
  return st.st_ino != e->policy_st.st_ino || st.st_dev != e->policy_st.st_dev ||
         st.st_size != e->policy_st.st_size || st.st_mtim.tv_sec != e->policy_st.st_mtim.tv_sec ||
         st.st_mtim.tv_nsec != e->policy_st.st_mtim.tv_nsec;
}

/* ---- setup ---- */

static int fail(int ready_fd, const char *what, sbx_error_t *err)
{
  cleanup_free char *msg =
      xasprintf("error: %s%s%s\n", what, err && *err ? ": " : "", err && *err ? (*err)->msg : "");
  sbx__write_all(ready_fd, msg, strlen(msg));
  return 1;
}

/* pasta, attached to netns_fd, run as root (its namespace is the host's user namespace's) and
 * with no port forwarded either way and the gateway not mapped to the host: the sandbox gets
 * the host's outbound address and routes, and nothing of the host itself. Returns its pid. */
static pid_t start_pasta(int netns_fd, int dirfd, sbx_error_t *err)
{
  char ns[64], pidfile[64];
  snprintf(ns, sizeof ns, "/proc/self/fd/%d", netns_fd);
  snprintf(pidfile, sizeof pidfile, "/proc/self/fd/%d/" SBX_NET_DIR "/pasta.pid", dirfd);
  unlinkat(dirfd, SBX_NET_DIR "/pasta.pid", 0);
  /* pasta opens the tap device as whoever we are; said here, not in pasta's log */
  if (access("/dev/net/tun", R_OK | W_OK) < 0)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED,
                           "pasta needs /dev/net/tun readable and writable by the user sbx runs "
                           "as (as root: chmod 0666 /dev/net/tun, Debian's default; `sbx doctor`)");
  pid_t child = fork();
  if (child < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "fork pasta");
  if (child == 0) {
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(fd, 0);
    dup2(fd, 1); /* its stderr is our log */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    fcntl(netns_fd, F_SETFD, 0);
    fcntl(dirfd, F_SETFD, 0);
    execlp(PASTA, PASTA, "--runas", "0:0", "-q", "-e", "--config-net", "--no-map-gw", "-I", "eth0",
           "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-dhcp", "--no-dhcpv6", "-P",
           pidfile, "--netns", ns, (char *) NULL);
    _exit(127);
  }
  /* pasta goes to the background once the namespace's interface is configured */
  int status = 0;
  if (TEMP_FAILURE_RETRY(waitpid(child, &status, 0)) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return sbx__make_error(err, 0, SBX_E_BACKEND,
                           "`pasta` failed (exit status %d): is Debian's passt package "
                           "installed?",
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cleanup_free char *text = NULL;
  long pid = 0;
  if (sbx__read_file_at(dirfd, SBX_NET_DIR "/pasta.pid", 64, &text, NULL) < 0 ||
      (pid = strtol(text, NULL, 10)) <= 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "pasta wrote no pid file");
  return (pid_t) pid;
}

static void on_signal(int sig)
{
  (void) sig;
}

static int serve(int ready_fd, int dirfd, int pidfd, int netns)
{
  struct enforcer e = {.dirfd = dirfd};
  snprintf(e.dir, sizeof e.dir, "/proc/self/fd/%d", dirfd);
  sbx_error_t err = NULL;
  setsid();
  /* not the caller's stdio (it waits for EOF on our report): a log of our own */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  int logfd =
      openat(dirfd, SBX_NET_DIR "/enforcer.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  dup2(null, 0);
  dup2(null, 1);
  dup2(logfd >= 0 ? logfd : null, 2);
  /* PID 1 of a pid namespace: only signals it handles reach it (from the host: SIGKILL too) */
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SBX_NET_RELOAD_SIGNAL, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SBX_NET_RELOAD_SIGNAL);
  sigprocmask(SIG_BLOCK, &set, NULL);
  cleanup_close int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sbx__net_host_addrs(&e.host, &e.n_host, &err) < 0)
    return fail(ready_fd, "list the host's addresses", &err);
  /* the upstream resolver, reached from the host's namespace */
  struct sbx_resolver *res = xzalloc(sizeof *res);
  res->up_fd = -1;
  cleanup_free char *conf = NULL;
  struct sockaddr_storage up;
  socklen_t up_len = 0;
  if (sbx__read_file_at(AT_FDCWD, "/etc/resolv.conf", 65536, &conf, NULL) == 0 &&
      sbx__resolver_upstream(conf, &up, &up_len) == 0)
    res->up_fd = sbx__resolver_connect(&up, up_len, NULL);
  /* the TCP relay's and the TCP resolver's upstream sockets (hostsock.h says why a thread) */
  struct sbx_hostsock *host = sbx__hostsock_start(&err);
  if (host == NULL)
    return fail(ready_fd, "keep a thread in the host's network namespace", &err);
  pid_t pasta = start_pasta(netns, dirfd, &err);
  if (pasta < 0)
    return fail(ready_fd, "start the sandbox's forwarder", &err);
  if (setns(netns, CLONE_NEWNET) < 0) {
    sbx__make_error(&err, errno, SBX_E_BACKEND, "setns");
    return fail(ready_fd, "enter the sandbox's network namespace", &err);
  }
  res->listen_fd = sbx__resolver_listen(&err);
  if (res->listen_fd < 0)
    return fail(ready_fd, "start the resolver", &err);
  res->hooks = (struct sbx_resolver_hooks){&e, hook_decide, hook_pin, hook_denied};
  struct sbx_resolver_tcp *tcp =
      sbx__resolver_tcp_new(res, &up, res->up_fd >= 0 ? up_len : 0, host, &err);
  if (tcp == NULL)
    return fail(ready_fd, "start the resolver (TCP)", &err);
  /* SBX_NET_TCP_MAX lowers the relay's connection cap (the tests' fd cap) */
  const char *max = getenv("SBX_NET_TCP_MAX");
  e.tcp = sbx__tcpproxy_new(host, max ? strtoul(max, NULL, 10) : 0,
                            (struct sbx_tcpproxy_hooks){&e, hook_tcp_allow, hook_tcp_denied,
                                                        hook_wants_peek, hook_peeked},
                            &err);
  if (e.tcp == NULL)
    return fail(ready_fd, "start the TCP relay", &err);
  e.nft = sbx__nft_new(&err);
  if (e.nft == NULL || load_policy(&e, &err) < 0)
    return fail(ready_fd, "set the sandbox's packet filter", &err);
  cleanup_close int nflog = sbx__nflog_open(SBX_NFT_LOG_GROUP, NULL);
  /* SBX_NET_RELOAD_POLL_MS=0: no look at the file, the signal alone (the tests' positive
   * control that the signal works) */
  const char *look_env = getenv("SBX_NET_RELOAD_POLL_MS");
  bool look = look_env == NULL || strcmp(look_env, "0") != 0;
  sbx__write_all(ready_fd, "ok\n", 3);
  close(ready_fd);
  uint64_t last_flush = 0, last_look = sbx__now_ms();
  for (;;) {
    struct pollfd pfd[] = {{sfd, POLLIN, 0},
                           {res->listen_fd, POLLIN, 0},
                           {res->up_fd, POLLIN, 0},
                           {pidfd, POLLIN, 0},
                           {nflog, POLLIN, 0},
                           {sbx__resolver_tcp_fd(tcp), POLLIN, 0},
                           {sbx__tcpproxy_fd(e.tcp), POLLIN, 0}};
    int n = poll(pfd, ARRAY_SIZE(pfd), SBX_NET_RELOAD_POLL_MS);
    if (n < 0 && errno != EINTR)
      break;
    /* signals first: a policy change before the queries that came after it */
    bool stop = false, reload = false;
    if (pfd[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      bool child = false;
      while (read(sfd, &si, sizeof si) == sizeof si) {
        child |= si.ssi_signo == SIGCHLD;
        reload |= si.ssi_signo == SBX_NET_RELOAD_SIGNAL;
        stop |= si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT;
      }
      /* pasta gone: the sandbox has no way out any more, and neither do we */
      if (stop || (child && waitpid(pasta, NULL, WNOHANG) == pasta))
        break;
      while (child && waitpid(-1, NULL, WNOHANG) > 0)
        ;
    }
    uint64_t now = sbx__now_ms();
    if (look && now - last_look >= SBX_NET_RELOAD_POLL_MS) {
      reload |= policy_changed(&e);
      last_look = now;
    }
    if (reload)
      load_policy(&e, NULL);
    if (pfd[1].revents & POLLIN)
      for (int i = 0; i < 64; i++) {
        int before = res->listen_fd;
        sbx__resolver_on_query(res);
        struct pollfd more = {before, POLLIN, 0};
        if (poll(&more, 1, 0) <= 0)
          break;
      }
    if (res->up_fd >= 0 && (pfd[2].revents & POLLIN))
      for (int i = 0; i < 64; i++) {
        sbx__resolver_on_answer(res);
        struct pollfd more = {res->up_fd, POLLIN, 0};
        if (poll(&more, 1, 0) <= 0)
          break;
      }
    if (pfd[5].revents & POLLIN)
      sbx__resolver_tcp_on_ready(tcp);
    if (nflog >= 0 && (pfd[4].revents & POLLIN)) {
      char target[96];
      while (sbx__nflog_read(nflog, target, sizeof target) > 0)
        log_denied(&e, "connect", target, "denied by the policy or the always-denied set");
    }
    if (pfd[6].revents & POLLIN)
      sbx__tcpproxy_run(e.tcp);
    if (pfd[3].revents & POLLIN)
      break; /* the sandbox is gone */
    now = sbx__now_ms();
    sbx__resolver_expire(res, now);
    sbx__resolver_tcp_expire(tcp, now);
    sbx__tcpproxy_expire(e.tcp, now);
    if (e.counters_dirty && now - last_flush >= 250) {
      sbx__net_counters_write(e.dir, &e.counters, NULL);
      e.counters_dirty = false;
      last_flush = now;
    }
  }
  if (e.counters_dirty)
    sbx__net_counters_write(e.dir, &e.counters, NULL);
  kill(pasta, SIGKILL);
  return 0;
}

#define NETNS_FD 3 /* the sandbox's network namespace, from libsbx (host/net.c) */

/* Rootless (docs/network.md): the sandbox's network namespace belongs to the sandbox's outer
 * user namespace, which the user owns; joined (we are single-threaded here), we hold every
 * capability over the network namespace (the table, port 53, pasta's tap) and none over the
 * host's. The sandbox's own root, one user namespace further in, holds none over either. As
 * root the owner is ours already: nothing to do. */
static int join_owner(int netns)
{
  cleanup_close int owner = ioctl(netns, NS_GET_USERNS);
  struct stat a, b;
  if (owner < 0 || fstat(owner, &a) < 0 || stat("/proc/self/ns/user", &b) < 0)
    return -1;
  if (a.st_dev == b.st_dev && a.st_ino == b.st_ino)
    return 0;
  return setns(owner, CLONE_NEWUSER);
}

static int serve_main(const char *dir, long pid, unsigned long long start)
{
  cleanup_close int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0) {
    printf("error: open `%s`: %s\n", dir, strerror(errno));
    return 1;
  }
  mkdirat(dirfd, SBX_NET_DIR, 0755);
  /* the sandbox's init and namespace, while its pid means something to us (not in our own pid
   * namespace) */
  cleanup_close int pidfd = (int) syscall(SYS_pidfd_open, (pid_t) pid, 0);
  cleanup_close int netns = fcntl(NETNS_FD, F_DUPFD_CLOEXEC, 3);
  close(NETNS_FD);
  if (netns < 0 || ioctl(netns, NS_GET_NSTYPE) != CLONE_NEWNET) {
    printf("error: fd %d is not the sandbox's network namespace\n", NETNS_FD);
    return 1;
  }
  if (pidfd < 0 || sbx__proc_start_time(pid) != start) {
    printf("error: the sandbox's init (pid %ld) is gone\n", pid);
    return 1;
  }
  if (join_owner(netns) < 0) {
    printf("error: join the user namespace that owns the sandbox's network: %s\n", strerror(errno));
    return 1;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return 1;
  fflush(stdout);
  pid_t child = (pid_t) syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
  if (child < 0) {
    printf("error: clone: %s\n", strerror(errno));
    return 1;
  }
  if (child == 0) {
    close(p[0]);
    _exit(serve(p[1], dirfd, pidfd, netns));
  }
  close(p[1]);
  /* the record before the report: a creator that dies right after still leaves it findable */
  cleanup_free char *rec = xasprintf("pid=%d\nstart=%llu\n", (int) child,
                                     (unsigned long long) sbx__proc_start_time(child));
  sbx__write_file_at(dirfd, SBX_NET_ENFORCER_RECORD, rec, strlen(rec), 0644, true);
  char buf[1024];
  ssize_t n = TEMP_FAILURE_RETRY(read(p[0], buf, sizeof buf - 1));
  if (n <= 0) {
    waitpid(child, NULL, 0);
    unlinkat(dirfd, SBX_NET_ENFORCER_RECORD, 0);
    printf("error: the enforcer died during setup\n");
    return 1;
  }
  fwrite(buf, 1, (size_t) n, stdout);
  if (strncmp(buf, "ok", 2) == 0)
    return 0;
  waitpid(child, NULL, 0);
  unlinkat(dirfd, SBX_NET_ENFORCER_RECORD, 0);
  return 1;
}

int main(int argc, char **argv)
{
  if (argc == 5 && strcmp(argv[1], "serve") == 0) {
    long pid = strtol(argv[3], NULL, 10);
    unsigned long long start = strtoull(argv[4], NULL, 10);
    if (pid <= 0 || start == 0) {
      printf("error: bad pid or start time\n");
      return 2;
    }
    return serve_main(argv[2], pid, start);
  }
  fprintf(stderr, "usage: sbx-net serve DIR PID START  (fd 3: the sandbox's network namespace)\n"
                  "  the network enforcer of an egress sandbox (started by libsbx)\n");
  return 2;
}
