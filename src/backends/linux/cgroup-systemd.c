/* The systemd manager: each sandbox is a transient scope, sbx-<id>-<random>.scope, in a slice
 * (sandbox.cgroup_slice, default sbx.slice), made by systemd over D-Bus the way crun's
 * --cgroup-manager=systemd does, with Delegate=yes (the scope's cgroup is ours to write) and
 * the limits as unit properties (so a daemon-reload re-applies the same values). On a host
 * whose cgroups systemd manages this keeps systemd's tree its own; the sandboxes live in their
 * slice, not in the front-end's unit: they outlive it, by design (docs/hosts.md).
 *
 * D-Bus here is the wire protocol alone, on systemd's private socket (root's manager's, or for
 * an ordinary user its own user manager's; peer to peer: no bus daemon needed): EXTERNAL
 * authentication, one method call, its reply. */
#include "linux.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define SYSTEMD_PRIVATE "/run/systemd/private"

/* ---- marshalling (little endian) ---- */

static void pad(sbx_buf_t *b, size_t a)
{
  while (b->len % a)
    sbx__buf_putc(b, '\0');
}

static void put_u32(sbx_buf_t *b, uint32_t v)
{
  pad(b, 4);
  sbx__buf_append(b, &v, 4);
}

static void put_u64(sbx_buf_t *b, uint64_t v)
{
  pad(b, 8);
  sbx__buf_append(b, &v, 8);
}

static void put_str(sbx_buf_t *b, const char *s)
{
  put_u32(b, (uint32_t) strlen(s));
  sbx__buf_append(b, s, strlen(s) + 1);
}

static void put_sig(sbx_buf_t *b, const char *s)
{
  sbx__buf_putc(b, (char) strlen(s));
  sbx__buf_append(b, s, strlen(s) + 1);
}

/* An array's length is patched in once its elements are written; it excludes the padding that
 * aligns the first element. */
static size_t array_begin(sbx_buf_t *b, size_t elem_align, size_t *start)
{
  put_u32(b, 0);
  size_t at = b->len - 4;
  pad(b, elem_align);
  *start = b->len;
  return at;
}

static void array_end(sbx_buf_t *b, size_t at, size_t start)
{
  uint32_t n = (uint32_t) (b->len - start);
  memcpy(b->data + at, &n, 4);
}

/* One (sv) property: name, then a variant of signature sig. */
static void prop_begin(sbx_buf_t *b, const char *name, const char *sig)
{
  pad(b, 8);
  put_str(b, name);
  put_sig(b, sig);
}

static void header_field(sbx_buf_t *b, uint8_t code, const char *sig, const char *val)
{
  pad(b, 8);
  sbx__buf_putc(b, (char) code);
  put_sig(b, sig);
  if (strcmp(sig, "g") == 0)
    put_sig(b, val);
  else
    put_str(b, val);
}

/* ---- the reply ---- */

struct rd {
  const uint8_t *p;
  size_t len, off;
};

static bool rd_align(struct rd *r, size_t a)
{
  size_t n = (r->off + a - 1) / a * a;
  if (n > r->len)
    return false;
  r->off = n;
  return true;
}

static bool rd_u32(struct rd *r, uint32_t *v)
{
  if (!rd_align(r, 4) || r->len - r->off < 4)
    return false;
  memcpy(v, r->p + r->off, 4);
  r->off += 4;
  return true;
}

/* D-Bus strings hold no NUL but their terminator */
static bool rd_str(struct rd *r, const char **s, uint32_t *n)
{
  if (!rd_u32(r, n) || r->len - r->off < (size_t) *n + 1 || r->p[r->off + *n] != '\0' ||
      memchr(r->p + r->off, '\0', *n) != NULL)
    return false;
  *s = (const char *) r->p + r->off;
  r->off += *n + 1;
  return true;
}

static bool rd_sig(struct rd *r, const char **s, uint32_t *n)
{
  if (r->off >= r->len)
    return false;
  *n = r->p[r->off++];
  if (r->len - r->off < (size_t) *n + 1 || r->p[r->off + *n] != '\0' ||
      memchr(r->p + r->off, '\0', *n) != NULL)
    return false;
  *s = (const char *) r->p + r->off;
  r->off += *n + 1;
  return true;
}

