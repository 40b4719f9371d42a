/* libFuzzer target for sbxd's real request handling: the whole daemon (every src/daemon source
 * but main.c, over libsbx and the linux backend, with real sandboxes) runs in this process on
 * 127.0.0.1:<free port> over a fresh temporary home, and every input is sent to it as an HTTP
 * request over a loopback TCP connection (written, then half-closed, then read until sbxd closes
 * or a deadline passes).
 *
 * Input:
 *   - first byte < 0xf0: one request to a real route. The route is byte 0 % the routes below,
 *     byte 1 holds flags (an unknown sandbox id, no access token, a chunked body,
 *     with/without /v1, the direct or server-proxy endpoint form, Expect: 100-continue, HEAD
 *     for GET), the rest is the route's tail: its body (JSON or multipart/form-data, with a
 *     correct Content-Length), or a suffix of its path (percent-encoded where a request target
 *     needs it) up to the first '\n', followed by the body or by extra header lines.
 *   - first byte >= 0xf0: the rest goes on the wire as it is.
 *   The provisioner routes carry X-API-Key (PROVISIONER_API_KEY is set) and the AIO routes
 *   live below /aio/{ID}/{TOKEN}; for both, the no-token flag drops or falsifies the credential.
 *   In both, "{ID}", "{TOKEN}" and "{SESSION}" are replaced by the fixture sandbox's id, its
 *   access token and a bash session of it. fuzz/make_seeds.py writes the seeds
 *   (fuzz/corpus/sbxd_request/) from the same route table.
 *
 * Oracle, besides the sanitizers:
 *   - a response starts with "HTTP/1.1 " and a 3-digit status;
 *   - no 5xx unless the request reached a sandbox (a route that operates on the fixture with its
 *     token, a create, a contract acquire or op: a sandbox operation may fail for real, and an
 *     app port nobody listens on is a 502); for the rest (validation errors, unknown ids, no
 *     token, the health route...) a 5xx is a bug, but for libmicrohttpd's 505 to an HTTP
 *     version it does not speak;
 *   - a well-formed request that does not reach a sandbox is answered (within 5 s);
 *   - after every input, GET /health still answers 200, and sbxd finishes every request and
 *     worker of the input (at once, or within 10 s of the destruction of its sandboxes).
 *
 * Bounds: the configuration caps the contract's scope sandboxes (replicas 2; the lifecycle API's
 * are outside any cap), every sandbox (256 MiB, 64 pids, half a CPU) and contract commands
 * (10 s); after every input the sandboxes the input made are destroyed, and the fixture
 * is recreated when it was deleted, resumed when paused, and replaced every 30 s or when a
 * request or a command of the input still runs half a second after it (then every request must
 * end within 10 s: a hang is reported). At exit (atexit) the server is stopped, every sandbox of
 * the home destroyed (`sbx --home H down`) and the home removed; a watchdog process forked
 * before any thread does the same if this process dies without exiting (a crash, a timeout, a
 * signal, SIGKILL included), so no sandbox, cgroup or process outlives a run. The watchdog's
 * name is sbxd-fuzz-reap, but its command line is the fuzzer's: stop a run by the fuzzer's pid,
 * never with `pkill -f`, which would take the watchdog with it.
 *
 * Needs root (namespaces and cgroups), as the rest of the test suites. sbx-init comes from
 * $SBX_INIT, else the build's (SBX_FUZZ_INIT, set by fuzz/CMakeLists.txt). */
#include "../src/daemon/ctx.h"
#include "../src/daemon/http.h"
#include "../src/daemon/registry.h"
#include "../src/daemon/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the routes (keep in step with ROUTES in fuzz/make_seeds.py) ---- */

enum { T_NONE, T_BODY, T_SUFFIX, T_SUFFIX_BODY }; /* what the tail is */
enum { C_NONE, C_JSON, C_MULTIPART };             /* the body's type */
/* where the path lives: the lifecycle API, execd and port endpoints, the provisioner API (at the
 * root, X-API-Key), a sandbox's AIO API (below /aio/{id}/{token}) */
enum { P_LIFECYCLE, P_EXECD, P_ENDPOINT, P_PROVISIONER, P_AIO };
#define BOUNDARY "sbxfuzzboundary"

struct route {
  const char *name; /* ROUTES in fuzz/make_seeds.py, in this order */
  const char *method, *path;
  int where, tail, ctype;
  bool reach; /* operates on a sandbox: a 5xx may be real */
};

