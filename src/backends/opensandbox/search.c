/* list_dir, glob and grep on a remote sandbox, answering exactly as the linux backend does.
 *
 * Fast path: the same native search, run remotely. This static sbx-init binary is uploaded
 * once into the sandbox and `sbx-init search ...` runs through execd; its JSON lines carry the
 * results and the truncated flag.
 * Fallback (a remote that cannot run it, e.g. another architecture or a noexec /tmp): the
 * remote tree is listed through execd's directory API and rebuilt as an empty skeleton in a
 * private local directory, where the very same walker runs (grep downloads the candidate files
 * into the skeleton first). Slower, but the answers cannot drift from the linux backend's. */
#include "osb.h"
#include "search.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#define REMOTE_HELPER "/tmp/.sbx-init-" SBX_VERSION
#define HELPER_TIMEOUT_MS (300 * 1000)

struct helper_out {
  sbx_strv_t *strs;
  struct sbx_grep_match *m;
  size_t n;
  bool done, ok, truncated;
  char *kind, *msg;
  bool bad;
};

static void parse_line(struct helper_out *h, const char *line)
{
  json_t *o = json_loads(line, 0, NULL);
  if (o == NULL) {
    h->bad = true;
    return;
  }
  json_t *ok = json_object_get(o, "ok");
  const char *p = json_string_value(json_object_get(o, "p"));
  if (json_is_boolean(ok)) {
    h->done = true;
    h->ok = json_is_true(ok);
    h->truncated = json_is_true(json_object_get(o, "truncated"));
    const char *k = json_string_value(json_object_get(o, "kind"));
    const char *m = json_string_value(json_object_get(o, "msg"));
    h->kind = k ? xstrdup(k) : NULL;
    h->msg = m ? xstrdup(m) : NULL;
  } else if (p && h->strs) {
    sbx__strv_push(h->strs, p);
  } else if (p) {
    const char *t = json_string_value(json_object_get(o, "t"));
    h->m = xreallocarray(h->m, h->n + 1, sizeof *h->m);
    h->m[h->n++] = (struct sbx_grep_match){
        xstrdup(p), (uint64_t) json_integer_value(json_object_get(o, "n")), xstrdup(t ? t : "")};
  }
  json_decref(o);
}

static int kind_of(const char *name)
{
  for (int k = 1; k < SBX_E_KIND_MAX; k++)
    if (strcmp(sbx_error_kind_name(k), name) == 0)
      return k;
  return SBX_E_IO;
}

/* Runs the remote helper; 1 = answered (ok or an error in *err), 0 = unavailable.
 * SBX_OPENSANDBOX_REMOTE_SEARCH=0 turns the fast path off (the fallback is then always used). */
static int run_helper(struct osb_remote *r, const char *args, uint64_t timeout_ms,
                      struct helper_out *h, sbx_error_t *err)
{
  const char *knob = getenv("SBX_OPENSANDBOX_REMOTE_SEARCH");
  if (knob && strcmp(knob, "0") == 0)
    return 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    /* the search's deadline travels in the environment (sbx-init search reads it) */
    cleanup_free char *cmd = xasprintf("SBX_SEARCH_TIMEOUT_MS=%llu %s search %s",
                                       (unsigned long long) timeout_ms, REMOTE_HELPER, args);
    struct osb_cmd c = {.command = cmd, .timeout_ms = HELPER_TIMEOUT_MS, .cap = 256u << 20};
    struct osb_cmd_result res;
    if (osb_command(r, &c, &res, err) < 0)
      return -1;
    int code = res.has_code ? res.exit_code : -1;
    if (code == 127 && attempt == 0) {
      /* not there yet: upload this very binary (it is static) */
      osb_cmd_result_free(&res);
      cleanup_free char *local = sbx__init_path();
      cleanup_close int fd = open(local, O_RDONLY | O_CLOEXEC);
      sbx_error_t uerr = NULL;
      if (fd < 0 || osb_upload(r, REMOTE_HELPER, NULL, 0, fd, 0755, &uerr) < 0) {
        sbx_error_release(&uerr);
        return 0;
      }
      continue;
    }
    if (code != 0 && code != 1) {
      osb_cmd_result_free(&res);
      return 0; /* cannot run here (exec format, noexec...) */
    }
    char *s = res.out.data ? res.out.data : (char *) "";
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"))
      parse_line(h, line);
    osb_cmd_result_free(&res);
    if (!h->done || h->bad)
      return 0;
    if (!h->ok)
      return sbx__make_error(err, 0, kind_of(h->kind ? h->kind : "io"), "%s",
                             h->msg ? h->msg : "remote search failed"),
             1;
    return 1;
  }
  return 0;
}

