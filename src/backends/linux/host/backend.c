/* The linux backend, host side: create runs the launcher (`sbx-init launch`, a fresh
 * single-threaded process, so namespaces can be made whatever threads the caller has), destroy
 * kills the sandbox's PID 1 (the kernel then kills everything in its pid namespace) and removes
 * its cgroup. Contract operations go to sbx-init (agent_client.c). */
#include "agent_client.h"
#include "linux.h"
#include "log.h"
#include "proto.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
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
  s->tmp_bytes = c->tmp_size_mib << 20;
  s->home_bytes = c->home_size_mib << 20;
  /* a managed sandbox's lifetime belongs to its front-end, not to idleness */
  s->idle_timeout_s = in->meta.managed ? 0 : c->idle_timeout;
  s->n_mounts = c->n_mounts + in->n_extra_mounts;
  s->mounts = xzalloc((s->n_mounts + 1) * sizeof *s->mounts);
  for (size_t i = 0; i < s->n_mounts; i++) {
    const struct sbx_mount *m =
        i < c->n_mounts ? &c->mounts[i] : &in->extra_mounts[i - c->n_mounts];
    char *host = m->host_path;
    if (i < c->n_mounts) {
      char *real = realpath(m->host_path, NULL);
      if (real) {
        sbx_strv_push_owned(canon, real);
        host = real;
      }
    }
    s->mounts[i] = (struct sbx_launch_mount){host, m->container_path, m->read_only};
  }
}