static const struct route routes[] = {
    {"health", "GET", "/health", P_LIFECYCLE, T_NONE, C_NONE, false},
    {"create", "POST", "/sandboxes", P_LIFECYCLE, T_BODY, C_JSON, true},
    {"list", "GET", "/sandboxes", P_LIFECYCLE, T_SUFFIX, C_NONE, false},
    {"get", "GET", "/sandboxes/{ID}", P_LIFECYCLE, T_SUFFIX, C_NONE, false},
    {"delete", "DELETE", "/sandboxes/{ID}", P_LIFECYCLE, T_NONE, C_NONE, true},
    {"metadata", "PATCH", "/sandboxes/{ID}/metadata", P_LIFECYCLE, T_BODY, C_JSON, true},
    {"pause", "POST", "/sandboxes/{ID}/pause", P_LIFECYCLE, T_NONE, C_NONE, true},
    {"resume", "POST", "/sandboxes/{ID}/resume", P_LIFECYCLE, T_NONE, C_NONE, true},
    {"renew", "POST", "/sandboxes/{ID}/renew-expiration", P_LIFECYCLE, T_BODY, C_JSON, true},
    {"endpoint", "GET", "/sandboxes/{ID}/endpoints/", P_LIFECYCLE, T_SUFFIX, C_NONE, false},
    {"events", "POST", "/metrics/events", P_LIFECYCLE, T_BODY, C_JSON, false},
    {"snapshots", "GET", "/snapshots", P_LIFECYCLE, T_SUFFIX, C_NONE, false},
    {"acquire", "POST", "/contract/acquire", P_LIFECYCLE, T_BODY, C_JSON, true},
    {"release", "POST", "/contract/release", P_LIFECYCLE, T_BODY, C_JSON, true},
    {"contract", "POST", "/sandboxes/{ID}/contract/", P_LIFECYCLE, T_SUFFIX_BODY, C_JSON, true},
    {"ping", "GET", "/ping", P_EXECD, T_NONE, C_NONE, true},
    {"command", "POST", "/command", P_EXECD, T_BODY, C_JSON, true},
    {"interrupt", "DELETE", "/command", P_EXECD, T_SUFFIX, C_NONE, true},
    {"status", "GET", "/command/status/", P_EXECD, T_SUFFIX, C_NONE, true},
    {"logs", "GET", "/command/", P_EXECD, T_SUFFIX, C_NONE, true},
    {"session", "POST", "/session", P_EXECD, T_BODY, C_JSON, true},
    {"session_run", "POST", "/session/", P_EXECD, T_SUFFIX_BODY, C_JSON, true},
    {"session_delete", "DELETE", "/session/", P_EXECD, T_SUFFIX, C_NONE, true},
    {"metrics", "GET", "/metrics", P_EXECD, T_NONE, C_NONE, true},
    {"files_info", "GET", "/files/info", P_EXECD, T_SUFFIX, C_NONE, true},
    {"files_delete", "DELETE", "/files", P_EXECD, T_SUFFIX, C_NONE, true},
    {"files_mv", "POST", "/files/mv", P_EXECD, T_BODY, C_JSON, true},
    {"files_perm", "POST", "/files/permissions", P_EXECD, T_BODY, C_JSON, true},
    {"files_search", "GET", "/files/search", P_EXECD, T_SUFFIX, C_NONE, true},
    {"files_replace", "POST", "/files/replace", P_EXECD, T_SUFFIX_BODY, C_JSON, true},
    {"upload", "POST", "/files/upload", P_EXECD, T_BODY, C_MULTIPART, true},
    {"download", "GET", "/files/download", P_EXECD, T_SUFFIX, C_NONE, true},
    {"dir_list", "GET", "/directories/list", P_EXECD, T_SUFFIX, C_NONE, true},
    {"mkdir", "POST", "/directories", P_EXECD, T_BODY, C_JSON, true},
    {"rmdir", "DELETE", "/directories", P_EXECD, T_SUFFIX, C_NONE, true},
    {"execd_proxy", "GET", "/proxy/", P_EXECD, T_SUFFIX, C_NONE, true},
    {"port", "GET", "/", P_ENDPOINT, T_SUFFIX, C_NONE, true},
    {"code", "POST", "/code", P_EXECD, T_BODY, C_JSON, true},
    /* DeerFlow's provisioner API: F_NO_TOKEN drops the X-API-Key */
    {"prov_caps", "GET", "/api/capabilities", P_PROVISIONER, T_NONE, C_NONE, false},
    {"prov_create", "POST", "/api/sandboxes", P_PROVISIONER, T_BODY, C_JSON, true},
    {"prov_list", "GET", "/api/sandboxes", P_PROVISIONER, T_SUFFIX, C_NONE, false},
    {"prov_get", "GET", "/api/sandboxes/", P_PROVISIONER, T_SUFFIX, C_NONE, false},
    {"prov_delete", "DELETE", "/api/sandboxes/", P_PROVISIONER, T_SUFFIX, C_NONE, true},
    /* the AIO API: F_NO_TOKEN puts a wrong token in the path */
    {"aio_context", "GET", "/v1/sandbox", P_AIO, T_NONE, C_NONE, true},
    {"aio_shell", "POST", "/v1/shell/", P_AIO, T_SUFFIX_BODY, C_JSON, true},
    {"aio_session_delete", "DELETE", "/v1/shell/sessions/", P_AIO, T_SUFFIX, C_NONE, true},
    {"aio_bash", "POST", "/v1/bash/exec", P_AIO, T_BODY, C_JSON, true},
    {"aio_file", "POST", "/v1/file/", P_AIO, T_SUFFIX_BODY, C_JSON, true},
    {"aio_download", "GET", "/v1/file/download", P_AIO, T_SUFFIX, C_NONE, true},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

enum {
  F_UNKNOWN_ID = 1,  /* a sandbox id nobody has */
  F_NO_TOKEN = 2,    /* no X-EXECD-ACCESS-TOKEN */
  F_CHUNKED = 4,     /* Transfer-Encoding: chunked instead of Content-Length */
  F_V1_TOGGLE = 8,   /* lifecycle without /v1; execd with /v1 in front */
  F_PROXY_FORM = 16, /* /sandboxes/{id}/proxy/PORT instead of /direct/{id}/PORT */
  F_EXPECT = 32,     /* Expect: 100-continue */
  F_HEAD = 64,       /* HEAD instead of GET */
};
#define RAW_MODE 0xf0
#define UNKNOWN_ID "0123456789abcdef"
#define FUZZ_PROVISIONER_KEY "fuzz-provisioner-key"

/* ---- state ---- */

static char home[64];
static char *cfg_path;
static struct sockaddr_in server;
static pid_t self_pid, reaper_pid = -1;
static int reaper_fd = -1;
static char fixture_id[17], fixture_token[65], fixture_session[65];
static uint64_t fixture_born;
static bool torn_down;
static bool verbose; /* SBXD_FUZZ_VERBOSE=1: a line per input (request line, status) */

static void fail(const char *what, const char *req, size_t req_len, const sbx_buf_t *resp)
{
  fprintf(stderr, "\nfuzz_sbxd_request: %s\n--- request (%zu bytes) ---\n%.*s\n", what, req_len,
          (int) (req_len > 4096 ? 4096 : req_len), req ? req : "");
  if (resp)
    fprintf(stderr, "--- response (%zu bytes) ---\n%.*s\n", resp->len,
            (int) (resp->len > 4096 ? 4096 : resp->len), resp->data ? resp->data : "");
  abort();
}

/* ---- HTTP over loopback ---- */

/* Sends req, half-closes, and reads the answer until sbxd closes, the deadline passes or 1 MiB
 * arrived. Returns false if nobody answered (no byte before the deadline). */
static bool exchange(const char *req, size_t len, sbx_buf_t *resp, int deadline_ms)
{
  resp->len = 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    fail("socket failed", req, len, NULL);
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  /* loopback itself can be short of ports or backlog for a moment (thousands of connections in
   * TIME_WAIT): retry those; a refusal means sbxd stopped listening */
  int tries = 0;
  while (connect(fd, (struct sockaddr *) &server, sizeof server) < 0) {
    int e = errno;
    if ((e != EAGAIN && e != EADDRNOTAVAIL && e != ETIMEDOUT && e != EINTR) || ++tries > 40) {
      char what[96];
      snprintf(what, sizeof what, "cannot connect to sbxd: %s", strerror(e));
      fail(what, req, len, NULL);
    }
    close(fd);
    usleep(50000);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      fail("socket failed", req, len, NULL);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  for (size_t off = 0; off < len;) {
    ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
    if (n <= 0)
      break; /* sbxd answered early (e.g. 413) and closed: read what it said */
    off += (size_t) n;
  }
  shutdown(fd, SHUT_WR);
  uint64_t end = sbx__now_ms() + (uint64_t) deadline_ms;
  char buf[16384];
  for (;;) {
    uint64_t now = sbx__now_ms();
    if (now >= end || resp->len >= (1u << 20))
      break;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, (int) (end - now));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    sbx__buf_append(resp, buf, (size_t) n);
  }
  close(fd);
  return resp->len > 0;
}

/* The final status of a response (interim 100 Continue heads skipped); -1 if the bytes do not
 * start with "HTTP/1.1 " and a 3-digit status followed by a space. */
static int response_status(const sbx_buf_t *resp, const char **body)
{
  const char *p = resp->data, *end = resp->data + resp->len;
  for (;;) {
    if (end - p < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0 || p[9] < '1' || p[9] > '5' || p[10] < '0' ||
        p[10] > '9' || p[11] < '0' || p[11] > '9' || p[12] != ' ')
      return -1;
    int status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    const char *blank = memmem(p, (size_t) (end - p), "\r\n\r\n", 4);
    if (body)
      *body = blank ? blank + 4 : end;
    if (status == 100 && blank && blank + 4 < end) {
      p = blank + 4;
      continue;
    }
    return status;
  }
}

/* A request of the harness itself (Content-Length body); returns the status, the body in
 * *json if it is JSON. */
static int call(const char *method, const char *path, const char *body, json_t **json)
{
  sbx_buf_t req = {0}, resp = {0};
  sbx__buf_printf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path);
  if (fixture_token[0])
    sbx__buf_printf(&req, "%s: %s\r\n", SBXD_TOKEN_HEADER, fixture_token);
  if (body)
    sbx__buf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                    strlen(body), body);
  else
    sbx__buf_puts(&req, "\r\n");
  exchange(req.data, req.len, &resp, 30000);
  const char *b = NULL;
  int status = response_status(&resp, &b);
  if (json)
    *json = status > 0 && b ? json_loadb(b, resp.len - (size_t) (b - resp.data), 0, NULL) : NULL;
  sbx__buf_free(&req);
  sbx__buf_free(&resp);
  return status;
}

