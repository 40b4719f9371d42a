/* The per-sandbox network state files (see store.h). */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "error.h"
#include "store.h"
#include "util.h"

static int open_net_dir(const char *sandbox_dir, bool create, sbx_error_t *err)
{
  cleanup_close int dfd = open(sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO,
                           "open sandbox folder `%s`", sandbox_dir);
  if (create && mkdirat(dfd, SBX_NET_DIR, 0700) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "mkdir `%s/%s`", sandbox_dir, SBX_NET_DIR);
  int fd = openat(dfd, SBX_NET_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO, "open `%s/%s`",
                           sandbox_dir, SBX_NET_DIR);
  return fd;
}

static sbx_net_policy_t *read_at(int nfd, const char *sandbox_dir, sbx_error_t *err)
{
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (sbx__read_file_at(nfd, "policy.json", SBX_NET_POLICY_MAX, &text, &len) < 0) {
    if (errno == ENOENT)
      sbx__make_error(err, 0, SBX_E_NOT_FOUND, "sandbox has no egress policy (`%s/%s` missing)",
                      sandbox_dir, SBX_NET_POLICY_FILE);
    else
      sbx__make_error(err, errno, SBX_E_IO, "read `%s/%s`", sandbox_dir, SBX_NET_POLICY_FILE);
    return NULL;
  }
  sbx_net_policy_t *p = sbx__net_policy_parse(text, len, SBX_NET_POLICY_FILE, err);
  if (p == NULL)
    sbx__error_wrap(err, "sandbox folder `%s`", sandbox_dir);
  return p;
}

static int write_at(int nfd, const char *sandbox_dir, const sbx_net_policy_t *p, sbx_error_t *err)
{
  cleanup_free char *text = sbx__net_policy_serialize(p);
  sbx_buf_t b = {0};
  sbx__buf_puts(&b, text);
  sbx__buf_putc(&b, '\n');
  /* temp + rename: the enforcer reads one complete file, told to by the signal */
  int r = sbx__write_file_at(nfd, "policy.json", b.data, b.len, 0600, true);
  int e = errno;
  sbx__buf_free(&b);
  if (r < 0)
    return sbx__make_error(err, e, SBX_E_IO, "write `%s/%s`", sandbox_dir, SBX_NET_POLICY_FILE);
  sbx__net_enforcer_signal(sandbox_dir, SBX_NET_RELOAD_SIGNAL);
  return 0;
}

int sbx__net_enforcer_signal(const char *sandbox_dir, int sig)
{
  cleanup_free char *path = xasprintf("%s/" SBX_NET_ENFORCER_RECORD, sandbox_dir);
  cleanup_free char *text = NULL;
  long long pid = 0;
  unsigned long long start = 0;
  if (sbx__read_file_at(AT_FDCWD, path, 256, &text, NULL) < 0 ||
      sscanf(text, "pid=%lld\nstart=%llu", &pid, &start) != 2 || pid <= 0 || pid > INT_MAX)
    return -1;
  cleanup_close int pidfd = (int) syscall(SYS_pidfd_open, (pid_t) pid, 0);
  /* the pidfd first, then the start time: a pid reused after the check cannot be signalled */
  if (pidfd < 0 || sbx__proc_start_time((long) pid) != start)
    return -1;
  return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0 ? -1 : 0;
}

static int lock_at(int nfd, const char *sandbox_dir, int how, sbx_error_t *err)
{
  int fd = openat(nfd, "policy.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `%s/%s`", sandbox_dir, SBX_NET_POLICY_LOCK);
  if (TEMP_FAILURE_RETRY(flock(fd, how)) < 0) {
    int e = errno;
    close(fd);
    return sbx__make_error(err, e, SBX_E_IO, "lock `%s/%s`", sandbox_dir, SBX_NET_POLICY_LOCK);
  }
  return fd;
}

/* net/ itself missing reads as the policy missing (the sandbox folder must exist) */
static int open_net_dir_for_policy(const char *sandbox_dir, bool create, sbx_error_t *err)
{
  sbx_error_t e = NULL;
  int fd = open_net_dir(sandbox_dir, create, &e);
  if (fd >= 0)
    return fd;
  bool no_net = e->kind == SBX_E_NOT_FOUND && access(sandbox_dir, F_OK) == 0;
  if (no_net) {
    sbx_error_release(&e);
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND,
                           "sandbox has no egress policy (`%s/%s` missing)", sandbox_dir,
                           SBX_NET_POLICY_FILE);
  }
  if (err && *err == NULL)
    *err = e;
  else
    sbx_error_release(&e);
  return -1;
}

sbx_net_policy_t *sbx__net_store_read(const char *sandbox_dir, sbx_error_t *err)
{
  cleanup_close int nfd = open_net_dir_for_policy(sandbox_dir, false, err);
  if (nfd < 0)
    return NULL;
  /* the file is replaced by rename, so a reader needs no lock to see a whole one */
  return read_at(nfd, sandbox_dir, err);
}