static void helper_out_free(struct helper_out *h)
{
  free(h->kind);
  free(h->msg);
  sbx_grep_matches_free(h->m, h->n);
}

/* ---- fallback: a local skeleton of the remote tree ---- */

struct skeleton {
  char dir[64]; /* local root standing for the remote root */
  char *remote_root;
};

static void skeleton_remove(struct skeleton *s)
{
  if (s->dir[0])
    sbx__rm_rf_at(AT_FDCWD, s->dir);
  free(s->remote_root);
}

/* A relative path from a remote listing is only ever used below the skeleton if every
 * component is a plain name. */
static bool rel_safe(const char *rel)
{
  if (*rel == '\0' || *rel == '/')
    return false;
  for (const char *c = rel; *c;) {
    const char *e = strchr(c, '/');
    size_t n = e ? (size_t) (e - c) : strlen(c);
    if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      return false;
    c += n + (e != NULL);
  }
  return true;
}

/* Creates rel (a path below the skeleton root) as a directory or an empty file; components
 * that could not come from a real listing ("", ".", "..") are refused. */
static bool skeleton_add(int rootfd, const char *rel, bool dir)
{
  cleanup_free char *p = xstrdup(rel);
  int fd = dup(rootfd);
  char *save = NULL;
  char *next;
  for (char *c = strtok_r(p, "/", &save); c; c = next) {
    next = strtok_r(NULL, "/", &save);
    if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0) {
      close(fd);
      return false;
    }
    if (next || dir) {
      mkdirat(fd, c, 0755);
      int sub = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      close(fd);
      if (sub < 0)
        return false;
      fd = sub;
    } else {
      int f = openat(fd, c, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (f >= 0)
        close(f);
    }
  }
  close(fd);
  return true;
}

static int skeleton_build(struct osb_remote *r, const char *root, struct skeleton *s,
                          json_t **listing, sbx_error_t *err)
{
  memset(s, 0, sizeof *s);
  json_t *infos;
  if (osb_list(r, root, OSB_LIST_DEPTH, 256u << 20, &infos, err) < 0)
    return -1;
  snprintf(s->dir, sizeof s->dir, "/tmp/sbx-skeleton-XXXXXX");
  if (mkdtemp(s->dir) == NULL) {
    json_decref(infos);
    s->dir[0] = '\0';
    return sbx__make_error(err, errno, SBX_E_IO, "make a local directory");
  }
  s->remote_root = xstrdup(root);
  size_t rl = strlen(root);
  while (rl > 1 && root[rl - 1] == '/')
    rl--;
  cleanup_close int rootfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t i;
  json_t *v;
  json_array_foreach(infos, i, v)
  {
    const char *path = json_string_value(json_object_get(v, "path"));
    const char *type = json_string_value(json_object_get(v, "type"));
    if (path == NULL || type == NULL || strncmp(path, root, rl) != 0 || (path[rl] != '/' && rl > 1))
      continue;
    const char *rel = path + rl + (rl > 1);
    if (!rel_safe(rel))
      continue;
    if (strcmp(type, "directory") == 0)
      skeleton_add(rootfd, rel, true);
    else if (strcmp(type, "file") == 0)
      skeleton_add(rootfd, rel, false);
    /* symlinks and others are never reported: leave them out */
  }
  *listing = infos;
  return 0;
}

/* Maps a skeleton path back to the remote path. */
static char *unskeleton(const struct skeleton *s, const char *p)
{
  size_t n = strlen(s->dir);
  const char *rest = p + n;
  size_t rl = strlen(s->remote_root);
  while (rl > 1 && s->remote_root[rl - 1] == '/')
    rl--;
  if (rl == 1 && *rest == '/')
    return xstrdup(rest);
  return xasprintf("%.*s%s", (int) rl, s->remote_root, rest);
}