/* ---- the fixture: one sandbox the execd routes talk to ---- */

static void fixture_create(void)
{
  fixture_token[0] = fixture_session[0] = '\0';
  json_t *j = NULL;
  const char *id = NULL;
  int st = 0;
  for (int attempt = 0; attempt < 3 && id == NULL; attempt++) {
    if (attempt) {
      json_decref(j);
      sleep(1);
    }
    st = call("POST", "/v1/sandboxes",
              "{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"true\"],"
              "\"resourceLimits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"}}",
              &j);
    id = st == 202 ? json_string_value(json_object_get(j, "id")) : NULL;
  }
  if (id == NULL || strlen(id) != 16) {
    fprintf(stderr,
            "fuzz_sbxd_request: cannot create the fixture sandbox (status %d; this "
            "target needs root, namespaces and cgroups)\n",
            st);
    abort();
  }
  snprintf(fixture_id, sizeof fixture_id, "%s", id);
  json_decref(j);
  struct box *b = box_get(fixture_id);
  if (b == NULL)
    abort();
  snprintf(fixture_token, sizeof fixture_token, "%s", b->token);
  box_put(b);
  char path[160];
  snprintf(path, sizeof path, "/direct/%s/44772/session", fixture_id);
  st = call("POST", path, "{}", &j);
  const char *sid = json_string_value(json_object_get(j, "session_id"));
  if (st == 200 && sid)
    snprintf(fixture_session, sizeof fixture_session, "%s", sid);
  json_decref(j);
  snprintf(path, sizeof path, "/v1/sandboxes/%s/contract/write_file", fixture_id);
  call("POST", path,
       "{\"path\":\"/mnt/user-data/workspace/a.txt\",\"content\":\"one\\ntwo\\r\\nthree\\n\"}",
       NULL);
  fixture_born = sbx__now_ms();
}

