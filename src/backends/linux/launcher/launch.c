/* The launcher: `sbx-init launch`, exec'd by libsbx (so it starts single-threaded whatever the
 * caller is), builds one sandbox and exits, leaving the sandbox's PID 1 running.
 *
 * Order matters. The launcher, as host root, joins the sandbox's cgroup and clones a child into
 * new mount, pid, net, ipc, uts and cgroup namespaces. The child, still host root, builds the
 * root filesystem and the loopback, and only then unshares its user namespace; the launcher
 * maps that namespace's root to an unprivileged host id and the child switches to it. So every
 * namespace but the user namespace is owned by the host: root inside the sandbox holds no
 * capability over its mounts, network, hostname or pid namespace, and every host path used
 * while building was resolved with full privilege before any sandbox code existed. */
#include "linux.h"
#include "proto.h"
#include "../../agent/agent.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

/* A unix socket path can be longer than sun_path allows; reach it through the directory fd. */
static int bind_ctl_socket(int dirfd, sbx_error_t *err)
{
  cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create the control socket");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/ctl.sock", dirfd);
  unlinkat(dirfd, "ctl.sock", 0);
  if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "bind the control socket");
  if (fchmodat(dirfd, "ctl.sock", 0600, 0) < 0 || listen(fd, 128) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "listen on the control socket");
  return steal_fd(&fd);
}

/* Child -> launcher messages on the sync pipe: 'M' (map my user namespace), 'N' (map my inner
 * one: rootless egress), 'R' (ready), or 'E' followed by "KIND STATUS message". Launcher ->
 * child: 'M' (mapped). */
static void child_fail(int fd, sbx_error_t *err)
{
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "E%d %d %s", err && *err ? (*err)->kind : SBX_E_INTERNAL,
                   err && *err ? (*err)->status : 0, err && *err ? (*err)->msg : "setup failed");
  (void) !write(fd, buf, (size_t) (n < (int) sizeof buf ? n : (int) sizeof buf - 1));
  _exit(1);
}

/* Root's launch: the user namespace comes last, owned by its own unprivileged host uid. */
static void enter_userns(const struct sbx_launch_spec *s, unsigned owner, int sync_w, int sync_r)
{
  sbx_error_t err = NULL;
  char c;
  /* the user namespace belongs to whoever creates it: its own unprivileged host uid, not root
   * (setting only the effective uid; the namespace's root is set up below) */
  if (setresuid((uid_t) -1, owner, (uid_t) -1) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "take the namespace owner's uid");
    child_fail(sync_w, &err);
  }
  if (unshare(CLONE_NEWUSER) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "unshare the user namespace");
    child_fail(sync_w, &err);
  }
  /* "M<first id>": the range to map (the shared one if the folders could not be idmapped) */
  char m[16];
  int mlen = snprintf(m, sizeof m, "M%u", s->uid_base);
  if (write(sync_w, m, (size_t) mlen) != mlen || read(sync_r, &c, 1) != 1 || c != 'M')
    _exit(1);
  if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "become root of the user namespace");
    child_fail(sync_w, &err);
  }
}

/* Rootless egress: every namespace made so far, the network one above all (the enforcer's
 * table goes there), belongs to the user namespace we were born in. The sandbox gets a child
 * of it, mapped one to one, so that its root holds no capability over them, as with root's
 * launch (docs/network.md, Rootless); the launcher maps it through a helper ('N'). */
static void enter_nested_userns(const struct sbx_launch_spec *s, int sync_w, int sync_r)
{
  sbx_error_t err = NULL;
  char c = 'N';
  if (unshare(CLONE_NEWUSER) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "unshare the inner user namespace");
    child_fail(sync_w, &err);
  }
  if (write(sync_w, &c, 1) != 1 || read(sync_r, &c, 1) != 1 || c != 'M')
    _exit(1);
  /* the single mapping denied setgroups in the outer namespace; the inner one inherits that */
  if (setresgid(0, 0, 0) < 0 || (s->uid_count > 1 && setgroups(0, NULL) < 0) ||
      setresuid(0, 0, 0) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "become root of the inner user namespace");
    child_fail(sync_w, &err);
  }
}

