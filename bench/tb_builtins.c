/* tb's in-process cases: libsbx calls, host-side floors for the file operations, and sbxd's
 * HTTP API. Each is timed around one call of run(); setup and teardown are not timed. */
#include "http.h"
#include "tb.h"

#include <sbx/sbx.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- providers, shared by every case of one tb run with the same home and config ---- */

struct prov {
  char *home, *config;
  struct sbx_config *cfg;
  sbx_provider_t *p;
  int refs;
  struct prov *next;
  /* with `spares` configured, a thread keeps them ready, as sbxd does (its work is not timed
   * but competes for the CPUs with whatever runs meanwhile) */
  pthread_t filler;
  bool filling;
  atomic_bool stop;
};
static struct prov *provs;

static char *err_text(sbx_error_t *err, const char *what)
{
  char *m = tb_fmt("%s: %s", what, err && *err ? (*err)->msg : "unknown error");
  sbx_error_release(err);
  return m;
}

static void *filler_main(void *arg)
{
  struct prov *v = arg;
  while (!atomic_load(&v->stop)) {
    sbx_spares_fill(v->p, NULL);
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static struct prov *prov_get(const char *home, const char *config, char **errmsg)
{
  for (struct prov *v = provs; v; v = v->next)
    if (strcmp(v->home, home) == 0 && strcmp(v->config, config) == 0) {
      v->refs++;
      return v;
    }
  sbx_error_t err = NULL;
  struct sbx_config *cfg =
      strcmp(config, "-") == 0 ? sbx_config_new_default() : sbx_config_load(config, &err);
  if (cfg == NULL) {
    *errmsg = err_text(&err, "load config");
    return NULL;
  }
  sbx_provider_t *p = sbx_provider_new(home, cfg, &err);
  if (p == NULL) {
    sbx_config_free(cfg);
    *errmsg = err_text(&err, "open provider");
    return NULL;
  }
  struct prov *v = calloc(1, sizeof *v);
  if (v == NULL)
    abort();
  *v = (struct prov){
      .home = strdup(home), .config = strdup(config), .cfg = cfg, .p = p, .refs = 1, .next = provs};
  if (cfg->spares > 0)
    v->filling = pthread_create(&v->filler, NULL, filler_main, v) == 0;
  provs = v;
  return v;
}

static void prov_put(struct prov *v)
{
  if (--v->refs > 0)
    return;
  for (struct prov **pp = &provs; *pp; pp = &(*pp)->next)
    if (*pp == v) {
      *pp = v->next;
      break;
    }
  if (v->filling) {
    atomic_store(&v->stop, true);
    pthread_join(v->filler, NULL);
  }
  sbx_provider_free(v->p);
  sbx_config_free(v->cfg);
  free(v->home);
  free(v->config);
  free(v);
}

/* ---- a scope's sandbox, acquired once ---- */

struct scoped {
  struct prov *prov;
  sbx_sandbox_t *sb;
  char id[17];
  char **args; /* the builtin's own arguments after HOME CONFIG USER THREAD */
  int nargs;
  /* per builtin */
  char *buf;
  size_t size;
  const char **argv;
};

static void *scoped_setup(int argc, char **argv, char **errmsg)
{
  struct prov *v = prov_get(argv[0], argv[1], errmsg);
  if (v == NULL)
    return NULL;
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(v->p, argv[2], argv[3], &err);
  if (sb == NULL) {
    *errmsg = err_text(&err, "acquire");
    prov_put(v);
    return NULL;
  }
  struct scoped *s = calloc(1, sizeof *s);
  if (s == NULL)
    abort();
  s->prov = v;
  s->sb = sb;
  snprintf(s->id, sizeof s->id, "%s", sbx_sandbox_id(sb));
  s->args = argv + 4;
  s->nargs = argc - 4;
  return s;
}

static void scoped_teardown(void *st)
{
  struct scoped *s = st;
  sbx_release(s->prov->p, s->id, NULL);
  prov_put(s->prov);
  free(s->buf);
  free(s->argv);
  free(s);
}

static int exec_check(sbx_sandbox_t *sb, const char *cmd, const char *const *argv, char **errmsg)
{
  struct sbx_exec_opts o = {.argv = argv};
  struct sbx_exec_result r;
  sbx_error_t err = NULL;
  if (sbx_execute_command(sb, cmd, &o, &r, &err) < 0) {
    *errmsg = err_text(&err, "execute_command");
    return 1;
  }
  int code = r.exit_code;
  if (code != 0)
    *errmsg = tb_fmt("exit code %d: %s", code, r.output ? r.output : "");
  sbx_exec_result_free(&r);
  return code == 0 ? 0 : (code > 0 ? code : 128 - code);
}

/* @sbx-exec HOME CONFIG USER THREAD COMMAND */
static int exec_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  return exec_check(s->sb, s->args[0], NULL, errmsg);
}

/* @sbx-exec-argv HOME CONFIG USER THREAD ARG... (no shell) */
static void *exec_argv_setup(int argc, char **argv, char **errmsg)
{
  struct scoped *s = scoped_setup(argc, argv, errmsg);
  if (s == NULL)
    return NULL;
  s->argv = calloc((size_t) s->nargs + 1, sizeof *s->argv);
  if (s->argv == NULL)
    abort();
  for (int i = 0; i < s->nargs; i++)
    s->argv[i] = s->args[i];
  return s;
}

static int exec_argv_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  return exec_check(s->sb, s->args[0], s->argv, errmsg);
}

