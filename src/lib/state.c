/* The on-disk pool shared by every process on a host (layout in state.h). Files are
 * written atomically (temp + rename); coordination is by flock, which the kernel releases when
 * a process dies, so a crashed front-end can never leave a lock or a lease behind. */
#include "state.h"

#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define META_MAX (1u << 20)

void sbx__meta_free(struct sbx_meta *m)
{
  free(m->user);
  free(m->thread);
  free(m->backend);
  free(m->image);
  free(m->cgroups);
  free(m->remote_id);
  free(m->backend_json);
  free(m->extra);
  free(m->spare_key);
  sbx__strv_free(&m->env);
  memset(m, 0, sizeof *m);
}

char *sbx__state_dir(const char *home, const char *id)
{
  return xasprintf("%s/sandboxes/%s", home, id);
}

static char *dup_json_str(json_t *o, const char *key)
{
  const char *s = json_string_value(json_object_get(o, key));
  return s ? xstrdup(s) : NULL;
}

int sbx__meta_read(const char *home, const char *id, struct sbx_meta *m, sbx_error_t *err)
{
  memset(m, 0, sizeof *m);
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_INVALID, "invalid sandbox id `%s`", id);
  cleanup_free char *path = xasprintf("%s/sandboxes/%s/meta", home, id);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, path, META_MAX, &data, &len) < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO,
                           "sandbox %s: read `%s`", id, path);
  json_error_t je;
  json_auto_t *o = json_loadb(data, len, 0, &je);
  if (o == NULL || !json_is_object(o))
    return sbx__make_error(err, 0, SBX_E_IO, "sandbox %s: corrupt `%s`", id, path);
  snprintf(m->id, sizeof m->id, "%s", id);
  m->user = dup_json_str(o, "user");
  m->thread = dup_json_str(o, "thread");
  m->backend = dup_json_str(o, "backend");
  m->image = dup_json_str(o, "image");
  m->cgroups = dup_json_str(o, "cgroups");
  m->remote_id = dup_json_str(o, "remote_id");
  m->spare_key = dup_json_str(o, "spare_key");
  json_t *bd = json_object_get(o, "backend_data");
  if (json_is_object(bd))
    m->backend_json = json_dumps(bd, JSON_COMPACT | JSON_SORT_KEYS);
  m->created = json_number_value(json_object_get(o, "created"));
  m->last_used = json_number_value(json_object_get(o, "last_used"));
  /* the lease file's mtime is the live last-used time (touched on acquire and release) */
  cleanup_free char *lease = xasprintf("%s/sandboxes/%s/lease", home, id);
  struct stat st;
  if (stat(lease, &st) == 0)
    m->last_used = (double) st.st_mtim.tv_sec + (double) st.st_mtim.tv_nsec / 1e9;
  m->pid = (long) json_integer_value(json_object_get(o, "pid"));
  m->pid_start = (unsigned long long) json_integer_value(json_object_get(o, "pid_start"));
  m->uid_base = (uint32_t) json_integer_value(json_object_get(o, "uid_base"));
  m->paused = json_is_true(json_object_get(o, "paused"));
  m->managed = json_is_true(json_object_get(o, "managed"));
  m->memory_bytes = (uint64_t) json_integer_value(json_object_get(o, "memory_bytes"));
  m->memory_admitted = (uint64_t) json_integer_value(json_object_get(o, "memory_admitted"));
  m->cpus = json_number_value(json_object_get(o, "cpus"));
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(o, "env"), i, v)
  {
    if (json_is_string(v))
      sbx__strv_push(&m->env, json_string_value(v));
  }
  json_t *extra = json_object_get(o, "extra");
  if (json_is_object(extra))
    m->extra = json_dumps(extra, JSON_COMPACT | JSON_SORT_KEYS);
  if (m->backend == NULL)
    m->backend = xstrdup("linux");
  return 0;
}

