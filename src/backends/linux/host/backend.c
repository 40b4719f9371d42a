/* The linux backend, host side: create runs the launcher (`sbx-init launch`, a fresh
 * single-threaded process, so namespaces can be made whatever threads the caller has), destroy
 * kills the sandbox's PID 1 (the kernel then kills everything in its pid namespace) and removes
 * its cgroup. Contract operations go to sbx-init (agent_client.c). */
#include "agent_client.h"
#include "linux.h"
#include "log.h"
#include "proto.h"
#include "../../../lib/image/image.h"
#include "../../../lib/image/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

extern char **environ;

/* The launcher resolves every mount source without following symlinks (a sandbox that can write
 * next to a source could swap a component for one). The configuration's sources are the
 * operator's: their symlinks are resolved here, once (canon keeps the strings). Sources given by
 * sbx_create (sbxd's volumes) are symlink-free by contract and go as they are. */
static void fill_spec(struct sbx_instance *in, const char *user_data, struct sbx_launch_spec *s,
                      sbx_strv_t *canon)
{
  const struct sbx_config *c = in->cfg;
  memset(s, 0, sizeof *s);
  s->id = in->meta.id;
  s->state_dir = in->dir;
  s->user_data = (char *) user_data;
  s->image = in->meta.image ? in->meta.image : c->image ? c->image : (char *) "host";
  s->memory_bytes = in->meta.memory_bytes ? in->meta.memory_bytes : c->memory_mib << 20;
  double cpus = in->meta.cpus > 0 ? in->meta.cpus : c->cpus;
  s->cpu_millis = (uint64_t) (cpus * 1000.0 + 0.5);
  s->pids = c->pids;
  s->net_host = c->network && strcmp(c->network, "host") == 0;
  s->net_egress = sbx__linux_egress(c);
  s->tmp_bytes = c->tmp_size_mib << 20;
  s->home_bytes = c->home_size_mib << 20;
  /* a managed sandbox's lifetime belongs to its front-end, not to idleness */
  s->idle_timeout_s = in->meta.managed ? 0 : c->idle_timeout;
  const char *mgr = c->cgroup_manager ? c->cgroup_manager : "auto";
  s->cgroup_manager = strcmp(mgr, "none") == 0       ? SBX_CGM_NONE
                      : strcmp(mgr, "cgroupfs") == 0 ? SBX_CGM_CGROUPFS
                      : strcmp(mgr, "systemd") == 0  ? SBX_CGM_SYSTEMD
                                                     : SBX_CGM_AUTO;
  s->cgroup_required = c->cgroup_required;
  s->map_host_root = c->map_host_root;
  s->cgroup_slice = c->cgroup_slice;
  /* rootless: the launcher (static, without NSS) finds the user's /etc/subuid entry by it */
  struct passwd pwd, *pw = NULL;
  char pwbuf[4096];
  if (geteuid() != 0 && getpwuid_r(geteuid(), &pwd, pwbuf, sizeof pwbuf, &pw) == 0 && pw)
    s->user_name = xstrdup(pw->pw_name);
  s->n_mounts = c->n_mounts + in->n_extra_mounts;
  s->mounts = xzalloc((s->n_mounts + 1) * sizeof *s->mounts);
  for (size_t i = 0; i < s->n_mounts; i++) {
    const struct sbx_mount *m =
        i < c->n_mounts ? &c->mounts[i] : &in->extra_mounts[i - c->n_mounts];
    char *host = m->host_path;
    if (i < c->n_mounts) {
      char *real = realpath(m->host_path, NULL);
      if (real) {
        sbx__strv_push_owned(canon, real);
        host = real;
      }
    }
    s->mounts[i] = (struct sbx_launch_mount){host, m->container_path, m->read_only};
  }
}

/* The image's Env goes before the sandbox's own (sbx_create's), and a key the configuration
 * sets is the configuration's. */