/* Text content for the write cases: 63 letters and a newline per line. */
static char *text_of(size_t size)
{
  char *b = malloc(size ? size : 1);
  if (b == NULL)
    abort();
  for (size_t i = 0; i < size; i++)
    b[i] = (i % 64 == 63) ? '\n' : (char) ('a' + i % 26);
  return b;
}

/* @sbx-write HOME CONFIG USER THREAD PATH SIZE */
static void *write_setup(int argc, char **argv, char **errmsg)
{
  struct scoped *s = scoped_setup(argc, argv, errmsg);
  if (s == NULL)
    return NULL;
  s->size = (size_t) strtoull(s->args[1], NULL, 10);
  s->buf = text_of(s->size);
  return s;
}

static int write_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  sbx_error_t err = NULL;
  if (sbx_write_file(s->sb, s->args[0], s->buf, s->size, false, &err) < 0) {
    *errmsg = err_text(&err, "write_file");
    return 1;
  }
  return 0;
}

/* @sbx-read HOME CONFIG USER THREAD PATH */
static int read_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  sbx_error_t err = NULL;
  char *text = NULL;
  size_t len = 0;
  if (sbx_read_file(s->sb, s->args[0], SBX_LINE_NONE, SBX_LINE_NONE, &text, &len, &err) < 0) {
    *errmsg = err_text(&err, "read_file");
    return 1;
  }
  free(text);
  return len > 0 ? 0 : 2;
}

/* @sbx-ls HOME CONFIG USER THREAD PATH DEPTH */
static int ls_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  sbx_error_t err = NULL;
  char **e = NULL;
  size_t n = 0;
  if (sbx_list_dir(s->sb, s->args[0], atoi(s->args[1]), &e, &n, &err) < 0) {
    *errmsg = err_text(&err, "list_dir");
    return 1;
  }
  sbx_strv_free_array(e, n);
  return n > 0 ? 0 : 2;
}

/* @sbx-glob HOME CONFIG USER THREAD PATH PATTERN MAX */
static int glob_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  sbx_error_t err = NULL;
  char **m = NULL;
  size_t n = 0;
  bool trunc = false;
  if (sbx_glob(s->sb, s->args[0], s->args[1], false, (size_t) atol(s->args[2]), &m, &n, &trunc,
               &err) < 0) {
    *errmsg = err_text(&err, "glob");
    return 1;
  }
  sbx_strv_free_array(m, n);
  return n > 0 ? 0 : 2;
}

/* @sbx-grep HOME CONFIG USER THREAD PATH PATTERN MAX */
static int grep_run(void *st, unsigned long idx, char **errmsg)
{
  struct scoped *s = st;
  sbx_error_t err = NULL;
  struct sbx_grep_match *m = NULL;
  size_t n = 0;
  bool trunc = false;
  struct sbx_grep_opts o = {.max_results = (size_t) atol(s->args[2])};
  if (sbx_grep(s->sb, s->args[0], s->args[1], &o, &m, &n, &trunc, &err) < 0) {
    *errmsg = err_text(&err, "grep");
    return 1;
  }
  sbx_grep_matches_free(m, n);
  return n > 0 ? 0 : 2;
}