static unsigned mhd_connections(void)
{
  return sbxd_server_connections();
}

/* Waits until sbxd serves no connection and runs no worker, for at most ms. */
static bool idle_within(int ms)
{
  for (int waited = 0;; waited += 2) {
    if (mhd_connections() == 0 && atomic_load(&srv.workers) == 0)
      return true;
    if (waited >= ms)
      return false;
    struct timespec ts = {0, 2 * 1000000};
    nanosleep(&ts, NULL);
  }
}

/* Destroys what the last input made (every box but the fixture, then every other sandbox of
 * the home, and the scopes' thread folders), and makes the fixture usable again. */
static void restore(void)
{
  for (int kind = BOX_MANAGED; kind <= BOX_SCOPE; kind++) {
    size_t n;
    struct box **v = box_list(kind, &n);
    for (size_t i = 0; i < n; i++)
      if (strcmp(v[i]->id, fixture_id) != 0)
        box_remove(v[i], "fuzz", NULL);
    box_list_free(v, n);
  }
  struct sbx_sandbox_info *infos = NULL;
  size_t n = 0;
  bool scopes = false;
  if (sbx_list(srv.admin, &infos, &n, NULL) == 0) {
    for (size_t i = 0; i < n; i++)
      if (strcmp(infos[i].id, fixture_id) != 0) {
        if (infos[i].paused)
          sbx_pause(srv.admin, infos[i].id, false, NULL);
        sbx_destroy(srv.admin, infos[i].id, NULL);
        scopes |= infos[i].thread != NULL;
      }
    sbx_sandbox_info_free(infos, n);
  }
  if (scopes) {
    cleanup_free char *users = xasprintf("%s/users", home);
    sbx__rm_rf_at(AT_FDCWD, users);
  }

  /* Nothing of the input may still run when the next one starts (and libFuzzer counts
   * allocations): a request still in a handler, a command's worker. What runs on past a
   * moment (a command nobody reads any more, a long search) dies with the fixture, which is
   * replaced; after that, every request must end. The fixture is also replaced now and then:
   * whatever the inputs left running in it (background commands) dies with it. */
  struct box *b = box_get(fixture_id);
  bool idle = idle_within(500);
  if (b && (!idle || sbx__now_ms() - fixture_born > 30000)) {
    box_remove(b, "fuzz_recycle", NULL);
    box_put(b);
    b = NULL;
  }
  if (!idle && !idle_within(10000))
    fail("sbxd still busy 10 s after the input's sandboxes were destroyed", NULL, 0, NULL);
  if (b == NULL) {
    fixture_create();
    return;
  }
  bool paused = box_paused(b);
  box_put(b);
  if (paused) {
    char path[96];
    snprintf(path, sizeof path, "/v1/sandboxes/%s/resume", fixture_id);
    int st = call("POST", path, NULL, NULL);
    if (st != 202)
      fail("cannot resume the fixture", path, strlen(path), NULL);
  }
}