static void child_main(struct sbx_launch_spec *s, int sync_w, int sync_r, int listen_fd,
                       int lease_fd)
{
  sbx_error_t err = NULL;
  char c;
  if (s->rootless) {
    /* born in our user namespace: wait for its maps, then be its root (what the rest builds
     * with: the ids are the namespace's own from here on) */
    if (read(sync_r, &c, 1) != 1 || c != 'M')
      _exit(1);
    if (setresgid(0, 0, 0) < 0 || (s->uid_count > 1 && setgroups(0, NULL) < 0) ||
        setresuid(0, 0, 0) < 0) {
      sbx__make_error(&err, errno, SBX_E_INTERNAL, "become root of the user namespace");
      child_fail(sync_w, &err);
    }
    s->uid_base = 0;
  }
  cleanup_free char *hostname = xasprintf(SBX_HOSTNAME_FMT, s->id);
  if (sethostname(hostname, strlen(hostname)) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "sethostname");
    child_fail(sync_w, &err);
  }
  if (sbx__rootfs_setup(s, &err) < 0)
    child_fail(sync_w, &err);
  /* The launcher has been making our cgroup meanwhile; it sends 'C' and the cgroup's paths. We
   * join it ourselves while the host's cgroup tree is still in view (cheaper than being moved,
   * see sbx__cgroup_join_self), then leave the host's tree for the new root. */
  char msg[4096];
  ssize_t got = TEMP_FAILURE_RETRY(read(sync_r, msg, sizeof msg - 1));
  if (got < 1 || msg[0] != 'C')
    _exit(1);
  msg[got] = '\0';
  unsigned owner = 0;
  if (sscanf(msg + 1, "owner=%u", &owner) != 1 || (owner < SBX_OWNER_BASE && !s->rootless))
    _exit(1);
  struct sbx_cgroup cg;
  sbx__cgroup_parse(msg + 1, &cg);
  int joined = sbx__cgroup_join_self(&cg, &err);
  sbx__cgroup_free(&cg);
  if (joined < 0 || sbx__rootfs_enter(s, &err) < 0)
    child_fail(sync_w, &err);
  if (!s->net_host) {
    if (sbx__net_setup_loopback(&err) < 0)
      child_fail(sync_w, &err);
    /* root inside owns no capability over this netns: let it bind low ports anyway */
    cleanup_close int fd =
        open("/proc/sys/net/ipv4/ip_unprivileged_port_start", O_WRONLY | O_CLOEXEC);
    if (fd >= 0)
      (void) !write(fd, "0", 1);
  }
  if (sbx__confine_rlimits(&err) < 0)
    child_fail(sync_w, &err);
  /* a cgroup namespace rooted at our cgroup (the sandbox sees it as "/"), then, last, the user
   * namespace (rootless: we are in it already) */
  if (unshare(CLONE_NEWCGROUP) < 0) {
    sbx__make_error(&err, errno, SBX_E_INTERNAL, "unshare the cgroup namespace");
    child_fail(sync_w, &err);
  }
  if (!s->rootless)
    enter_userns(s, owner, sync_w, sync_r);
  else if (s->net_egress)
    enter_nested_userns(s, sync_w, sync_r);
  if (sbx__confine(&err) < 0)
    child_fail(sync_w, &err);
  c = 'R';
  if (write(sync_w, &c, 1) != 1)
    _exit(1);
  close(sync_w);
  close(sync_r);
  struct sbx_agent_opts opts = {.listen_fd = listen_fd,
                                .lease_fd = lease_fd,
                                .idle_timeout_s = s->idle_timeout_s,
                                .cmd_nofile = SBX_NOFILE_CMD,
                                .cmd_confine = s->guard_foreign ? sbx__confine_foreign_guard
                                               : s->guard_setid ? sbx__confine_setid_guard
                                                                : NULL,
                                .guard_ids = s->guard_setid || s->guard_foreign,
                                .guard_nobody = s->guard_foreign};
  _exit(sbx__agent_serve(&opts));
}

static int write_map(pid_t pid, const char *file, uint32_t base, sbx_error_t *err)
{
  char path[64], map[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, file);
  int n = snprintf(map, sizeof map, "0 %u %u\n", base, SBX_UID_COUNT);
  cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, map, (size_t) n) != n)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "write %s", path);
  return 0;
}

static int launch_in(struct sbx_launch_spec *s, pid_t *out_pid, struct sbx_cgroup *cg,
                     sbx_error_t *err);