/* ---- new sandboxes per run ---- */

struct fresh {
  struct prov *prov;
  const char *user, *prefix, *cmd;
  char id[17];
};

/* @sbx-run HOME CONFIG COMMAND: a throw-away sandbox runs COMMAND and is destroyed (all timed) */
static void *run_setup(int argc, char **argv, char **errmsg)
{
  struct prov *v = prov_get(argv[0], argv[1], errmsg);
  if (v == NULL)
    return NULL;
  struct fresh *f = calloc(1, sizeof *f);
  if (f == NULL)
    abort();
  f->prov = v;
  f->cmd = argv[2];
  if (argc >= 5) { /* @sbx-first: USER PREFIX COMMAND */
    f->user = argv[2];
    f->prefix = argv[3];
    f->cmd = argv[4];
  }
  return f;
}

static void fresh_teardown(void *st)
{
  struct fresh *f = st;
  prov_put(f->prov);
  free(f);
}

static int run_run(void *st, unsigned long idx, char **errmsg)
{
  struct fresh *f = st;
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(f->prov->p, NULL, NULL, &err);
  if (sb == NULL) {
    *errmsg = err_text(&err, "acquire");
    return 1;
  }
  char id[17];
  snprintf(id, sizeof id, "%s", sbx_sandbox_id(sb));
  int r = exec_check(sb, f->cmd, NULL, errmsg);
  if (sbx_destroy(f->prov->p, id, &err) < 0 && r == 0) {
    *errmsg = err_text(&err, "destroy");
    r = 1;
  }
  sbx_error_release(&err);
  return r;
}

/* @sbx-first HOME CONFIG USER PREFIX COMMAND: acquire (USER, PREFIX<idx>), a new scope, and run
 * COMMAND in it (timed); the sandbox is destroyed afterwards (not timed). */
static int first_run(void *st, unsigned long idx, char **errmsg)
{
  struct fresh *f = st;
  char thread[128];
  snprintf(thread, sizeof thread, "%s%lu", f->prefix, idx);
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(f->prov->p, f->user, thread, &err);
  if (sb == NULL) {
    *errmsg = err_text(&err, "acquire");
    f->id[0] = '\0';
    return 1;
  }
  snprintf(f->id, sizeof f->id, "%s", sbx_sandbox_id(sb));
  return exec_check(sb, f->cmd, NULL, errmsg);
}

static void first_after(void *st, unsigned long idx)
{
  struct fresh *f = st;
  if (f->id[0])
    sbx_destroy(f->prov->p, f->id, NULL);
  f->id[0] = '\0';
}

/* @sbx-cycle HOME CONFIG USER THREAD COMMAND: what one `sbx exec` does in-process: acquire the
 * scope's (warm) sandbox, which health-checks it, run COMMAND, release it (all timed). */
static void *cycle_setup(int argc, char **argv, char **errmsg)
{
  struct prov *v = prov_get(argv[0], argv[1], errmsg);
  if (v == NULL)
    return NULL;
  struct fresh *f = calloc(1, sizeof *f);
  if (f == NULL)
    abort();
  f->prov = v;
  f->user = argv[2];
  f->prefix = argv[3]; /* the thread itself */
  f->cmd = argv[4];
  return f;
}

static int cycle_run(void *st, unsigned long idx, char **errmsg)
{
  struct fresh *f = st;
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(f->prov->p, f->user, f->prefix, &err);
  if (sb == NULL) {
    *errmsg = err_text(&err, "acquire");
    return 1;
  }
  char id[17];
  snprintf(id, sizeof id, "%s", sbx_sandbox_id(sb));
  int r = exec_check(sb, f->cmd, NULL, errmsg);
  if (sbx_release(f->prov->p, id, &err) < 0 && r == 0) {
    *errmsg = err_text(&err, "release");
    r = 1;
  }
  sbx_error_release(&err);
  return r;
}

/* ---- host floors for the file operations (same disk, no sandbox) ---- */