static int linux_create(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  struct sbx_launch_spec spec;
  sbx_strv_t canon = {0};
  fill_spec(in, user_data, &spec, &canon);
  sbx_buf_t payload = {0};
  sbx_launch_spec_encode(&spec, &payload);
  free(spec.mounts);
  sbx_strv_free(&canon);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    sbx_buf_free(&payload);
    return sbx_make_error(err, errno, SBX_E_INTERNAL, "socketpair");
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
  int r = posix_spawn(&launcher, init, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (r != 0) {
    sbx_buf_free(&payload);
    return sbx_make_error(err, r, SBX_E_INTERNAL, "run `%s`", init);
  }
  struct timeval tv = {.tv_sec = 60};
  setsockopt(ours, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  r = sbx_frame_send(ours, SBX_MSG_LAUNCH, 1, payload.data, payload.len);
  sbx_buf_free(&payload);
  sbx_frame_hdr_t hdr = {0};
  cleanup_free char *reply = NULL;
  if (r == 0)
    r = sbx_frame_recv(ours, &hdr, &reply, SBX_PROTO_MAX_PAYLOAD);
  int saved = errno;
  int status = 0;
  if (r < 0)
    kill(launcher, SIGKILL);
  TEMP_FAILURE_RETRY(waitpid(launcher, &status, 0));
  if (r < 0)
    return sbx_make_error(err, saved, SBX_E_INTERNAL, "launcher `%s` failed (exit status %d)", init,
                          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (hdr.type == SBX_MSG_ERR)
    return sbx_error_from_frame(reply, hdr.len, err);
  uint64_t pid = 0;
  char *cgroups = NULL;
  if (hdr.type != SBX_MSG_OK || sbx_tlv_get_u64(reply, hdr.len, SBX_T_PID, 0, &pid) <= 0 ||
      sbx_tlv_get_str(reply, hdr.len, SBX_T_TEXT, &cgroups) < 0)
    return sbx_make_error(err, EPROTO, SBX_E_INTERNAL, "launcher sent a malformed reply");
  in->meta.pid = (long) pid;
  in->meta.pid_start = sbx_proc_start_time((long) pid);
  free(in->meta.cgroups);
  in->meta.cgroups = cgroups;
  return 0;
}

static bool linux_alive(struct sbx_instance *in)
{
  return in->meta.pid > 0 && in->meta.pid_start != 0 &&
         sbx_proc_start_time(in->meta.pid) == in->meta.pid_start;
}

/* A sandbox whose creator died between the launch and its metadata: take the init's identity
 * and cgroups from the launcher's record. */
static void load_launch_record(struct sbx_instance *in)
{
  cleanup_free char *path = xasprintf("%s/" SBX_LAUNCH_RECORD, in->dir);
  cleanup_free char *text = NULL;
  if (sbx_read_file_at(AT_FDCWD, path, 8192, &text, NULL) < 0)
    return;
  long long pid = 0;
  unsigned long long start = 0;
  if (sscanf(text, "pid=%lld\nstart=%llu\n", &pid, &start) != 2 || pid <= 0 || start == 0)
    return;
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
    sbx_cgroup_parse(in->meta.cgroups, &cg);
  if (linux_alive(in)) {
    int pidfd = (int) syscall(SYS_pidfd_open, (pid_t) in->meta.pid, 0);
    /* pid reuse between the check and pidfd_open: verify again through the pidfd's pid */
    if (pidfd >= 0 && sbx_proc_start_time(in->meta.pid) == in->meta.pid_start) {
      syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
      /* a frozen task dies only once thawed (paused, or frozen by hand) */
      if (in->meta.cgroups)
        sbx_cgroup_freeze(&cg, false, NULL);
      struct pollfd pfd = {pidfd, POLLIN, 0};
      poll(&pfd, 1, 5000);
    } else if (pidfd < 0 && errno != ESRCH) {
      /* No pidfd (out of descriptors, or a tracer such as valgrind that does not know the
       * call): a plain kill, checked against the start time just before (a pid reused in
       * that window is the price, and only then), then wait for the start time to change. */
      if (sbx_proc_start_time(in->meta.pid) == in->meta.pid_start)
        kill((pid_t) in->meta.pid, SIGKILL);
      if (in->meta.cgroups)
        sbx_cgroup_freeze(&cg, false, NULL);
      for (uint64_t until = sbx_now_ms() + 5000; linux_alive(in) && sbx_now_ms() < until;)
        usleep(1000);
    }
    if (pidfd >= 0)
      close(pidfd);
    if (linux_alive(in)) {
      sbx_cgroup_free(&cg);
      return sbx_make_error(err, EBUSY, SBX_E_BUSY, "sandbox %s is still running (pid %lld)",
                            in->meta.id, (long long) in->meta.pid);
    }
  }
  int r = 0;
  if (in->meta.cgroups)
    r = sbx_cgroup_destroy(&cg, 3000, err);
  sbx_cgroup_free(&cg);
  return r < 0 ? -1 : 0;
}

static int linux_health(struct sbx_instance *in, int timeout_s, sbx_error_t *err)
{
  return sbx__agent_health(in->dir, timeout_s * 1000, err);
}

static int linux_metrics(struct sbx_instance *in, struct sbx_metrics *m, sbx_error_t *err)
{
  if (in->meta.cgroups == NULL)
    return sbx_make_error(err, 0, SBX_E_UNSUPPORTED, "sandbox %s has no cgroup", in->meta.id);
  struct sbx_cgroup cg;
  sbx_cgroup_parse(in->meta.cgroups, &cg);
  int r = sbx_cgroup_metrics(&cg, m);
  sbx_cgroup_free(&cg);
  if (r < 0)
    return sbx_make_error(err, errno, SBX_E_IO, "read the cgroup of sandbox %s", in->meta.id);
  return 0;
}

static int linux_ping(struct sbx_instance *in, sbx_error_t *err)
{
  return sbx__agent_ping(in->dir, 2000, err);
}

static void linux_sweep(void)
{
  sbx_cgroup_sweep(60);
}

static int64_t linux_memory(struct sbx_instance *in)
{
  if (in->meta.cgroups == NULL)
    return -1;
  struct sbx_cgroup cg;
  sbx_cgroup_parse(in->meta.cgroups, &cg);
  int64_t m = sbx_cgroup_memory(&cg);
  sbx_cgroup_free(&cg);
  return m;
}

static int linux_pause(struct sbx_instance *in, bool paused, sbx_error_t *err)
{
  if (in->meta.cgroups == NULL)
    return sbx_make_error(err, 0, SBX_E_UNSUPPORTED, "sandbox %s has no cgroup", in->meta.id);
  struct sbx_cgroup cg;
  sbx_cgroup_parse(in->meta.cgroups, &cg);
  int r = sbx_cgroup_freeze(&cg, paused, err);
  sbx_cgroup_free(&cg);
  return r;
}

const struct sbx_backend_ops sbx_backend_linux = {
    .name = "linux",
    .data_owner = SBX_UID_BASE,
    .create = linux_create,
    .destroy = linux_destroy,
    .alive = linux_alive,
    .memory = linux_memory,
    .health = linux_health,
    .ping = linux_ping,
    .sweep = linux_sweep,
    .pause = linux_pause,
    .adopt = sbx_linux_adopt,
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