int sbx__meta_write(const char *home, const struct sbx_meta *m, sbx_error_t *err)
{
  json_t *o = json_object();
  json_object_set_new(o, "id", json_string(m->id));
  if (m->user)
    json_object_set_new(o, "user", json_string(m->user));
  if (m->thread)
    json_object_set_new(o, "thread", json_string(m->thread));
  json_object_set_new(o, "backend", json_string(m->backend ? m->backend : "linux"));
  if (m->image)
    json_object_set_new(o, "image", json_string(m->image));
  json_object_set_new(o, "created", json_real(m->created));
  json_object_set_new(o, "last_used", json_real(m->last_used));
  json_object_set_new(o, "pid", json_integer(m->pid));
  json_object_set_new(o, "pid_start", json_integer((json_int_t) m->pid_start));
  if (m->uid_base)
    json_object_set_new(o, "uid_base", json_integer((json_int_t) m->uid_base));
  if (m->cgroups)
    json_object_set_new(o, "cgroups", json_string(m->cgroups));
  if (m->remote_id)
    json_object_set_new(o, "remote_id", json_string(m->remote_id));
  if (m->spare_key)
    json_object_set_new(o, "spare_key", json_string(m->spare_key));
  if (m->backend_json) {
    json_t *bd = json_loads(m->backend_json, 0, NULL);
    if (json_is_object(bd))
      json_object_set_new(o, "backend_data", bd);
    else
      json_decref(bd);
  }
  json_object_set_new(o, "paused", json_boolean(m->paused));
  if (m->managed)
    json_object_set_new(o, "managed", json_true());
  if (m->memory_bytes)
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t) m->memory_bytes));
  if (m->memory_admitted)
    json_object_set_new(o, "memory_admitted", json_integer((json_int_t) m->memory_admitted));
  if (m->cpus > 0)
    json_object_set_new(o, "cpus", json_real(m->cpus));
  if (m->env.n) {
    json_t *env = json_array();
    for (size_t i = 0; i < m->env.n; i++)
      json_array_append_new(env, json_string(m->env.v[i]));
    json_object_set_new(o, "env", env);
  }
  if (m->extra) {
    json_t *extra = json_loads(m->extra, 0, NULL);
    if (json_is_object(extra))
      json_object_set_new(o, "extra", extra);
    else
      json_decref(extra);
  }
  cleanup_free char *data = json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(o);
  if (data == NULL)
    return sbx__make_error(err, 0, SBX_E_INTERNAL, "sandbox %s: encode metadata", m->id);
  cleanup_free char *dir = sbx__state_dir(home, m->id);
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  /* not durable: a sandbox does not survive the host going down, its metadata need not */
  if (dfd < 0 || sbx__write_file_at(dfd, "meta", data, strlen(data), 0600, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "sandbox %s: write `%s/meta`", m->id, dir);
  return 0;
}