struct hostf {
  const char *path;
  char *buf;
  size_t size;
};

/* @host-write PATH SIZE: write a temporary file, fsync, rename over PATH (what write_file does) */
static void *hostw_setup(int argc, char **argv, char **errmsg)
{
  struct hostf *h = calloc(1, sizeof *h);
  if (h == NULL)
    abort();
  h->path = argv[0];
  if (argc > 1) {
    h->size = (size_t) strtoull(argv[1], NULL, 10);
    h->buf = text_of(h->size);
  }
  return h;
}

static void hostf_teardown(void *st)
{
  struct hostf *h = st;
  free(h->buf);
  free(h);
}

static int hostw_run(void *st, unsigned long idx, char **errmsg)
{
  struct hostf *h = st;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", h->path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *errmsg = tb_fmt("open %s: %s", tmp, strerror(errno));
    return 1;
  }
  size_t off = 0;
  while (off < h->size) {
    ssize_t w = write(fd, h->buf + off, h->size - off);
    if (w <= 0) {
      *errmsg = tb_fmt("write: %s", strerror(errno));
      close(fd);
      return 1;
    }
    off += (size_t) w;
  }
  int r = fsync(fd);
  close(fd);
  if (r < 0 || rename(tmp, h->path) < 0) {
    *errmsg = tb_fmt("fsync/rename: %s", strerror(errno));
    return 1;
  }
  return 0;
}

/* @host-read PATH */
static int hostr_run(void *st, unsigned long idx, char **errmsg)
{
  struct hostf *h = st;
  int fd = open(h->path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0) {
    *errmsg = tb_fmt("open %s: %s", h->path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return 1;
  }
  char *b = malloc((size_t) sb.st_size + 1);
  if (b == NULL)
    abort();
  size_t off = 0;
  ssize_t n;
  while ((n = read(fd, b + off, (size_t) sb.st_size + 1 - off)) > 0)
    off += (size_t) n;
  close(fd);
  free(b);
  return n < 0 ? 1 : 0;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *) a, *(char *const *) b);
}

/* @host-ls PATH: readdir, names into an array, sorted */
static int hostls_run(void *st, unsigned long idx, char **errmsg)
{
  struct hostf *h = st;
  DIR *d = opendir(h->path);
  if (d == NULL) {
    *errmsg = tb_fmt("opendir %s: %s", h->path, strerror(errno));
    return 1;
  }
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      v = realloc(v, cap * sizeof *v);
      if (v == NULL)
        abort();
    }
    v[n++] = e->d_type == DT_DIR ? tb_fmt("%s/", e->d_name) : strdup(e->d_name);
  }
  closedir(d);
  qsort(v, n, sizeof *v, cmp_str);
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
  return n > 0 ? 0 : 2;
}

/* ---- sbxd (OpenSandbox lifecycle + execd) ---- */

struct sbxd {
  struct http_target server, execd;
  struct http_header auth;
  size_t n_auth;
  struct http_header *eh; /* the endpoint's headers */
  size_t n_eh;
  char *body; /* the /command request */
  char id[256];
};

static void sbxd_free_endpoint(struct sbxd *s)
{
  for (size_t i = 0; i < s->n_eh; i++) {
    free(s->eh[i].name);
    free(s->eh[i].value);
  }
  free(s->eh);
  s->eh = NULL;
  s->n_eh = 0;
}