/* ---- set-up and tear-down ---- */

/* `sbx --home H down`. */
static void destroy_sandboxes(sbx_provider_t *p)
{
  sbx_error_t err = NULL;
  if (sbx_shutdown(p, &err) < 0) {
    fprintf(stderr, "fuzz_sbxd_request: shutdown: %s\n", err->msg);
    sbx_error_release(&err);
  }
}

/* The watchdog: waits for this process to go; unless it said "done" first, it cleans up. */
static void reaper_start(void)
{
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    abort();
  reaper_pid = fork();
  if (reaper_pid < 0)
    abort();
  if (reaper_pid == 0) {
    close(p[1]);
    prctl(PR_SET_NAME, "sbxd-fuzz-reap");
    signal(SIGINT, SIG_IGN); /* ^C goes to the whole group: outlive the parent, then clean */
    char c;
    ssize_t n;
    do
      n = read(p[0], &c, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1)
      _exit(0);
    sbx_error_t err = NULL;
    struct sbx_config *cfg = sbx_config_load(cfg_path, &err);
    sbx_provider_t *pr = cfg ? sbx_provider_new(home, cfg, &err) : NULL;
    if (pr) {
      destroy_sandboxes(pr);
      sbx_provider_free(pr);
      sbx__rm_rf_at(AT_FDCWD, home);
      fprintf(stderr, "fuzz_sbxd_request: the fuzzer died; sandboxes destroyed, %s removed\n",
              home);
    }
    _exit(0);
  }
  close(p[0]);
  reaper_fd = p[1];
}

/* As main.c's orderly stop, then every sandbox destroyed and the home removed. Sandboxes go
 * first: a handler blocked in a sandbox operation (a contract command) then returns, so that
 * MHD_stop_daemon, which joins the connection threads, does not wait for it. */
static void teardown(void)
{
  if (torn_down || getpid() != self_pid)
    return;
  torn_down = true;
  atomic_store(&srv.stopping, true);
  sbx_shutdown(srv.admin, NULL);
  sbxd_server_stop();
  for (int i = 0; i < 100 && atomic_load(&srv.workers) > 0; i++) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
  }
  int busy = atomic_load(&srv.workers);
  sbxd_registry_stop(busy == 0);
  if (busy == 0) {
    /* with workers still running (they hold handles) the memory is left to the exit */
    sbx_provider_free(srv.admin);
    sbx_provider_free(srv.p);
  }
  /* anything made meanwhile (a create that raced the stop), then the home itself */
  sbx_provider_t *p = sbx_provider_new(home, srv.cfg, NULL);
  if (p) {
    destroy_sandboxes(p);
    sbx_provider_free(p);
  }
  sbx__rm_rf_at(AT_FDCWD, home);
  if (busy == 0) {
    sbx_config_free(srv.cfg);
    free(srv.home);
    free(srv.listen);
    free(cfg_path);
  }
  if (reaper_fd >= 0) {
    (void) !write(reaper_fd, "x", 1);
    close(reaper_fd);
    waitpid(reaper_pid, NULL, 0);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void) argc;
  (void) argv;
  self_pid = getpid();
  verbose = getenv("SBXD_FUZZ_VERBOSE") && strcmp(getenv("SBXD_FUZZ_VERBOSE"), "1") == 0;
  setenv("SBXD_LOG_LEVEL", "error", 0); /* a line per request otherwise */
  setenv("PROVISIONER_API_KEY", FUZZ_PROVISIONER_KEY, 1);
  setenv("SBX_PULL", "never", 1); /* an image.uri not in the store is never looked up online */