static void image_env(struct sbx_instance *in, const sbx_strv_t *image)
{
  sbx_strv_t env = {0};
  for (size_t i = 0; i < image->n; i++) {
    size_t k = strcspn(image->v[i], "=");
    bool configured = false;
    for (size_t c = 0; c < in->cfg->n_environment; c++)
      configured |= strlen(in->cfg->environment[c].key) == k &&
                    strncmp(in->cfg->environment[c].key, image->v[i], k) == 0;
    if (!configured)
      sbx__strv_push(&env, image->v[i]);
  }
  for (size_t i = 0; i < in->meta.env.n; i++)
    sbx__strv_push(&env, in->meta.env.v[i]);
  sbx__strv_free(&in->meta.env);
  in->meta.env = env;
}

/* the store of in's home ($home/spare is the spare pool's: the store is $home's) */
static char *store_home(const struct sbx_instance *in)
{
  char *home = xstrdup(in->home);
  if (in->provider == NULL && sbx__str_has_suffix(home, "/spare"))
    home[strlen(home) - 6] = '\0';
  return home;
}

/* The lowest layer of every image: the mount points a sandbox needs (/proc, /dev, /sys, /tmp,
 * /run, /root, /mnt/user-data, /etc) as directories, so an image without them needs none made
 * in its upper (each costs a directory to create and, on destroy, to remove). Made once per
 * store ($home/images/skeleton, outside what prune sweeps), atomically. NULL if it cannot be. */
static char *skeleton_layer(const char *home)
{
  cleanup_free char *store = sbx__image_dir(home);
  char *skel = xasprintf("%s/skeleton", store);
  struct stat st;
  if (stat(skel, &st) == 0)
    return skel;
  char name[] = "skeleton-XXXXXXXX";
  sbx__random_hex(name + 9, 8);
  cleanup_free char *tmp = xasprintf("%s/tmp/%s", store, name);
  static const struct {
    const char *name;
    mode_t mode;
  } dirs[] = {{"", 0755},     {"/etc", 0755},          {"/proc", 0555}, {"/dev", 0755},
              {"/sys", 0555}, {"/tmp", 01777},         {"/run", 0755},  {"/root", 0700},
              {"/mnt", 0755}, {"/mnt/user-data", 0755}};
  bool ok = true;
  for (size_t i = 0; ok && i < ARRAY_SIZE(dirs); i++) {
    cleanup_free char *d = xasprintf("%s%s", tmp, dirs[i].name);
    ok = mkdir(d, dirs[i].mode) == 0 && chmod(d, dirs[i].mode) == 0;
  }
  if (ok && rename(tmp, skel) < 0 && errno != EEXIST && errno != ENOTEMPTY)
    ok = false;
  cleanup_free char *tdir = xasprintf("%s/tmp", store);
  cleanup_close int tfd = open(tdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tfd >= 0)
    sbx__rm_rf_at(tfd, name);
  if (!ok || stat(skel, &st) < 0) {
    free(skel);
    return NULL;
  }
  return skel;
}

/* An image other than `host`: its layers for the launcher, the list of them in the state folder
 * (prune keeps what a sandbox has mounted), and its Env under the configured environment. */
static int image_layers(struct sbx_instance *in, struct sbx_launch_spec *s, sbx_error_t *err)
{
  if (strcmp(s->image, "host") == 0)
    return 0;
  cleanup_free char *home = store_home(in);
  struct sbx_image_rootfs r;
  /* a reference not in the store yet is pulled first (docs/images.md, "Pull") */
  struct sbx_pull_opts po = {0};
  sbx__pull_opts_from_config(in->cfg, &po);
  if (sbx__kernel_require_ovl(s->image, geteuid() != 0, err) < 0 ||
      sbx__image_ensure(home, s->image, &po, err) < 0 ||
      sbx__image_resolve(home, s->image, &r, err) < 0)
    return -1;
  sbx_buf_t layers = {0}, ids = {0};
  for (size_t i = 0; i < r.layers.n; i++) {
    sbx__buf_printf(&layers, "%s%s", i ? "\n" : "", r.layers.v[i]);
    sbx__buf_printf(&ids, "%s\n", r.layer_ids.v[i]);
  }
  cleanup_free char *skel = skeleton_layer(home);
  if (skel)
    sbx__buf_printf(&layers, "\n%s", skel);
  cleanup_free char *list = xasprintf("%s/" SBX_IMAGE_LAYERS_FILE, in->dir);
  int ret = 0;
  if (r.layers.n == 0)
    ret = sbx__make_error(err, 0, SBX_E_INVALID, "image `%s` has no layers", s->image);
  else if (sbx__write_file_at(AT_FDCWD, list, ids.data, ids.len, 0644, false) < 0)
    ret = sbx__make_error(err, errno, SBX_E_IO, "write `%s`", list);
  if (ret == 0 && in->cfg->disk_mib) {
    /* the upper on a capped image, for a new sandbox (or one whose upper is there already): one
     * made without the cap keeps its upper where it is */
    cleanup_free char *img = xasprintf("%s/" SBX_DISK_IMAGE_FILE, in->dir);
    cleanup_free char *upper = xasprintf("%s/upper", in->dir);
    struct stat st;
    if ((lstat(img, &st) == 0 || lstat(upper, &st) < 0) &&
        sbx__disk_image(img, in->cfg->disk_mib << 20, err) < 0)
      ret = -1;
  }
  if (ret == 0) {
    image_env(in, &r.env);
    s->layers = sbx__buf_steal(&layers);
  }
  sbx__buf_free(&layers);
  sbx__buf_free(&ids);
  sbx__image_rootfs_free(&r);
  return ret;
}