static void unskeleton_strv(const struct skeleton *s, sbx_strv_t *v)
{
  for (size_t i = 0; i < v->n; i++) {
    char *m = unskeleton(s, v->v[i]);
    free(v->v[i]);
    v->v[i] = m;
  }
}

int osb_list_dir(struct osb_remote *r, const char *path, int depth, sbx_strv_t *out,
                 sbx_error_t *err)
{
  cleanup_free char *qp = sbx__shell_quote(path);
  cleanup_free char *args = xasprintf("ls %s %d", qp, depth);
  struct helper_out h = {.strs = out};
  /* the longest deadline: list_dir's answer has no truncated flag */
  uint64_t deadline = sbx__now_ms() + SBX_SEARCH_TIMEOUT_MAX_MS;
  int rc = run_helper(r, args, SBX_SEARCH_TIMEOUT_MAX_MS, &h, err);
  helper_out_free(&h);
  if (rc != 0)
    return rc < 0 ? -1 : (*err ? -1 : 0);
  sbx__strv_free(out);
  struct skeleton s;
  json_t *listing;
  if (skeleton_build(r, path, &s, &listing, err) < 0)
    return -1;
  json_decref(listing);
  bool truncated;
  rc = sbx__search_list_dir(s.dir, depth, 100000, deadline, out, &truncated, err);
  if (rc == 0)
    unskeleton_strv(&s, out);
  skeleton_remove(&s);
  return rc;
}

int osb_glob(struct osb_remote *r, const char *path, const char *pattern, bool include_dirs,
             size_t max, sbx_strv_t *out, bool *truncated, sbx_error_t *err)
{
  cleanup_free char *qp = sbx__shell_quote(path);
  cleanup_free char *qpat = sbx__shell_quote(pattern);
  cleanup_free char *args = xasprintf("glob %s %s %d %zu", qp, qpat, include_dirs, max);
  struct helper_out h = {.strs = out};
  uint64_t deadline = sbx__now_ms() + SBX_SEARCH_DEFAULT_MS;
  int rc = run_helper(r, args, SBX_SEARCH_DEFAULT_MS, &h, err);
  *truncated = h.truncated;
  helper_out_free(&h);
  if (rc != 0)
    return rc < 0 ? -1 : (*err ? -1 : 0);
  sbx__strv_free(out);
  struct skeleton s;
  json_t *listing;
  if (skeleton_build(r, path, &s, &listing, err) < 0)
    return -1;
  json_decref(listing);
  rc = sbx__search_glob(s.dir, pattern, include_dirs, max, deadline, out, truncated, err);
  if (rc == 0)
    unskeleton_strv(&s, out);
  skeleton_remove(&s);
  return rc;
}

static int write_sink(void *arg, const char *data, size_t len)
{
  return sbx__write_all(*(int *) arg, data, len) < 0 ? 1 : 0;
}

/* Fetches one remote file into local (files over grep's size limit are left empty: grep skips
 * them anyway). A terminal error is returned; others mean "skip this file". */