#ifdef SBX_FUZZ_INIT
  setenv("SBX_INIT", SBX_FUZZ_INIT, 0);
#endif
  signal(SIGPIPE, SIG_IGN);
  json_object_seed(0);
  sbx_set_log_handler(sbxd_lib_log, NULL);

  const char *tmp = getenv("TMPDIR");
  snprintf(home, sizeof home, "%s/sbxd-fuzz-XXXXXX",
           tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (mkdtemp(home) == NULL) {
    perror("fuzz_sbxd_request: mkdtemp");
    abort();
  }
  cfg_path = xasprintf("%s/config.yaml", home);
  cleanup_free char *yaml = xasprintf("sandbox:\n"
                                      "  replicas: 2\n"
                                      "  memory_mib: 256\n"
                                      "  pids: 64\n"
                                      "  cpus: 0.5\n"
                                      "  tmp_size_mib: 16\n"
                                      "  home_size_mib: 16\n"
                                      "  idle_timeout: 60\n"
                                      "  bash_command_timeout: 10\n"
                                      "  health_check_timeout: 5\n"
                                      "  network: none\n"
                                      "  spares: 0\n"
                                      "sbxd:\n"
                                      "  listen: 127.0.0.1:0\n"
                                      "  max_sandbox_timeout: 3600\n"
                                      "  pty_grace: 0\n" /* PTY sessions end between inputs */
                                      "  volume_roots: [%s/volume-root]\n"
                                      "  images:\n"
                                      "    ubuntu: host\n"
                                      "    python:3.11: host\n",
                                      home);
  FILE *f = fopen(cfg_path, "w");
  if (f == NULL || fputs(yaml, f) < 0 || fclose(f) != 0)
    abort();
  sbx_error_t err = NULL;
  srv.cfg = sbx_config_load(cfg_path, &err);
  if (srv.cfg == NULL) {
    fprintf(stderr, "fuzz_sbxd_request: %s\n", err->msg);
    abort();
  }
  /* before any thread exists */
  reaper_start();
  atexit(teardown);

  srv.listen = xstrdup("127.0.0.1:0");
  srv.api_key = NULL;
  srv.p = sbx_provider_new(home, srv.cfg, &err);
  if (srv.p)
    srv.admin = sbx_provider_new(home, srv.cfg, &err);
  if (srv.p == NULL || srv.admin == NULL) {
    fprintf(stderr, "fuzz_sbxd_request: %s\n", err->msg);
    abort();
  }
  srv.home = xstrdup(sbx_provider_home(srv.p));
  srv.shell = access("/usr/bin/bash", X_OK) == 0 || access("/bin/bash", X_OK) == 0 ? "bash" : "sh";
  if (sbxd_registry_start() < 0 || sbxd_server_start() < 0)
    abort();
  const char *colon = strrchr(srv.listen, ':');
  server.sin_family = AF_INET;
  server.sin_port = htons((uint16_t) atoi(colon + 1));
  server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  fixture_create();
  return 0;
}

/* ---- building a request ---- */

/* Replaces the placeholders. */
static void substitute(sbx_buf_t *out, const uint8_t *d, size_t n, bool unknown_id)
{
  for (size_t i = 0; i < n;) {
    if (n - i >= 4 && memcmp(d + i, "{ID}", 4) == 0) {
      sbx__buf_puts(out, unknown_id ? UNKNOWN_ID : fixture_id);
      i += 4;
    } else if (n - i >= 7 && memcmp(d + i, "{TOKEN}", 7) == 0) {
      sbx__buf_puts(out, fixture_token);
      i += 7;
    } else if (n - i >= 9 && memcmp(d + i, "{SESSION}", 9) == 0) {
      sbx__buf_puts(out, fixture_session);
      i += 9;
    } else {
      sbx__buf_append(out, d + i, 1);
      i++;
    }
  }
}

/* Characters a request target may carry as they are (the rest is percent-encoded; '%' itself
 * passes, so that malformed escapes reach the server). */