/* What an ordinary user's sandbox cannot have, one line each (docs/hosts.md, "Rootless"). */
static int linux_precheck(const struct sbx_instance *in, sbx_error_t *err)
{
  if (geteuid() == 0)
    return 0;
  const struct sbx_config *c = in->cfg;
  const char *what = c->user_data_size_mib ? "sandbox.user_data_size_mib (a loop-mounted quota)"
                     : c->disk_mib         ? "sandbox.disk_mib (a loop-mounted disk)"
                                           : NULL;
  if (what == NULL)
    return 0;
  return sbx__make_error(err, EPERM, SBX_E_UNSUPPORTED,
                         "%s needs root: rootless sandboxes cannot have it (run sbx as root, or "
                         "drop the setting; `sbx doctor` lists what works rootless)",
                         what);
}

static int linux_create(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  if (in->cfg->user_data_size_mib && user_data[0] != '\0' &&
      sbx__user_data_image(user_data, in->cfg->user_data_size_mib << 20, err) < 0)
    return -1;
  struct sbx_launch_spec spec;
  sbx_strv_t canon = {0};
  fill_spec(in, user_data, &spec, &canon);
  if (image_layers(in, &spec, err) < 0) {
    free(spec.mounts);
    free(spec.user_name);
    sbx__strv_free(&canon);
    return -1;
  }
  sbx_buf_t payload = {0};
  sbx__launch_spec_encode(&spec, &payload);
  /* a writable folder of someone else's than 100000: the one a fallback to the shared ids
   * (no idmapping there) leaves unwritable by root inside, which the caller should hear of */
  cleanup_free char *foreign = NULL;
  for (size_t i = 0; i <= spec.n_mounts && foreign == NULL; i++) {
    const char *host = i == 0 ? user_data : spec.mounts[i - 1].host;
    struct stat st;
    if (host[0] != '\0' && (i == 0 || !spec.mounts[i - 1].read_only) && stat(host, &st) == 0 &&
        (st.st_uid != SBX_UID_BASE || st.st_gid != SBX_UID_BASE))
      foreign = xasprintf("`%s` (%u:%u)", host, (unsigned) st.st_uid, (unsigned) st.st_gid);
  }
  free(spec.mounts);
  free(spec.layers);
  free(spec.user_name);
  sbx__strv_free(&canon);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    sbx__buf_free(&payload);
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "socketpair");
  }
  cleanup_close int ours = sv[0];
  cleanup_free char *init = sbx__init_path();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3); /* dup2 clears close-on-exec */
  /* The sandbox outlives the caller: it must not hold the caller's stdio (a pipe a parent
   * waits on would never see EOF). Failures travel over the socket instead. */
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&fa, 0, 1);
  posix_spawn_file_actions_adddup2(&fa, 0, 2);
  /* Nor any other descriptor of the caller (one not marked close-on-exec): PID 1 would hold it
   * for the sandbox's whole life, and one naming a host directory is a way out of it. */
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  char name[] = "sbx-init", verb[] = "launch", fdarg[] = "3";
  char *argv[] = {name, verb, fdarg, NULL};
  pid_t launcher;
  /* RLIMIT_NPROC counts every process of our real uid on the host, not ours: a caller with a
   * small soft limit (a unit's LimitNPROC=, a shell's ulimit -u) on a busy host could not even
   * start the launcher. The soft limit is raised to the hard one for the spawn (the launcher
   * inherits it and lifts it further as root); the sandbox's processes are bounded by its
   * cgroup's pids.max, not by its caller's limit. */
  struct rlimit nproc;
  bool raise_nproc = getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur < nproc.rlim_max;
  if (raise_nproc)
    setrlimit(RLIMIT_NPROC, &(struct rlimit){nproc.rlim_max, nproc.rlim_max});
  int r = posix_spawn(&launcher, init, &fa, NULL, argv, environ);
  if (raise_nproc)
    setrlimit(RLIMIT_NPROC, &nproc);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (r != 0) {
    sbx__buf_free(&payload);
    return sbx__make_error(err, r, SBX_E_INTERNAL, "run `%s`", init);
  }
  struct timeval tv = {.tv_sec = 60};
  setsockopt(ours, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  r = sbx__frame_send(ours, SBX_MSG_LAUNCH, 1, payload.data, payload.len);
  sbx__buf_free(&payload);
  sbx_frame_hdr_t hdr = {0};
  cleanup_free char *reply = NULL;
  /* egress: the sandbox's network namespace comes with the reply (linux.h says why) */
  cleanup_close int netns = -1;
  if (r == 0)
    r = sbx__frame_recv_fd(ours, &hdr, &reply, SBX_PROTO_MAX_PAYLOAD, &netns);
  int saved = errno;
  int status = 0;
  if (r < 0)
    kill(launcher, SIGKILL);
  TEMP_FAILURE_RETRY(waitpid(launcher, &status, 0));
  if (r < 0)
    return sbx__make_error(err, saved, SBX_E_INTERNAL, "launcher `%s` failed (exit status %d)",
                           init, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (hdr.type == SBX_MSG_ERR)
    return sbx__error_from_frame(reply, hdr.len, err);
  uint64_t pid = 0;
  char *cgroups = NULL;
  if (hdr.type != SBX_MSG_OK || sbx__tlv_get_u64(reply, hdr.len, SBX_T_PID, 0, &pid) <= 0 ||
      sbx__tlv_get_str(reply, hdr.len, SBX_T_TEXT, &cgroups) < 0)
    return sbx__make_error(err, EPROTO, SBX_E_INTERNAL, "launcher sent a malformed reply");
  uint64_t uids = 0;
  if (sbx__tlv_get_u64(reply, hdr.len, SBX_T_UID, 0, &uids) > 0)
    in->meta.uid_base = (uint32_t) uids;
  if (uids == SBX_UID_BASE && foreign)
    sbx__log(SBX_LOG_WARNING,
             "sandbox %s runs under the shared host ids %u.. (its folders could not be idmapped: "
             "see `sbx doctor`): %s is not its owner's inside (root there may not write), and what "
             "the sandbox writes in its folders belongs to uid %u on the host, not to their owners",
             in->meta.id, SBX_UID_BASE, foreign, SBX_UID_BASE);
  in->meta.pid = (long) pid;
  in->meta.pid_start = sbx__proc_start_time((long) pid);
  if (sbx__str_has_prefix(cgroups, "none="))
    sbx__log(SBX_LOG_WARNING,
             "sandbox %s runs WITHOUT a cgroup: no memory, process or CPU limit is enforced (%.*s)",
             in->meta.id, (int) strcspn(cgroups + 5, "\n"), cgroups + 5);
  free(in->meta.cgroups);
  in->meta.cgroups = cgroups;
  /* the caller destroys a sandbox whose create failed (its enforcer with it) */
  if (sbx__linux_egress(in->cfg) && sbx__linux_net_start(in, netns, err) < 0)
    return -1;
  return 0;
}

/* A spare of an image: the adopting sandbox's commands get the image's Env too. */
static int linux_adopt(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  if (in->meta.image && strcmp(in->meta.image, "host") != 0) {
    cleanup_free char *home = store_home(in);
    struct sbx_image_rootfs r;
    if (sbx__image_resolve(home, in->meta.image, &r, err) < 0)
      return -1;
    image_env(in, &r.env);
    sbx__image_rootfs_free(&r);
  }
  if (sbx__linux_adopt(in, user_data, err) < 0)
    return -1;
  return sbx__linux_egress(in->cfg) ? sbx__linux_net_adopt(in, err) : 0;
}

static bool linux_alive(struct sbx_instance *in)
{
  return in->meta.pid > 0 && in->meta.pid_start != 0 &&
         sbx__proc_start_time(in->meta.pid) == in->meta.pid_start;
}

/* A sandbox whose creator died between the launch and its metadata: take the init's identity
 * and cgroups from the launcher's record. */
static void load_launch_record(struct sbx_instance *in)
{
  cleanup_free char *path = xasprintf("%s/" SBX_LAUNCH_RECORD, in->dir);
  cleanup_free char *text = NULL;
  if (sbx__read_file_at(AT_FDCWD, path, 8192, &text, NULL) < 0)
    return;
  long long pid = 0;
  unsigned long long start = 0;
  unsigned uids = 0;
  if (sscanf(text, "pid=%lld\nstart=%llu\nuids=%u", &pid, &start, &uids) < 2 || pid <= 0 ||
      start == 0)
    return;
  in->meta.uid_base = uids;
  in->meta.pid = (long) pid;
  in->meta.pid_start = start;
  if (in->meta.cgroups == NULL)
    in->meta.cgroups = steal_pointer(&text);
}

static int linux_destroy(struct sbx_instance *in, sbx_error_t *err)
{
  if (in->meta.pid <= 0)
    load_launch_record(in);
  struct sbx_cgroup cg = {0};
  if (in->meta.cgroups)
    sbx__cgroup_parse(in->meta.cgroups, &cg);
  if (linux_alive(in)) {
    int pidfd = (int) syscall(SYS_pidfd_open, (pid_t) in->meta.pid, 0);
    /* pid reuse between the check and pidfd_open: verify again through the pidfd's pid */
    if (pidfd >= 0 && sbx__proc_start_time(in->meta.pid) == in->meta.pid_start) {
      syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
      /* a frozen task dies only once thawed (paused, or frozen by hand) */
      if (in->meta.cgroups)
        sbx__cgroup_freeze(&cg, false, NULL);
      struct pollfd pfd = {pidfd, POLLIN, 0};
      poll(&pfd, 1, 5000);
    } else if (pidfd < 0 && errno != ESRCH) {
      /* No pidfd (out of descriptors, or a tracer such as valgrind that does not know the
       * call): a plain kill, checked against the start time just before (a pid reused in
       * that window is the price, and only then), then wait for the start time to change. */
      if (sbx__proc_start_time(in->meta.pid) == in->meta.pid_start)
        kill((pid_t) in->meta.pid, SIGKILL);
      if (in->meta.cgroups)
        sbx__cgroup_freeze(&cg, false, NULL);
      for (uint64_t until = sbx__now_ms() + 5000; linux_alive(in) && sbx__now_ms() < until;)
        usleep(1000);
    }
    if (pidfd >= 0)
      close(pidfd);
    if (linux_alive(in)) {
      sbx__cgroup_free(&cg);
      return sbx__make_error(err, EBUSY, SBX_E_BUSY, "sandbox %s is still running (pid %lld)",
                             in->meta.id, (long long) in->meta.pid);
    }
  }
  /* it leaves with the init on its own; this is for one that did not */
  sbx__linux_net_stop(in->dir);
  int r = 0;
  if (in->meta.cgroups)
    r = sbx__cgroup_destroy(&cg, 3000, err);
  sbx__cgroup_free(&cg);
  return r < 0 ? -1 : 0;
}

static int linux_health(struct sbx_instance *in, int timeout_s, sbx_error_t *err)
{
  sbx_error_t e = NULL;
  if (sbx__agent_health(in->dir, timeout_s * 1000, &e) == 0)
    return 0;
  /* an image may have no `true` (nor a shell): its init answering is the check then */
  if (in->meta.image && strcmp(in->meta.image, "host") != 0 && strstr(e->msg, "exited with 127")) {
    sbx_error_release(&e);
    return sbx__agent_ping(in->dir, timeout_s * 1000, err);
  }
  if (err)
    *err = e;
  else
    sbx_error_release(&e);
  return -1;
}

static int linux_metrics(struct sbx_instance *in, struct sbx_metrics *m, sbx_error_t *err)
{
  if (in->meta.cgroups == NULL)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "sandbox %s has no cgroup", in->meta.id);
  struct sbx_cgroup cg;
  sbx__cgroup_parse(in->meta.cgroups, &cg);
  int r = sbx__cgroup_metrics(&cg, m);
  sbx__cgroup_free(&cg);
  if (r < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "read the cgroup of sandbox %s", in->meta.id);
  return 0;
}