size_t sbx__dbus_message_size(const void *p, size_t len)
{
  const uint8_t *b = p;
  if (len < 16 || b[0] != 'l')
    return 0;
  uint32_t body, fields;
  memcpy(&body, b + 4, 4);
  memcpy(&fields, b + 12, 4);
  if (body > SBX_DBUS_MAX || fields > SBX_DBUS_MAX)
    return 0;
  size_t hdr = (16 + (size_t) fields + 7) / 8 * 8;
  return hdr + body;
}

int sbx__dbus_parse_reply(const void *p, size_t len, uint32_t serial, char **error)
{
  *error = NULL;
  size_t total = sbx__dbus_message_size(p, len);
  if (total == 0 || total > len)
    return -1;
  const uint8_t *b = p;
  uint8_t type = b[1];
  uint32_t body_len, fields_len;
  memcpy(&body_len, b + 4, 4);
  memcpy(&fields_len, b + 12, 4);
  struct rd r = {b, 16 + (size_t) fields_len, 16};
  uint32_t reply_to = 0;
  const char *err_name = NULL;
  const char *sig = "";
  while (r.off < r.len) {
    if (!rd_align(&r, 8) || r.off >= r.len)
      break;
    uint8_t code = r.p[r.off++];
    const char *vsig;
    uint32_t n;
    if (!rd_sig(&r, &vsig, &n) || n != 1)
      return -1;
    const char *s;
    uint32_t u;
    if (vsig[0] == 's' || vsig[0] == 'o') {
      if (!rd_str(&r, &s, &n))
        return -1;
      if (code == 4)
        err_name = s;
    } else if (vsig[0] == 'g') {
      if (!rd_sig(&r, &s, &n))
        return -1;
      if (code == 8)
        sig = s;
    } else if (vsig[0] == 'u') {
      if (!rd_u32(&r, &u))
        return -1;
      if (code == 5)
        reply_to = u;
    } else {
      return -1; /* no other type appears in a reply's header */
    }
  }
  if (reply_to != serial)
    return 1; /* not ours (a signal, another call's reply): skip it */
  if (type == 2)
    return 0;
  if (type != 3)
    return -1;
  struct rd body = {b, total, total - body_len};
  const char *msg = NULL;
  uint32_t n;
  if (sig[0] == 's' && !rd_str(&body, &msg, &n))
    return -1;
  *error = xasprintf("%s%s%s", err_name && *err_name ? err_name : "error", msg ? ": " : "",
                     msg ? msg : "");
  return 0;
}

/* ---- the call ---- */

static int recv_all(int fd, sbx_buf_t *in, size_t want, sbx_error_t *err)
{
  while (in->len < want) {
    char chunk[4096];
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 10000) <= 0)
      return sbx__make_error(err, ETIMEDOUT, SBX_E_UNSUPPORTED, "no answer from systemd");
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0)
      return sbx__make_error(err, n < 0 ? errno : ECONNRESET, SBX_E_UNSUPPORTED,
                             "read from " SYSTEMD_PRIVATE);
    sbx__buf_append(in, chunk, (size_t) n);
  }
  return 0;
}

/* root's manager, or an ordinary user's own (user@.service, which Debian 12 delegates cpu,
 * memory and pids): its private socket in $XDG_RUNTIME_DIR (default /run/user/<uid>) */
char *sbx__systemd_socket(void)
{
  if (geteuid() == 0)
    return xstrdup(SYSTEMD_PRIVATE);
  const char *rt = getenv("XDG_RUNTIME_DIR");
  if (rt && rt[0] == '/')
    return xasprintf("%s/systemd/private", rt);
  return xasprintf("/run/user/%u/systemd/private", (unsigned) geteuid());
}