/* Creates a sandbox and looks up its execd endpoint. */
static int sbxd_create(struct sbxd *s, char **errmsg)
{
  static const char req[] = "{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"sleep\",\"infinity\"],"
                            "\"resourceLimits\":{}}";
  int status = 0, r;
  char *resp = NULL;
  if ((r = http_request(&s->server, "POST", "/v1/sandboxes", &s->auth, s->n_auth, req, &status,
                        &resp, NULL, errmsg)) < 0)
    return r;
  json_t *j = json_loads(resp, 0, NULL);
  const char *id = json_string_value(json_object_get(j, "id"));
  const char *state = json_string_value(json_object_get(json_object_get(j, "status"), "state"));
  if (status / 100 != 2 || id == NULL) {
    *errmsg = tb_fmt("POST /v1/sandboxes: HTTP %d: %.200s", status, resp);
    json_decref(j);
    free(resp);
    return -1;
  }
  snprintf(s->id, sizeof s->id, "%s", id);
  bool running = state == NULL || strcmp(state, "Running") == 0;
  json_decref(j);
  free(resp);
  char path[512];
  for (int tries = 0; !running && tries < 1000; tries++) { /* Pending: poll, at most 10 s */
    usleep(10000);
    snprintf(path, sizeof path, "/v1/sandboxes/%s", s->id);
    if ((r = http_request(&s->server, "GET", path, &s->auth, s->n_auth, NULL, &status, &resp, NULL,
                          errmsg)) < 0)
      return r;
    j = json_loads(resp, 0, NULL);
    state = json_string_value(json_object_get(json_object_get(j, "status"), "state"));
    running = state && strcmp(state, "Running") == 0;
    bool failed = state && strcmp(state, "Failed") == 0;
    json_decref(j);
    free(resp);
    if (failed) {
      *errmsg = tb_fmt("sandbox %s failed to start", s->id);
      return -1;
    }
  }
  snprintf(path, sizeof path, "/v1/sandboxes/%s/endpoints/44772", s->id);
  if ((r = http_request(&s->server, "GET", path, &s->auth, s->n_auth, NULL, &status, &resp, NULL,
                        errmsg)) < 0)
    return r;
  j = json_loads(resp, 0, NULL);
  const char *ep = json_string_value(json_object_get(j, "endpoint"));
  if (status != 200 || ep == NULL || http_parse_target(ep, &s->execd) < 0) {
    *errmsg = tb_fmt("GET %s: HTTP %d: %.200s", path, status, resp);
    json_decref(j);
    free(resp);
    return -1;
  }
  sbxd_free_endpoint(s);
  json_t *h = json_object_get(j, "headers");
  const char *k;
  json_t *v;
  s->eh = calloc(json_object_size(h) + 1, sizeof *s->eh);
  if (s->eh == NULL)
    abort();
  json_object_foreach(h, k, v)
  {
    if (json_is_string(v)) {
      s->eh[s->n_eh].name = strdup(k);
      s->eh[s->n_eh++].value = strdup(json_string_value(v));
    }
  }
  json_decref(j);
  free(resp);
  return 0;
}

static int sbxd_delete(struct sbxd *s, char **errmsg)
{
  if (s->id[0] == '\0')
    return 0;
  char path[512];
  snprintf(path, sizeof path, "/v1/sandboxes/%s", s->id);
  int status = 0;
  char *resp = NULL;
  char *e = NULL;
  int r =
      http_request(&s->server, "DELETE", path, &s->auth, s->n_auth, NULL, &status, &resp, NULL, &e);
  free(resp);
  s->id[0] = '\0';
  if (r == 0 && status / 100 == 2) {
    free(e);
    return 0;
  }
  if (errmsg)
    *errmsg = e ? e : tb_fmt("DELETE %s: HTTP %d", path, status);
  else
    free(e);
  return -1;
}

static int sbxd_command(struct sbxd *s, char **errmsg)
{
  int code = -1;
  int r = http_command(&s->execd, s->eh, s->n_eh, s->body, &code, errmsg);
  if (r == HTTP_TIMEOUT)
    return TB_TIMEOUT;
  if (r < 0)
    return 1;
  if (code != 0)
    *errmsg = tb_fmt("exit code %d", code);
  return code == 0 ? 0 : (code > 0 ? code : 255);
}

/* @sbxd-exec URL COMMAND: one sandbox, then POST /command per run (to its terminal event).
 * @sbxd-cold URL COMMAND: per run create, endpoint, POST /command, DELETE (all timed). */
static void *sbxd_setup_common(int argc, char **argv, char **errmsg, bool create)
{
  struct sbxd *s = calloc(1, sizeof *s);
  if (s == NULL)
    abort();
  if (http_parse_target(argv[0], &s->server) < 0) {
    *errmsg = tb_fmt("bad URL '%s'", argv[0]);
    free(s);
    return NULL;
  }
  const char *key = getenv("SBXD_API_KEY");
  if (key && *key) {
    static char auth_name[] = "OPEN-SANDBOX-API-KEY";
    s->auth.name = auth_name;
    s->auth.value = (char *) key;
    s->n_auth = 1;
  }
  json_t *b = json_pack("{s:s, s:b}", "command", argv[1], "background", 0);
  s->body = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  if (create && sbxd_create(s, errmsg) < 0) {
    sbxd_delete(s, NULL);
    sbxd_free_endpoint(s);
    free(s->body);
    free(s);
    return NULL;
  }
  return s;
}