static int linux_ping(struct sbx_instance *in, sbx_error_t *err)
{
  return sbx__agent_ping(in->dir, 2000, err);
}

static void linux_sweep(void)
{
  sbx__cgroup_sweep(60);
}

static int64_t linux_memory(struct sbx_instance *in)
{
  if (in->meta.cgroups == NULL)
    return -1;
  struct sbx_cgroup cg;
  sbx__cgroup_parse(in->meta.cgroups, &cg);
  int64_t m = sbx__cgroup_memory(&cg);
  sbx__cgroup_free(&cg);
  return m;
}

struct proc_entry {
  long pid, ppid;
  char state;
};

/* Every process on the host (pid, parent, state) from /proc/PID/stat, which needs no privilege
 * over the processes (a sandbox's init is not dumpable). */
static size_t proc_table(struct proc_entry **out)
{
  *out = NULL;
  cleanup_dir DIR *d = opendir("/proc");
  if (d == NULL)
    return 0;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9')
      continue;
    cleanup_free char *path = xasprintf("/proc/%s/stat", de->d_name);
    cleanup_free char *text = NULL;
    if (sbx__read_file_at(AT_FDCWD, path, 4096, &text, NULL) < 0)
      continue;
    char *rp = strrchr(text, ')');
    char st;
    long ppid;
    if (rp == NULL || sscanf(rp + 1, " %c %ld", &st, &ppid) != 2)
      continue;
    if (n == cap)
      *out = xreallocarray(*out, cap = cap ? 2 * cap : 512, sizeof **out);
    (*out)[n++] = (struct proc_entry){strtol(de->d_name, NULL, 10), ppid, st};
  }
  return n;
}