static bool target_char(unsigned char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("-._~!$&'()*+,;=:@/?%", c));
}

static void put_target(sbx_buf_t *out, const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char) s[i];
    if (target_char(c))
      sbx__buf_append(out, s + i, 1);
    else
      sbx__buf_printf(out, "%%%02X", c);
  }
}

static bool token_char(unsigned char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Extra header lines ("Name: value", one per line): kept when well-formed; the ones that
 * change the framing or the connection are the harness's. */
static void put_headers(sbx_buf_t *out, const char *s, size_t n)
{
  static const char *const own[] = {"content-length", "transfer-encoding", "connection", "host",
                                    "expect",         "upgrade",           "te",         "trailer"};
  const char *end = s + n;
  while (s < end) {
    const char *nl = memchr(s, '\n', (size_t) (end - s));
    const char *le = nl ? nl : end;
    const char *colon = memchr(s, ':', (size_t) (le - s));
    bool ok = colon && colon > s && (size_t) (le - s) < 4096;
    for (const char *p = s; ok && p < colon; p++)
      ok = token_char((unsigned char) *p);
    for (const char *p = colon ? colon + 1 : le; ok && p < le; p++)
      ok = (unsigned char) *p >= 0x20 ? *p != 0x7f : *p == '\t';
    for (size_t i = 0; ok && i < ARRAY_SIZE(own); i++)
      ok = !((size_t) (colon - s) == strlen(own[i]) && strncasecmp(s, own[i], strlen(own[i])) == 0);
    if (ok) {
      sbx__buf_append(out, s, (size_t) (le - s));
      sbx__buf_puts(out, "\r\n");
    }
    s = nl ? nl + 1 : end;
  }
}

/* Builds the request of a structured input; *reach says whether it operates on a sandbox. */
static void build(sbx_buf_t *req, const uint8_t *data, size_t size, bool *reach)
{
  const struct route *rt = &routes[data[0] % N_ROUTES];
  uint8_t flags = size > 1 ? data[1] : 0;
  sbx_buf_t tail = {0};
  if (size > 2)
    substitute(&tail, data + 2, size - 2, false);
  const char *suffix = "", *rest = tail.data ? tail.data : "";
  size_t suffix_len = 0, rest_len = tail.len;
  if (rt->tail == T_SUFFIX || rt->tail == T_SUFFIX_BODY) {
    const char *nl = memchr(rest, '\n', rest_len);
    suffix = rest;
    suffix_len = nl ? (size_t) (nl - rest) : rest_len;
    rest = nl ? nl + 1 : rest + rest_len;
    rest_len = tail.len - (size_t) (rest - (tail.data ? tail.data : ""));
  }
  bool body = rt->tail == T_BODY || rt->tail == T_SUFFIX_BODY;
  bool unknown = flags & F_UNKNOWN_ID, v1 = !(flags & F_V1_TOGGLE);
  const char *id = unknown ? UNKNOWN_ID : fixture_id;
  const char *method = rt->method;
  if ((flags & F_HEAD) && strcmp(method, "GET") == 0)
    method = "HEAD";

  sbx__buf_printf(req, "%s ", method);
  bool own_auth = rt->where == P_PROVISIONER || rt->where == P_AIO;
  bool uses_id =
      strstr(rt->path, "{ID}") != NULL || (rt->where != P_LIFECYCLE && rt->where != P_PROVISIONER);
  if (rt->where == P_PROVISIONER) {
    /* at the root only */
  } else if (rt->where == P_AIO) {
    sbx__buf_printf(req, "/aio/%s/%s", id, (flags & F_NO_TOKEN) ? UNKNOWN_ID : fixture_token);
  } else if (rt->where == P_LIFECYCLE) {
    if (v1 && strcmp(rt->path, "/health") != 0)
      sbx__buf_puts(req, "/v1");
  } else {
    /* the direct form lives at the root only; the proxy form at both */
    if (!v1)
      sbx__buf_puts(req, "/v1");
    if (flags & F_PROXY_FORM)
      sbx__buf_printf(req, "/sandboxes/%s/proxy", id);
    else
      sbx__buf_printf(req, "/direct/%s", id);
    if (rt->where == P_EXECD)
      sbx__buf_printf(req, "/%d", SBXD_EXECD_PORT);
  }
  for (const char *p = rt->path; *p;) {
    if (strncmp(p, "{ID}", 4) == 0) {
      sbx__buf_puts(req, id);
      p += 4;
    } else {
      sbx__buf_append(req, p, 1);
      p++;
    }
  }
  put_target(req, suffix, suffix_len);
  sbx__buf_puts(req, " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  bool token = rt->where != P_LIFECYCLE && !(flags & F_NO_TOKEN);
  if (token && rt->where == P_PROVISIONER)
    sbx__buf_puts(req, "X-API-Key: " FUZZ_PROVISIONER_KEY "\r\n");
  else if (token && !own_auth)
    sbx__buf_printf(req, "%s: %s\r\n", SBXD_TOKEN_HEADER, fixture_token);
  if (!body)
    put_headers(req, rest, rest_len);
  if (flags & F_EXPECT)
    sbx__buf_puts(req, "Expect: 100-continue\r\n");
  if (body && rt->ctype == C_JSON)
    sbx__buf_puts(req, "Content-Type: application/json\r\n");
  else if (body && rt->ctype == C_MULTIPART)
    sbx__buf_puts(req, "Content-Type: multipart/form-data; boundary=" BOUNDARY "\r\n");
  if (body && (flags & F_CHUNKED)) {
    sbx__buf_puts(req, "Transfer-Encoding: chunked\r\n\r\n");
    size_t half = rest_len / 2;
    if (half)
      sbx__buf_printf(req, "%zx\r\n", half);
    sbx__buf_append(req, rest, half);
    if (half)
      sbx__buf_puts(req, "\r\n");
    if (rest_len - half)
      sbx__buf_printf(req, "%zx;ext=1\r\n", rest_len - half);
    sbx__buf_append(req, rest + half, rest_len - half);
    if (rest_len - half)
      sbx__buf_puts(req, "\r\n");
    sbx__buf_puts(req, "0\r\n\r\n");
  } else if (body) {
    sbx__buf_printf(req, "Content-Length: %zu\r\n\r\n", rest_len);
    sbx__buf_append(req, rest, rest_len);
  } else {
    sbx__buf_puts(req, "\r\n");
  }
  /* /v1 in front of the direct form is not an endpoint route */
  bool routed = rt->where == P_LIFECYCLE || own_auth || v1 || (flags & F_PROXY_FORM);
  *reach = rt->reach && routed && !(uses_id && unknown) && (rt->where == P_LIFECYCLE || token);
  sbx__buf_free(&tail);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size == 0)
    return 0;
  sbx_buf_t req = {0}, resp = {0};
  bool structured = data[0] < RAW_MODE, reach;
  if (structured) {
    build(&req, data, size, &reach);
  } else {
    substitute(&req, data + 1, size - 1, false);
    /* on the wire as it is: a sandbox may be reached if it names one, creates or acquires */
    reach = (req.len && memmem(req.data, req.len, fixture_id, 16)) ||
            (req.len && memmem(req.data, req.len, "acquire", 7)) ||
            (req.len && memmem(req.data, req.len, "sandboxes", 9));
  }
  /* a request that reaches no sandbox is answered at once; one that does may run a command */
  uint64_t t0 = sbx__now_ms();
  bool answered = exchange(req.data ? req.data : "", req.len, &resp, reach ? 1500 : 5000);
  uint64_t t1 = sbx__now_ms();
  char line[96] = "";
  if (verbose) {
    const char *eol = req.len ? memchr(req.data, '\r', req.len) : NULL;
    snprintf(line, sizeof line, "%.*s -> %.*s",
             (int) (eol && eol - req.data < 80 ? eol - req.data
                    : req.len > 60             ? 60
                                               : (int) req.len),
             req.data ? req.data : "", (int) (resp.len > 12 ? 12 : resp.len),
             resp.data ? resp.data : "(no answer)");
  }
  if (answered) {
    int status = response_status(&resp, NULL);
    if (status < 0)
      fail("the response does not start with an HTTP/1.1 status line", req.data, req.len, &resp);
    /* 505 is libmicrohttpd's answer to an HTTP version it does not speak (HTTP/0.1, 2.0) */
    if (status >= 500 && status != 505 && !reach)
      fail("5xx to a request that reached no sandbox", req.data, req.len, &resp);
  } else if (structured && !reach) {
    fail("no answer to a well-formed request", req.data, req.len, &resp);
  }
  sbx__buf_free(&req);
  sbx__buf_free(&resp);

  json_t *j = NULL;
  int health = call("GET", "/health", NULL, &j);
  json_decref(j);
  if (health != 200)
    fail("sbxd stopped answering /health", data[0] < RAW_MODE ? "(structured)" : "(raw)", 12, NULL);
  restore();
  if (verbose)
    fprintf(stderr, "fuzz_sbxd_request: %s (%llu ms, %llu ms in all)\n", line,
            (unsigned long long) (t1 - t0), (unsigned long long) (sbx__now_ms() - t0));
  return 0;
}