static int dbus_connect(sbx_error_t *err)
{
  cleanup_free char *path = sbx__systemd_socket();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return sbx__make_error(err, e, SBX_E_UNSUPPORTED, "connect to systemd at %s%s", path,
                           geteuid() ? " (the user's manager: is user@.service running? "
                                       "`loginctl enable-linger` starts it)"
                                     : "");
  }
  char uid[16], hex[40] = "", line[128];
  snprintf(uid, sizeof uid, "%u", (unsigned) geteuid());
  for (size_t i = 0; uid[i]; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char) uid[i]);
  int n = snprintf(line, sizeof line, "%cAUTH EXTERNAL %s\r\n", '\0', hex);
  sbx_buf_t in = {0};
  if (sbx__write_all(fd, line, (size_t) n) < 0) {
    close(fd);
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "write to %s", path);
  }
  while (memchr(in.data ? in.data : "", '\n', in.len) == NULL) {
    if (recv_all(fd, &in, in.len + 1, err) < 0 || in.len > 512) {
      sbx__buf_free(&in);
      close(fd);
      return sbx__make_error(err, EPROTO, SBX_E_UNSUPPORTED, "systemd's authentication");
    }
  }
  bool ok = in.len >= 3 && memcmp(in.data, "OK ", 3) == 0;
  sbx__buf_free(&in);
  if (!ok || sbx__write_all(fd, "BEGIN\r\n", 7) < 0) {
    close(fd);
    return sbx__make_error(err, EACCES, SBX_E_UNSUPPORTED, "systemd refused our authentication");
  }
  return fd;
}

/* Calls member of systemd's Manager with body (its arguments, of signature sig; consumed) and
 * waits for the reply: 0, or -1 with systemd's error. */
static int call(const char *member, const char *sig, sbx_buf_t *body, sbx_error_t *err)
{
  const uint32_t serial = 1;
  sbx_buf_t msg = {0};
  sbx__buf_append(&msg, "l\1\0\1", 4);
  put_u32(&msg, (uint32_t) body->len);
  put_u32(&msg, serial);
  size_t fstart;
  size_t fat = array_begin(&msg, 8, &fstart);
  header_field(&msg, 1, "o", "/org/freedesktop/systemd1");
  header_field(&msg, 2, "s", "org.freedesktop.systemd1.Manager");
  header_field(&msg, 3, "s", member);
  header_field(&msg, 6, "s", "org.freedesktop.systemd1");
  header_field(&msg, 8, "g", sig);
  array_end(&msg, fat, fstart);
  pad(&msg, 8);
  sbx__buf_append(&msg, body->data, body->len);
  sbx__buf_free(body);

  cleanup_close int fd = dbus_connect(err);
  if (fd < 0) {
    sbx__buf_free(&msg);
    return -1;
  }
  int r = sbx__write_all(fd, msg.data, msg.len);
  sbx__buf_free(&msg);
  if (r < 0)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "write to systemd");
  sbx_buf_t in = {0};
  for (;;) {
    size_t total;
    if (recv_all(fd, &in, 16, err) < 0 || (total = sbx__dbus_message_size(in.data, in.len)) == 0 ||
        recv_all(fd, &in, total, err) < 0) {
      sbx__buf_free(&in);
      return sbx__make_error(err, EPROTO, SBX_E_UNSUPPORTED, "a malformed answer from systemd");
    }
    char *error = NULL;
    int pr = sbx__dbus_parse_reply(in.data, in.len, serial, &error);
    if (pr == 1) { /* skip a message that is not our reply */
      memmove(in.data, in.data + total, in.len - total);
      in.len -= total;
      continue;
    }
    sbx__buf_free(&in);
    if (pr < 0)
      return sbx__make_error(err, EPROTO, SBX_E_UNSUPPORTED, "a malformed answer from systemd");
    if (error) {
      sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "%s", error);
      free(error);
      return -1;
    }
    return 0;
  }
}

static void add_limits(sbx_buf_t *b, const struct sbx_launch_spec *s)
{
  if (s->memory_bytes) {
    prop_begin(b, "MemoryMax", "t");
    put_u64(b, s->memory_bytes);
    prop_begin(b, "MemorySwapMax", "t");
    put_u64(b, 0);
  }
  if (s->pids > 0) {
    prop_begin(b, "TasksMax", "t");
    put_u64(b, (uint64_t) s->pids);
  }
  if (s->cpu_millis) {
    prop_begin(b, "CPUQuotaPerSecUSec", "t");
    put_u64(b, s->cpu_millis * 1000);
  }
}