/* The sandbox's processes but its init: the init's descendants (an orphan inside is
 * re-parented to the init, never out of the sandbox). *states gets each one's state letter. */
static size_t descendants(long init, long **pids, char **states)
{
  struct proc_entry *t;
  size_t n = proc_table(&t), k = 0;
  *pids = xreallocarray(NULL, n + 1, sizeof **pids);
  *states = xreallocarray(NULL, n + 1, 1);
  (*pids)[0] = init;
  (*states)[k++] = 'S';
  /* breadth first over a flat table: each process has one parent, so it is found once */
  for (size_t i = 0; i < k; i++)
    for (size_t j = 0; j < n && k <= n; j++)
      if (t[j].ppid == (*pids)[i] && t[j].pid != init) {
        (*pids)[k] = t[j].pid;
        (*states)[k++] = t[j].state;
      }
  /* drop the init itself (index 0) */
  for (size_t i = 0; i + 1 < k; i++) {
    (*pids)[i] = (*pids)[i + 1];
    (*states)[i] = (*states)[i + 1];
  }
  free(t);
  return k - 1;
}

static int linux_kill(struct sbx_instance *in, int signo, sbx_error_t *err)
{
  if (!linux_alive(in))
    return sbx__make_error(err, ESRCH, SBX_E_NOT_FOUND, "sandbox %s: its init is gone",
                           in->meta.id);
  /* a few passes: a process forked between the listing and the signal gets it on the next */
  size_t sent = 0;
  for (int pass = 0; pass < (signo == SIGKILL ? 20 : 1); pass++) {
    cleanup_free long *pids = NULL;
    cleanup_free char *states = NULL;
    size_t n = descendants(in->meta.pid, &pids, &states);
    if (n == 0)
      break;
    for (size_t i = 0; i < n; i++)
      if (states[i] != 'Z' && kill((pid_t) pids[i], signo) == 0)
        sent++;
    if (signo == SIGKILL)
      usleep(5000);
  }
  return (int) (sent > INT_MAX ? INT_MAX : sent);
}