static int fetch(struct osb_remote *r, const char *remote, const char *local, sbx_error_t *err)
{
  cleanup_close int fd = open(local, O_WRONLY | O_TRUNC | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return 0;
  sbx_error_t derr = NULL;
  if (osb_download(r, remote, SBX_SEARCH_MAX_FILE_BYTES, write_sink, &fd, NULL, 0, &derr) < 0) {
    if (derr->kind == SBX_E_BACKEND) {
      *err = derr;
      return -1;
    }
    sbx_error_release(&derr);
    if (ftruncate(fd, 0) < 0)
      return 0;
  }
  return 0;
}

/* Runs the local grep over the skeleton and maps the paths back. */
static int grep_local(const struct skeleton *s, const char *local_root, const char *pattern,
                      const struct sbx_grep_opts *o, uint64_t deadline, struct sbx_grep_match **m,
                      size_t *n, bool *truncated, sbx_error_t *err)
{
  sbx_grep_matches_t gm = {0};
  int rc = sbx__search_grep(local_root, pattern, o->glob, o->literal, o->case_sensitive,
                            o->max_results, deadline, &gm, truncated, err);
  if (rc == 0) {
    *m = xzalloc((gm.n + 1) * sizeof **m);
    for (size_t k = 0; k < gm.n; k++)
      (*m)[k] = (struct sbx_grep_match){unskeleton(s, gm.v[k].path), gm.v[k].line_number,
                                        xstrdup(gm.v[k].line)};
    *n = gm.n;
  }
  sbx__search_matches_free(&gm);
  return rc;
}

int osb_grep(struct osb_remote *r, const char *path, const char *pattern,
             const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n, bool *truncated,
             sbx_error_t *err)
{
  *m = NULL;
  *n = 0;
  cleanup_free char *qp = sbx__shell_quote(path);
  cleanup_free char *qpat = sbx__shell_quote(pattern);
  cleanup_free char *qglob = sbx__shell_quote(o->glob && *o->glob ? o->glob : "-");
  cleanup_free char *args = xasprintf("grep %s %s %s %d %d %zu", qp, qpat, qglob, o->literal,
                                      o->case_sensitive, o->max_results);
  struct helper_out h = {0};
  uint64_t timeout_ms = (uint64_t) (o->timeout * 1000.0 + 0.5);
  uint64_t deadline = sbx__now_ms() + timeout_ms;
  int rc = run_helper(r, args, timeout_ms, &h, err);
  if (rc != 0) {
    *truncated = h.truncated;
    if (rc > 0 && *err == NULL) {
      *m = h.m, *n = h.n;
      h.m = NULL, h.n = 0;
    }
    helper_out_free(&h);
    return rc < 0 || *err ? -1 : 0;
  }
  helper_out_free(&h);
  /* the pattern is checked before anything is fetched */
  sbx_grep_pattern_t *gp = sbx__grep_pattern_new(pattern, o->literal, o->case_sensitive, err);
  if (gp == NULL)
    return -1;
  sbx__grep_pattern_free(gp);
  struct skeleton s;
  json_t *listing = NULL;
  sbx_error_t lerr = NULL;
  if (skeleton_build(r, path, &s, &listing, &lerr) < 0) {
    if (lerr->kind != SBX_E_NOT_DIR) {
      *err = lerr;
      return -1;
    }
    /* a single file: fetch it alone into a fresh skeleton */
    sbx_error_release(&lerr);
    memset(&s, 0, sizeof s);
    snprintf(s.dir, sizeof s.dir, "/tmp/sbx-skeleton-XXXXXX");
    if (mkdtemp(s.dir) == NULL)
      return sbx__make_error(err, errno, SBX_E_IO, "make a local directory");
    const char *base = strrchr(path, '/');
    s.remote_root = xstrndup(path, (size_t) (base - path));
    cleanup_free char *local = xasprintf("%s/%s", s.dir, base + 1);
    rc = fetch(r, path, local, err);
    if (rc == 0)
      rc = grep_local(&s, local, pattern, o, deadline, m, n, truncated, err);
    skeleton_remove(&s);
    return rc;
  }
  /* fill the candidate files: regular, at most 1,000,000 bytes, not ignored, through the glob */
  size_t rl = strlen(path);
  while (rl > 1 && path[rl - 1] == '/')
    rl--;
  size_t i;
  json_t *v;
  rc = 0;
  json_array_foreach(listing, i, v)
  {
    const char *p = json_string_value(json_object_get(v, "path"));
    const char *type = json_string_value(json_object_get(v, "type"));
    json_int_t size = json_integer_value(json_object_get(v, "size"));
    if (rc < 0 || p == NULL || type == NULL || strcmp(type, "file") != 0 || size <= 0 ||
        size > SBX_SEARCH_MAX_FILE_BYTES || strncmp(p, path, rl) != 0)
      continue;
    const char *rel = p + rl + (rl > 1);
    if (!rel_safe(rel) || sbx__search_ignored_path(rel) ||
        (o->glob && *o->glob && !sbx__path_matches(o->glob, rel)))
      continue;
    cleanup_free char *local = xasprintf("%s/%s", s.dir, rel);
    rc = fetch(r, p, local, err);
  }
  json_decref(listing);
  if (rc == 0)
    rc = grep_local(&s, s.dir, pattern, o, deadline, m, n, truncated, err);
  skeleton_remove(&s);
  return rc;
}