static void *sbxd_exec_setup(int argc, char **argv, char **errmsg)
{
  return sbxd_setup_common(argc, argv, errmsg, true);
}

static void *sbxd_cold_setup(int argc, char **argv, char **errmsg)
{
  return sbxd_setup_common(argc, argv, errmsg, false);
}

static int sbxd_exec_run(void *st, unsigned long idx, char **errmsg)
{
  return sbxd_command(st, errmsg);
}

static int sbxd_cold_run(void *st, unsigned long idx, char **errmsg)
{
  struct sbxd *s = st;
  int c = sbxd_create(s, errmsg);
  if (c < 0) {
    sbxd_delete(s, NULL);
    return c == HTTP_TIMEOUT ? TB_TIMEOUT : 1;
  }
  int r = sbxd_command(s, errmsg);
  if (sbxd_delete(s, r == 0 ? errmsg : NULL) < 0 && r == 0)
    r = 1;
  return r;
}

static void sbxd_teardown(void *st)
{
  struct sbxd *s = st;
  sbxd_delete(s, NULL);
  sbxd_free_endpoint(s);
  free(s->body);
  free(s);
}

/* ---- the table ---- */

static const struct tb_builtin builtins[] = {
    {"@sbx-exec", "HOME CONFIG USER THREAD COMMAND", 5, scoped_setup, exec_run, NULL,
     scoped_teardown},
    {"@sbx-exec-argv", "HOME CONFIG USER THREAD ARG...", 5, exec_argv_setup, exec_argv_run, NULL,
     scoped_teardown},
    {"@sbx-run", "HOME CONFIG COMMAND", 3, run_setup, run_run, NULL, fresh_teardown},
    {"@sbx-first", "HOME CONFIG USER THREAD_PREFIX COMMAND", 5, run_setup, first_run, first_after,
     fresh_teardown},
    {"@sbx-cycle", "HOME CONFIG USER THREAD COMMAND", 5, cycle_setup, cycle_run, NULL,
     fresh_teardown},
    {"@sbx-write", "HOME CONFIG USER THREAD PATH SIZE", 6, write_setup, write_run, NULL,
     scoped_teardown},
    {"@sbx-read", "HOME CONFIG USER THREAD PATH", 5, scoped_setup, read_run, NULL, scoped_teardown},
    {"@sbx-ls", "HOME CONFIG USER THREAD PATH DEPTH", 6, scoped_setup, ls_run, NULL,
     scoped_teardown},
    {"@sbx-glob", "HOME CONFIG USER THREAD PATH PATTERN MAX", 7, scoped_setup, glob_run, NULL,
     scoped_teardown},
    {"@sbx-grep", "HOME CONFIG USER THREAD PATH PATTERN MAX", 7, scoped_setup, grep_run, NULL,
     scoped_teardown},
    {"@host-write", "PATH SIZE", 2, hostw_setup, hostw_run, NULL, hostf_teardown},
    {"@host-read", "PATH", 1, hostw_setup, hostr_run, NULL, hostf_teardown},
    {"@host-ls", "PATH", 1, hostw_setup, hostls_run, NULL, hostf_teardown},
    {"@sbxd-exec", "URL COMMAND", 2, sbxd_exec_setup, sbxd_exec_run, NULL, sbxd_teardown},
    {"@sbxd-cold", "URL COMMAND", 2, sbxd_cold_setup, sbxd_cold_run, NULL, sbxd_teardown},
};

const struct tb_builtin *tb_builtin_find(const char *name)
{
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (strcmp(builtins[i].name, name) == 0)
      return &builtins[i];
  return NULL;
}

void tb_builtins_usage(void)
{
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    printf("  %-16s %s\n", builtins[i].name, builtins[i].usage);
  printf("  (CONFIG '-' = defaults; SBXD_API_KEY in the environment is sent to sbxd)\n");
}