/* Pause without a freezer (rootless without a delegated cgroup): SIGSTOP to the init first
 * (it then starts nothing), then to its descendants until a pass finds none running (a fork
 * between two passes is caught by the next). What it stopped is listed in STATE/stopped, and
 * the thaw continues exactly those (a process stopped before, by a job control ^Z, stays
 * stopped). A stopped process's parent may notice (waitpid WUNTRACED), as under docker's
 * cgroup-v1 freezer it would not: good enough for commit's consistent copy. */
static int signal_pause(struct sbx_instance *in, bool paused, const char *why, sbx_error_t *err)
{
  cleanup_free char *list = xasprintf("%s/stopped", in->dir);
  if (!paused) {
    cleanup_free char *text = NULL;
    if (sbx__read_file_at(AT_FDCWD, list, 1 << 22, &text, NULL) < 0)
      return 0; /* nothing stopped by us */
    long init = 0;
    unsigned long long start;
    for (char *line = text, *next; line && *line; line = next) {
      next = strchr(line, '\n');
      if (next)
        *next++ = '\0';
      long pid;
      if (sscanf(line, "%ld %llu", &pid, &start) != 2)
        continue;
      if (sbx__proc_start_time(pid) != start)
        continue; /* gone, its pid reused */
      if (init == 0) {
        init = pid; /* first line: continued last */
        continue;
      }
      kill((pid_t) pid, SIGCONT);
    }
    if (init > 0)
      kill((pid_t) init, SIGCONT);
    unlink(list);
    return 0;
  }
  if (!linux_alive(in))
    return sbx__make_error(err, ESRCH, SBX_E_NOT_FOUND, "sandbox %s: its init is gone",
                           in->meta.id);
  sbx_buf_t b = {0};
  sbx_strv_t done = {0};
  if (kill((pid_t) in->meta.pid, SIGSTOP) < 0) {
    int e = errno;
    sbx__buf_free(&b);
    return sbx__make_error(err, e, SBX_E_UNSUPPORTED,
                           "sandbox %s: no freezer cgroup it can use (%s), and its processes "
                           "cannot be stopped instead",
                           in->meta.id, why);
  }
  sbx__buf_printf(&b, "%ld %llu\n", in->meta.pid, in->meta.pid_start);
  bool settled = false;
  for (int pass = 0; pass < 200 && !settled; pass++) {
    cleanup_free long *pids = NULL;
    cleanup_free char *states = NULL;
    size_t n = descendants(in->meta.pid, &pids, &states);
    settled = true;
    for (size_t i = 0; i < n; i++) {
      char key[32];
      snprintf(key, sizeof key, "%ld", pids[i]);
      bool ours = false;
      for (size_t k = 0; k < done.n && !ours; k++)
        ours = strcmp(done.v[k], key) == 0;
      if (states[i] == 'Z' || states[i] == 'X')
        continue;
      if (ours) {
        if (states[i] != 'T' && states[i] != 't')
          settled = false; /* the stop is on its way */
        continue;
      }
      if (states[i] == 'T' || states[i] == 't')
        continue; /* stopped already, not by us: left as it is on thaw */
      unsigned long long start = sbx__proc_start_time(pids[i]);
      if (start && kill((pid_t) pids[i], SIGSTOP) == 0) {
        sbx__strv_push(&done, key);
        sbx__buf_printf(&b, "%ld %llu\n", pids[i], start);
        settled = false;
      }
    }
    if (!settled)
      usleep(1000);
  }
  size_t stopped = done.n + 1;
  sbx__strv_free(&done);
  int r = sbx__write_file_at(AT_FDCWD, list, b.data ? b.data : "", b.len, 0600, false);
  sbx__buf_free(&b);
  if (r < 0 || !settled) {
    int e = r < 0 ? errno : 0;
    signal_pause(in, false, why, NULL);
    return sbx__make_error(err, e, SBX_E_INTERNAL,
                           r < 0 ? "sandbox %s: record stopped processes in `%s`"
                                 : "sandbox %s: its processes did not all stop (%s)",
                           in->meta.id, r < 0 ? list : "they keep forking");
  }
  sbx__log(SBX_LOG_INFO, "sandbox %s paused by SIGSTOP to its %zu processes (no freezer: %s)",
           in->meta.id, stopped, why);
  return 0;
}