int sbx__state_list_ids(const char *home, sbx_strv_t *ids, sbx_error_t *err)
{
  cleanup_free char *dir = xasprintf("%s/sandboxes", home);
  cleanup_dir DIR *d = opendir(dir);
  if (d == NULL) {
    if (errno == ENOENT)
      return 0;
    return sbx__make_error(err, errno, SBX_E_IO, "list `%s`", dir);
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (sbx__id_valid(de->d_name))
      sbx__strv_push(ids, de->d_name);
  sbx__strv_sort(ids);
  return 0;
}

int sbx__lock_take(const char *home, const char *name, bool exclusive, bool nonblock,
                   sbx_error_t *err)
{
  cleanup_free char *path = xasprintf("%s/locks/%s", home, name);
  for (;;) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == ENOENT) {
      cleanup_free char *dir = xasprintf("%s/locks", home);
      if (sbx__mkdir_p(dir, 0700) == 0)
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    if (fd < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "open lock `%s`", path);
    int op = (exclusive ? LOCK_EX : LOCK_SH) | (nonblock ? LOCK_NB : 0);
    if (TEMP_FAILURE_RETRY(flock(fd, op)) < 0) {
      int saved = errno;
      close(fd);
      if (saved == EWOULDBLOCK) {
        errno = EWOULDBLOCK;
        return -1;
      }
      return sbx__make_error(err, saved, SBX_E_IO, "lock `%s`", path);
    }
    /* sbx__lock_drop unlinks a lock while holding it: one taken on a file no longer at the path
     * guards nothing (a newcomer locks a new file); take the one that is there */
    struct stat held, now;
    if (fstat(fd, &held) == 0 && lstat(path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      return fd;
    close(fd);
  }
}

void sbx__lock_drop(const char *home, const char *name, int fd)
{
  if (fd < 0)
    return;
  cleanup_free char *path = xasprintf("%s/locks/%s", home, name);
  unlink(path);
  close(fd);
}

int sbx__lease_take(const char *home, const char *id, sbx_error_t *err)
{
  cleanup_free char *path = xasprintf("%s/sandboxes/%s/lease", home, id);
  int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open lease `%s`", path);
  if (TEMP_FAILURE_RETRY(flock(fd, LOCK_SH)) < 0) {
    int saved = errno;
    close(fd);
    return sbx__make_error(err, saved, SBX_E_IO, "take lease `%s`", path);
  }
  return fd;
}

void sbx__lease_touch(const char *home, const char *id, int fd)
{
  if (fd >= 0 && futimens(fd, NULL) == 0)
    return;
  cleanup_free char *path = xasprintf("%s/sandboxes/%s/lease", home, id);
  utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
}

bool sbx__lease_held(const char *home, const char *id)
{
  cleanup_free char *path = xasprintf("%s/sandboxes/%s/lease", home, id);
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  if (flock(fd, LOCK_EX | LOCK_NB) < 0)
    return errno == EWOULDBLOCK;
  flock(fd, LOCK_UN);
  return false;
}

int sbx__lease_owners(const char *home, const char *id, long **pids, size_t *n)
{
  *pids = NULL;
  *n = 0;
  cleanup_free char *path = xasprintf("%s/sandboxes/%s/lease", home, id);
  struct stat st;
  if (stat(path, &st) < 0)
    return 0;
  cleanup_file FILE *f = fopen("/proc/locks", "re");
  if (f == NULL)
    return 0;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    /* "1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF" */
    char kind[16], mode[16], access[16];
    long pid;
    unsigned maj, min;
    unsigned long long ino;
    if (strstr(line, "->") != NULL) /* a blocked waiter, not an owner */
      continue;
    if (sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%llu", kind, mode, access, &pid, &maj, &min,
               &ino) != 7)
      continue;
    if (strcmp(kind, "FLOCK") != 0 || ino != (unsigned long long) st.st_ino ||
        makedev(maj, min) != st.st_dev)
      continue;
    *pids = xreallocarray(*pids, *n + 1, sizeof **pids);
    (*pids)[(*n)++] = pid;
  }
  return 0;
}

/* Opens name inside dirfd as a directory, creating it; never follows a symlink (a sandbox can
 * plant one in its own user-data folder). With chown_it, a folder it creates gets owner:group,
 * and so does one the host's root owns (made by hand, or by an sbx before idmapped folders);
 * a folder of anyone else's keeps its owner: the sandbox's root writes as that owner there
 * (an idmapped mount, src/backends/linux/ids.c). */
static int open_dir_at(int dirfd, const char *name, mode_t mode, uid_t owner, gid_t group,
                       bool chown_it)
{
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  bool created = false;
  if (fd < 0 && errno == ENOENT) {
    if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
      return -1;
    created = true;
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0)
    return -1;
  struct stat st;
  if (chown_it && fstat(fd, &st) == 0 && (created || (st.st_uid == 0 && owner != 0))) {
    if (fchown(fd, owner, group) < 0 || (created && fchmod(fd, mode) < 0)) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

/* workspace, uploads and outputs inside an open user-data folder */
static int user_data_children(int fd, uid_t owner, const char *what, sbx_error_t *err)
{
  static const char *const subs[] = {"workspace", "uploads", "outputs"};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
    int sub = open_dir_at(fd, subs[i], 0755, owner, owner, true);
    if (sub < 0)
      return sbx__make_error(err, errno, SBX_E_IO,
                             "create `%s` in the user-data folder %s (a symlink there is refused)",
                             subs[i], what);
    close(sub);
  }
  return 0;
}

char *sbx__user_data_ensure(const char *path, uid_t owner, sbx_error_t *err)
{
  if (path == NULL || path[0] != '/')
    return sbx__make_error(err, 0, SBX_E_INVALID, "user-data folder `%s` is not an absolute path",
                           path ? path : ""),
           NULL;
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `/`"), NULL;
  const char *p = path;
  while (*p) {
    while (*p == '/')
      p++;
    size_t len = strcspn(p, "/");
    if (len == 0)
      break;
    cleanup_free char *name = xstrndup(p, len);
    p += len;
    bool last = p[strspn(p, "/")] == '\0';
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
      close(fd);
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "user-data folder `%s` has a `.` or `..` component", path),
             NULL;
    }
    int next = open_dir_at(fd, name, 0755, owner, owner, last);
    close(fd);
    if (next < 0)
      return sbx__make_error(err, errno, SBX_E_IO,
                             "create user-data folder `%s` (at `%s`; a symlink is refused)", path,
                             name),
             NULL;
    fd = next;
  }
  int rc = user_data_children(fd, owner, path, err);
  close(fd);
  return rc < 0 ? NULL : xstrdup(path);
}