int sbx__net_store_write(const char *sandbox_dir, const sbx_net_policy_t *p, sbx_error_t *err)
{
  cleanup_close int nfd = open_net_dir(sandbox_dir, true, err);
  if (nfd < 0)
    return -1;
  cleanup_close int lfd = lock_at(nfd, sandbox_dir, LOCK_EX, err);
  if (lfd < 0)
    return -1;
  return write_at(nfd, sandbox_dir, p, err);
}

int sbx__net_store_update(const char *sandbox_dir, bool create, sbx_net_edit_fn edit, void *data,
                          sbx_net_policy_t **out, sbx_error_t *err)
{
  cleanup_close int nfd = open_net_dir_for_policy(sandbox_dir, create, err);
  if (nfd < 0)
    return -1;
  cleanup_close int lfd = lock_at(nfd, sandbox_dir, LOCK_EX, err);
  if (lfd < 0)
    return -1;
  sbx_error_t rerr = NULL;
  sbx_net_policy_t *p = read_at(nfd, sandbox_dir, &rerr);
  if (p == NULL) {
    if (!create || rerr->kind != SBX_E_NOT_FOUND) {
      if (err && *err == NULL)
        *err = rerr;
      else
        sbx_error_release(&rerr);
      return -1;
    }
    sbx_error_release(&rerr);
    p = sbx__net_policy_new(SBX_NET_DENY);
  }
  if (edit(p, data, err) < 0 || write_at(nfd, sandbox_dir, p, err) < 0) {
    sbx__net_policy_free(p);
    return -1;
  }
  if (out)
    *out = p;
  else
    sbx__net_policy_free(p);
  return 0;
}

static int get_u64(json_t *j, const char *key, uint64_t *v)
{
  json_t *x = json_object_get(j, key);
  if (x == NULL)
    return 0;
  if (!json_is_integer(x) || json_integer_value(x) < 0)
    return -1;
  *v = (uint64_t) json_integer_value(x);
  return 0;
}

int sbx__net_counters_read(const char *sandbox_dir, struct sbx_net_counters *c, sbx_error_t *err)
{
  memset(c, 0, sizeof *c);
  cleanup_free char *path = xasprintf("%s/%s", sandbox_dir, SBX_NET_COUNTERS_FILE);
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, path, 1 << 16, &text, &len) < 0) {
    if (errno == ENOENT)
      return 0;
    return sbx__make_error(err, errno, SBX_E_IO, "read `%s`", path);
  }
  json_t *j = json_loadb(text, len, 0, NULL);
  int bad = !json_is_object(j) || get_u64(j, "denied_connections", &c->denied_connections) < 0 ||
            get_u64(j, "denied_lookups", &c->denied_lookups) < 0 ||
            get_u64(j, "allowed_lookups", &c->allowed_lookups) < 0;
  json_decref(j);
  if (bad) {
    memset(c, 0, sizeof *c);
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "`%s`: not {denied_connections, denied_lookups, allowed_lookups}", path);
  }
  return 0;
}

int sbx__net_counters_write(const char *sandbox_dir, const struct sbx_net_counters *c,
                            sbx_error_t *err)
{
  cleanup_close int nfd = open_net_dir(sandbox_dir, true, err);
  if (nfd < 0)
    return -1;
  cleanup_free char *text = xasprintf(
      "{\"denied_connections\": %llu, \"denied_lookups\": %llu, \"allowed_lookups\": %llu}\n",
      (unsigned long long) c->denied_connections, (unsigned long long) c->denied_lookups,
      (unsigned long long) c->allowed_lookups);
  if (sbx__write_file_at(nfd, "counters.json", text, strlen(text), 0644, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write `%s/%s`", sandbox_dir,
                           SBX_NET_COUNTERS_FILE);
  return 0;
}

int sbx__net_denied_log(const char *sandbox_dir, const char *sandbox_id, const char *kind,
                        const char *target, const char *rule, sbx_error_t *err)
{
  return sbx__net_denied_log_names(sandbox_dir, sandbox_id, kind, target, rule, NULL, NULL, 0, err);
}

int sbx__net_denied_log_names(const char *sandbox_dir, const char *sandbox_id, const char *kind,
                              const char *target, const char *rule, const char *name,
                              const char *const *pinned, size_t n_pinned, sbx_error_t *err)
{
  cleanup_free char *path = xasprintf("%s/%s", sandbox_dir, SBX_NET_DENIED_LOG);
  json_t *j = json_pack("{s:f, s:s, s:s, s:s, s:s}", "ts", sbx__realtime_sec(), "sandbox",
                        sandbox_id, "kind", kind, "target", target, "rule", rule);
  if (j == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "denied log: a field is not UTF-8");
  if (name != NULL) {
    json_object_set_new(j, "name", json_string(name));
    json_t *a = json_array();
    for (size_t i = 0; i < n_pinned; i++)
      json_array_append_new(a, json_string(pinned[i]));
    json_object_set_new(j, "pinned", a);
  }
  cleanup_free char *line = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (line == NULL)
    abort();
  size_t n = strlen(line);
  line[n++] = '\n'; /* replaces the NUL: written with its length */
  cleanup_close int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", path);
  /* O_APPEND with one write per line: lines from concurrent writers do not interleave */
  if (sbx__write_all(fd, line, n) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "append to `%s`", path);
  return 0;
}