static int linux_pause(struct sbx_instance *in, bool paused, sbx_error_t *err)
{
  struct sbx_cgroup cg = {0};
  if (in->meta.cgroups)
    sbx__cgroup_parse(in->meta.cgroups, &cg);
  if (in->meta.cgroups && cg.path[SBX_CG_FREEZER]) {
    int r = sbx__cgroup_freeze(&cg, paused, err);
    sbx__cgroup_free(&cg);
    return r;
  }
  /* no freezer this user may write (rootless without a delegated cgroup, a v1 host without
   * the freezer): stop the processes instead */
  cleanup_free char *why =
      cg.none
          ? xasprintf("it runs without a cgroup: %s", cg.none)
          : xstrdup(in->meta.cgroups ? "its cgroup has no freezer controller" : "it has no cgroup");
  sbx__cgroup_free(&cg);
  return signal_pause(in, paused, why, err);
}

static int linux_upper(struct sbx_instance *in, char **dir, uint32_t *uid_base, uint32_t *uid_count,
                       sbx_error_t *err)
{
  const char *image = in->meta.image ? in->meta.image : in->cfg->image ? in->cfg->image : "host";
  if (strcmp(image, "host") == 0)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                           "sandbox %s runs the `host` image (the host's /usr, read-only): it has "
                           "no writable root to commit; create it from an image (--image NAME)",
                           in->meta.id);
  cleanup_free char *img = xasprintf("%s/" SBX_DISK_IMAGE_FILE, in->dir);
  if (access(img, F_OK) == 0)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                           "sandbox %s keeps its upper on a capped disk (sandbox.disk_mib), "
                           "mounted only inside it: commit does not read that yet",
                           in->meta.id);
  *dir = xasprintf("%s/upper", in->dir);
  *uid_base = in->meta.uid_base ? in->meta.uid_base : SBX_UID_BASE;
  *uid_count = SBX_UID_COUNT;
  return 0;
}