char *sbx__thread_dir_ensure(const char *home, const char *user, const char *thread, uid_t owner,
                             sbx_error_t *err)
{
  const char *parts[] = {"users", user, "threads", thread, "user-data"};
  if (geteuid() != 0)
    owner = geteuid(); /* rootless: root inside is the user, and it can give nothing away */
  cleanup_close int fd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", home), NULL;
  for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
    bool last = i + 1 == ARRAY_SIZE(parts);
    int next = open_dir_at(fd, parts[i], last ? 0755 : 0711, owner, owner, last);
    if (next < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "create thread folder `%s` below `%s`", parts[i],
                             home),
             NULL;
    close(fd);
    fd = next;
  }
  /* its sub-folders are the folder's owner's (whoever that is) */
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "user-data folder of thread %s", thread), NULL;
  static const char *const subs[] = {"workspace", "uploads", "outputs"};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
    int sub = open_dir_at(fd, subs[i], 0755, st.st_uid, st.st_gid, true);
    if (sub < 0)
      return sbx__make_error(err, errno, SBX_E_IO,
                             "create `%s` in the user-data folder of thread %s (a symlink there "
                             "is refused)",
                             subs[i], thread),
             NULL;
    close(sub);
  }
  return xasprintf("%s/users/%s/threads/%s/user-data", home, user, thread);
}

/* ---- evictions: a scope's sandbox destroyed by the pool, not by its user ---- */

int sbx__evicted_write(const char *home, const char *id, const char *user, const char *thread,
                       const char *reason)
{
  if (thread == NULL)
    return 0; /* a throw-away or managed sandbox: no scope to tell */
  cleanup_free char *dir = xasprintf("%s/evicted", home);
  if (sbx__mkdir_p(dir, 0700) < 0)
    return -1;
  json_t *o = json_pack("{s:s, s:s, s:s, s:f, s:s}", "id", id, "user", user ? user : "default",
                        "thread", thread, "time", sbx__realtime_sec(), "reason", reason);
  char *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (text == NULL)
    return -1;
  cleanup_free char *path = xasprintf("%s/%s", dir, id);
  int r = sbx__write_file_at(AT_FDCWD, path, text, strlen(text), 0600, false);
  free(text);
  return r;
}

int sbx__evicted_read(const char *home, const char *id, struct sbx_eviction *ev)
{
  memset(ev, 0, sizeof *ev);
  if (!sbx__id_valid(id))
    return -1;
  cleanup_free char *path = xasprintf("%s/evicted/%s", home, id);
  cleanup_free char *text = NULL;
  if (sbx__read_file_at(AT_FDCWD, path, 65536, &text, NULL) < 0)
    return -1;
  json_t *o = json_loads(text, 0, NULL);
  const char *user = json_string_value(json_object_get(o, "user"));
  const char *thread = json_string_value(json_object_get(o, "thread"));
  const char *reason = json_string_value(json_object_get(o, "reason"));
  if (thread == NULL) {
    json_decref(o);
    return -1;
  }
  snprintf(ev->id, sizeof ev->id, "%s", id);
  ev->user = xstrdup(user ? user : "default");
  ev->thread = xstrdup(thread);
  ev->reason = xstrdup(reason ? reason : "unknown");
  ev->time = json_number_value(json_object_get(o, "time"));
  json_decref(o);
  return 0;
}

void sbx__evicted_remove(const char *home, const char *id)
{
  cleanup_free char *path = xasprintf("%s/evicted/%s", home, id);
  unlink(path);
}