/* The owner of each host tree and a user namespace idmapping it to that owner (one per
 * distinct owner; trees sharing one get a dup). The child checks each tree it opens still has
 * that owner: the namespace grants the sandbox's root exactly that owner's files. */
static void owners_make(struct sbx_launch_spec *s, struct sbx_idmap_helper *helpers)
{
  size_t n = s->n_mounts + 1, made = 0;
  s->owners = xmalloc(n * sizeof *s->owners);
  for (size_t i = 0; i < n; i++) {
    struct sbx_tree_owner *o = &s->owners[i];
    const char *host = i == 0 ? s->user_data : s->mounts[i - 1].host;
    struct stat st;
    o->userns = -1;
    if (host[0] == '\0' || stat(host, &st) < 0)
      continue; /* the child names the error */
    o->uid = st.st_uid;
    o->gid = st.st_gid;
    for (size_t k = 0; k < i && o->userns < 0; k++)
      if (s->owners[k].userns >= 0 && s->owners[k].uid == o->uid && s->owners[k].gid == o->gid)
        o->userns = fcntl(s->owners[k].userns, F_DUPFD_CLOEXEC, 3);
    if (o->userns < 0)
      o->userns = sbx__ids_idmap_userns(s->uid_base, o->uid, o->gid, s->map_host_root,
                                        &helpers[made++], NULL);
  }
}

static void owners_free(struct sbx_launch_spec *s, struct sbx_idmap_helper *helpers)
{
  for (size_t i = 0; s->owners && i <= s->n_mounts; i++) {
    if (s->owners[i].userns >= 0)
      close(s->owners[i].userns);     /* the child had its copy */
    sbx__ids_idmap_reap(&helpers[i]); /* long dead by now: no wait */
  }
  free(s->owners);
  s->owners = NULL;
}

static int launch(struct sbx_launch_spec *s, pid_t *out_pid, struct sbx_cgroup *cg,
                  sbx_error_t *err)
{
  if (geteuid() != 0) {
    /* rootless (ids.c): root inside is the user, plus a subordinate range of its own if
     * /etc/subuid gives the user one; no idmapped mounts (the files are the user's anyway) */
    s->rootless = true;
    s->owners = NULL;
    s->layers_fd = -1; /* an image's layers carry the store slice's ids already (ids.c) */
    cleanup_close int sub_fd = sbx__ids_rootless(s, err);
    if (sub_fd < 0 && sub_fd != SBX_IDS_SINGLE && sub_fd != SBX_IDS_SHARED)
      return -1;
    return launch_in(s, out_pid, cg, err);
  }
  /* The sandbox's own host ids: the slot's lock goes to its PID 1 (inherited, close-on-exec),
   * ours is dropped when we exit. Without idmapping (no range dir, no user namespace for it)
   * the shared range. */
  cleanup_close int range_fd = sbx__ids_claim(&s->uid_base, NULL);
  s->owners = NULL;
  if (range_fd < 0)
    s->uid_base = SBX_UID_BASE;
  cleanup_free struct sbx_idmap_helper *helpers = xzalloc((s->n_mounts + 1) * sizeof *helpers);
  if (range_fd >= 0 && (s->user_data[0] != '\0' || s->n_mounts > 0))
    owners_make(s, helpers);
  /* an image's layers are seen through the range's ids: made here, where a helper sharing our
   * memory costs a clone, not by the sandbox's PID 1 (a fork and a wait) */
  struct sbx_idmap_helper lhelper = {0};
  s->layers_fd = -1;
  int r = -1;
  if (!s->layers || (s->layers_fd = sbx__ids_userns_map(0, s->uid_base, &lhelper, err)) >= 0)
    r = launch_in(s, out_pid, cg, err);
  owners_free(s, helpers);
  if (s->layers_fd >= 0)
    close(s->layers_fd); /* the child had its copy */
  sbx__ids_idmap_reap(&lhelper);
  return r;
}