int sbx__cgroup_systemd_scope(const struct sbx_launch_spec *s, const char *name, pid_t pid,
                              char **path_out, sbx_error_t *err)
{
  *path_out = NULL;
  cleanup_free char *unit = xasprintf("sbx-%s.scope", name);
  const char *slice = s->cgroup_slice && *s->cgroup_slice ? s->cgroup_slice : "sbx.slice";
  sbx_buf_t body = {0};
  put_str(&body, unit);
  put_str(&body, "fail");
  size_t start;
  size_t at = array_begin(&body, 8, &start);
  prop_begin(&body, "Description", "s");
  cleanup_free char *desc = xasprintf("sbx sandbox %s", s->id);
  put_str(&body, desc);
  prop_begin(&body, "Slice", "s");
  put_str(&body, slice);
  prop_begin(&body, "Delegate", "b");
  put_u32(&body, 1);
  prop_begin(&body, "CollectMode", "s");
  put_str(&body, "inactive-or-failed");
  prop_begin(&body, "PIDs", "au");
  size_t pstart;
  size_t pat = array_begin(&body, 4, &pstart);
  put_u32(&body, (uint32_t) pid);
  array_end(&body, pat, pstart);
  add_limits(&body, s);
  array_end(&body, at, start);
  at = array_begin(&body, 8, &start); /* no auxiliary units */
  array_end(&body, at, start);

  if (call("StartTransientUnit", "ssa(sv)a(sa(sv))", &body, err) < 0) {
    sbx__error_wrap(err, "systemd: start %s in %s", unit, slice);
    return -1;
  }
  /* The job moves pid into the scope's cgroup; its path is what /proc says once it has. */
  cleanup_free char *proc = xasprintf("/proc/%d/cgroup", (int) pid);
  cleanup_free char *want = xasprintf("/%s", unit);
  for (int i = 0; i < 1000; i++) {
    cleanup_free char *data = NULL;
    if (sbx__read_file_at(AT_FDCWD, proc, 1 << 16, &data, NULL) < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "read %s", proc);
    char *line = strstr(data, "0::");
    if (line) {
      line += 3;
      line[strcspn(line, "\n")] = '\0';
      size_t n = strlen(line), w = strlen(want);
      if (n >= w && strcmp(line + n - w, want) == 0 && strstr(line, "/..") == NULL) {
        *path_out = xasprintf(SBX_CG_ROOT "%s", line);
        return 0;
      }
    }
    usleep(5000);
  }
  return sbx__make_error(err, ETIMEDOUT, SBX_E_UNSUPPORTED,
                         "systemd did not move the sandbox into %s within 5 s", unit);
}

int sbx__cgroup_systemd_set_limits(const char *unit, uint64_t memory_bytes, uint64_t cpu_millis,
                                   sbx_error_t *err)
{
  /* SetUnitProperties(name, runtime, properties): a limit written to cgroupfs alone is what
   * systemd rewrites from the unit's own properties at the next daemon-reload */
  struct sbx_launch_spec s = {.memory_bytes = memory_bytes, .cpu_millis = cpu_millis};
  sbx_buf_t body = {0};
  put_str(&body, unit);
  put_u32(&body, 1);
  size_t start;
  size_t at = array_begin(&body, 8, &start);
  add_limits(&body, &s);
  if (memory_bytes == 0) {
    prop_begin(&body, "MemoryMax", "t");
    put_u64(&body, UINT64_MAX); /* infinity */
  }
  if (cpu_millis == 0) {
    prop_begin(&body, "CPUQuotaPerSecUSec", "t");
    put_u64(&body, UINT64_MAX);
  }
  array_end(&body, at, start);
  if (call("SetUnitProperties", "sba(sv)", &body, err) < 0) {
    sbx__error_wrap(err, "systemd: set the limits of %s", unit);
    return -1;
  }
  return 0;
}