const struct sbx_backend_ops sbx__backend_linux = {
    .name = "linux",
    .data_owner = SBX_UID_BASE,
    .create = linux_create,
    .precheck = linux_precheck,
    .destroy = linux_destroy,
    .alive = linux_alive,
    .memory = linux_memory,
    .health = linux_health,
    .ping = linux_ping,
    .sweep = linux_sweep,
    .pause = linux_pause,
    .kill = linux_kill,
    .upper = linux_upper,
    .adopt = linux_adopt,
    .exec = sbx__agent_exec,
    .signal = sbx__agent_signal,
    .read_text = sbx__agent_read_text,
    .read_to_fd = sbx__agent_read_to_fd,
    .read_to_buf = sbx__agent_read_to_buf,
    .write = sbx__agent_write,
    .list_dir = sbx__agent_list_dir,
    .glob = sbx__agent_glob,
    .grep = sbx__agent_grep,
    .stat = sbx__agent_stat,
    .mkdir = sbx__agent_mkdir,
    .remove = sbx__agent_remove,
    .rename = sbx__agent_rename,
    .chmod = sbx__agent_chmod,
    .readdir = sbx__agent_readdir,
    .replace = sbx__agent_replace,
    .read_range = sbx__agent_read_range,
    .write_mode = sbx__agent_write_mode,
    .cmd_status = sbx__agent_cmd_status,
    .cmd_logs = sbx__agent_cmd_logs,
    .connect_port = sbx__agent_connect_port,
    .session_start = sbx__linux_session_start,
    .metrics = linux_metrics,
};