static int launch_in(struct sbx_launch_spec *s, pid_t *out_pid, struct sbx_cgroup *cg,
                     sbx_error_t *err)
{
  cleanup_close int dirfd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "open state dir `%s`", s->state_dir);
  if (mkdirat(dirfd, "root", 0700) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create `%s/root`", s->state_dir);
  cleanup_close int listen_fd = bind_ctl_socket(dirfd, err);
  if (listen_fd < 0)
    return -1;
  cleanup_close int lease_fd = openat(dirfd, "lease", O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (lease_fd < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "open the lease file");
  int to_parent[2], to_child[2];
  if (pipe2(to_parent, O_CLOEXEC) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create a pipe");
  if (pipe2(to_child, O_CLOEXEC) < 0) {
    close(to_parent[0]);
    close(to_parent[1]);
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create a pipe");
  }
  unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
                        (s->net_host ? 0 : CLONE_NEWNET) | (s->rootless ? CLONE_NEWUSER : 0) |
                        SIGCHLD;
  pid_t pid = (pid_t) syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
  if (pid == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    close(dirfd);
    child_main(s, to_parent[1], to_child[0], listen_fd, lease_fd);
  }
  int saved = errno;
  close(to_parent[1]);
  close(to_child[0]);
  cleanup_close int rd = to_parent[0];
  cleanup_close int wr = to_child[1];
  if (pid < 0)
    return sbx__make_error(err, saved, SBX_E_INTERNAL, "clone the sandbox%s",
                           s->rootless ? " (as an ordinary user: run `sbx doctor`)" : "");
  if (s->net_egress) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int) pid);
    s->netns_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->netns_fd < 0) {
      sbx__make_error(err, errno, SBX_E_INTERNAL, "open the sandbox's network namespace");
      goto fail_child;
    }
  }
  if (s->rootless) {
    if (sbx__ids_map_rootless(pid, s, err) < 0)
      goto fail_child;
    if (write(wr, "M", 1) != 1) {
      sbx__make_error(err, errno, SBX_E_INTERNAL, "signal the sandbox");
      goto fail_child;
    }
  }
  /* The cgroup is made while the child builds its root filesystem (two CPUs, two jobs); the
   * child only starts processes after it has been moved in. */
  if (sbx__cgroup_create(s, pid, cg, err) < 0)
    goto fail_child;
  {
    /* one write: the pipe delivers it whole (under PIPE_BUF) */
    cleanup_free char *paths = sbx__cgroup_format(cg);
    cleanup_free char *msg = xasprintf("Cowner=%u\n%s", SBX_OWNER_BASE + (unsigned) pid, paths);
    if (strlen(msg) >= 4096) {
      sbx__make_error(err, ENAMETOOLONG, SBX_E_INTERNAL, "cgroup paths too long");
      goto fail_child_cg;
    }
    (void) !write(wr, msg, strlen(msg)); /* if the child died, its message is read below */
  }
  char buf[1024];
  ssize_t n = TEMP_FAILURE_RETRY(read(rd, buf, sizeof buf - 1));
  unsigned base = 0;
  if (n > 1 && buf[0] == 'M') {
    buf[n] = '\0';
    if (sscanf(buf + 1, "%u", &base) != 1 || (base != SBX_UID_BASE && base != s->uid_base)) {
      sbx__make_error(err, EPROTO, SBX_E_INTERNAL, "the sandbox asked for ids it was not given");
      goto fail_child_cg;
    }
    s->uid_base = base;
    if (write_map(pid, "uid_map", base, err) < 0 || write_map(pid, "gid_map", base, err) < 0)
      goto fail_child_cg;
    if (write(wr, "M", 1) != 1) {
      sbx__make_error(err, errno, SBX_E_INTERNAL, "signal the sandbox");
      goto fail_child_cg;
    }
    n = TEMP_FAILURE_RETRY(read(rd, buf, sizeof buf - 1));
  }
  if (n == 1 && buf[0] == 'N' && s->rootless && s->net_egress) {
    if (sbx__ids_map_nested(pid, s->uid_count, err) < 0)
      goto fail_child_cg;
    if (write(wr, "M", 1) != 1) {
      sbx__make_error(err, errno, SBX_E_INTERNAL, "signal the sandbox");
      goto fail_child_cg;
    }
    n = TEMP_FAILURE_RETRY(read(rd, buf, sizeof buf - 1));
  }
  if (n == 1 && buf[0] == 'R') {
    *out_pid = pid;
    return 0;
  }
  int kind = 0, status = 0, at = 0;
  if (n > 1 && buf[0] == 'E') {
    buf[n] = '\0';
    if (sscanf(buf + 1, "%d %d %n", &kind, &status, &at) < 2 || at <= 0 || kind < 1 ||
        kind >= SBX_E_KIND_MAX)
      kind = SBX_E_INTERNAL, status = 0, at = 0;
    sbx__error_set(err, status, kind, buf + 1 + at);
  } else {
    sbx__make_error(err, 0, SBX_E_INTERNAL, "the sandbox died during setup");
  }
fail_child_cg:
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  sbx__cgroup_destroy(cg, 1000, NULL);
  return -1;
fail_child:
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* SBX_LAUNCH_RECORD in the state folder: "pid=N\nstart=N\n" and the cgroup paths. */
static void write_launch_record(const struct sbx_launch_spec *s, pid_t pid, const char *cgroups)
{
  cleanup_close int dirfd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  cleanup_free char *text =
      xasprintf("pid=%d\nstart=%llu\nuids=%u\n%s", (int) pid,
                (unsigned long long) sbx__proc_start_time((long) pid), s->uid_base, cgroups);
  if (dirfd >= 0)
    sbx__write_file_at(dirfd, SBX_LAUNCH_RECORD, text, strlen(text), 0600, false);
}

int sbx__launch_main(int fd)
{
  signal(SIGPIPE, SIG_IGN);
  /* Our clones, and the sandbox's user namespace (which records the limit of its creator),
   * must not depend on how many processes our caller's uid has on the host (RLIMIT_NPROC
   * counts them all): unlimited as root, the hard limit otherwise. The sandbox's processes are
   * bounded by its cgroup (pids.max) and get their own limits (confine.c). */
  struct rlimit nproc = {RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_NPROC, &nproc) < 0 && getrlimit(RLIMIT_NPROC, &nproc) == 0) {
    nproc.rlim_cur = nproc.rlim_max;
    setrlimit(RLIMIT_NPROC, &nproc);
  }
  sbx_frame_hdr_t hdr;
  cleanup_free char *payload = NULL;
  if (sbx__frame_recv(fd, &hdr, &payload, SBX_PROTO_MAX_PAYLOAD) < 0 || hdr.type != SBX_MSG_LAUNCH)
    return 2;
  struct sbx_launch_spec spec;
  if (sbx__launch_spec_decode(payload, hdr.len, &spec) < 0) {
    sbx__frame_send_error(fd, hdr.req, SBX_E_INTERNAL, 0, "malformed launch spec");
    return 2;
  }
  spec.netns_fd = -1;
  sbx_error_t err = NULL;
  struct sbx_cgroup cg = {0};
  pid_t pid = 0;
  int ret = 0;
  /* The kernel's features are probed here, in the process that uses them (a caller under
   * valgrind sees ENOSYS for calls valgrind does not know): an old kernel, or a seccomp filter
   * of the caller's, refuses naming the missing call before anything is made. */
  int ok = sbx__kernel_check(&err);
  for (size_t i = 0; ok == 0 && i < spec.n_mounts; i++)
    if (spec.mounts[i].read_only)
      ok = sbx__kernel_require(SBX_KF_MOUNT_SETATTR, "a read_only mount", &err);
  if (ok < 0 || launch(&spec, &pid, &cg, &err) < 0) {
    sbx__frame_send_error(fd, hdr.req, err->kind, err->status, err->msg);
    sbx_error_release(&err);
    ret = 1;
  } else {
    cleanup_free char *cgs = sbx__cgroup_format(&cg);
    /* The record first: a creator killed after our report but before it wrote the pid into
     * its metadata leaves a sandbox that only this file names (its destroy reads it). */
    write_launch_record(&spec, pid, cgs);
    sbx_tlv_writer_t w = {0};
    sbx__tlv_put_u64(&w, SBX_T_PID, (uint64_t) pid);
    sbx__tlv_put_u64(&w, SBX_T_UID, spec.uid_base);
    sbx__tlv_put_str(&w, SBX_T_TEXT, cgs);
    int sent = spec.netns_fd >= 0 ? sbx__frame_send_fd(fd, SBX_MSG_OK, hdr.req, w.buf.data,
                                                       w.buf.len, spec.netns_fd)
                                  : sbx__frame_send_tlv(fd, SBX_MSG_OK, hdr.req, &w);
    if (sent < 0) {
      /* the creator is gone before learning of the sandbox: nobody would ever use it */
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      sbx__cgroup_destroy(&cg, 1000, NULL);
      ret = 1;
    }
    sbx__tlv_free(&w);
  }
  sbx__cgroup_free(&cg);
  sbx__launch_spec_free(&spec);
  return ret;
}
