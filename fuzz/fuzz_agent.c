/* libFuzzer target for sbx-init's request handling (src/agent/server.c, exec.c, files.c,
 * included here to reach their static parts), as far as it goes without a sandbox.
 *
 * The input is a client's byte stream: frames read by the same loop as a connection thread
 * (server.c's conn_main: framing, TLV validation, dispatch by type) and answered on a socket.
 * File operations run for real, confined to a scratch directory that stands in for the
 * sandbox's root: the agent's root descriptor is pointed at it, and every path goes through
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) as in a sandbox (the very property under
 * test: nothing may appear or change outside the scratch root). Requests that would act outside
 * a sandbox are only decoded: EXEC (parse_exec, check_cwd, build_env, resolve_exec; no process
 * is started) and CONNECT (not handled).
 *
 * Oracles: sanitizers, time-outs (every walk is bounded), the handler's contract (a handler
 * returns 0 after a complete answer or -1 with the connection to be dropped), and a canary: a
 * file beside the scratch root, and the scratch root's parent, never change.
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_agent fuzz/corpus/agent */
#include "../src/agent/reply.c"
#include "../src/agent/server.c"
#include "../src/agent/exec.c"
#include "../src/agent/pty.c"
#include "../src/agent/files.c"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STREAM (120u << 10)

static char scratch[64];  /* the stand-in root */
static char outside[128]; /* a canary beside it */
static int scratch_fd = -1;

static char base[64];

static void remove_base(void)
{
  sbx__rm_rf_at(AT_FDCWD, base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void) argc, (void) argv;
  /* on a tmpfs where there is one: writes fsync, and fsync there costs nothing */
  snprintf(base, sizeof base, "%s/sbx-fuzz-agent-XXXXXX",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  if (mkdtemp(base) == NULL)
    abort();
  atexit(remove_base);
  snprintf(scratch, sizeof scratch, "%s/root", base);
  snprintf(outside, sizeof outside, "%s/outside.txt", base);
  if (mkdir(scratch, 0755) < 0)
    abort();
  FILE *f = fopen(outside, "w");
  if (f == NULL)
    abort();
  fputs("CANARY\n", f);
  fclose(f);
  scratch_fd = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  root_fd = open(scratch, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (scratch_fd < 0 || root_fd < 0)
    abort();
  sbx__search_open_root = open_search_root;
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

static void clear_scratch(void)
{
  int fd = dup(scratch_fd);
  DIR *d = fdopendir(fd);
  if (d == NULL)
    abort();
  rewinddir(d);
  struct dirent *de;
  sbx_strv_t names = {0};
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      sbx__strv_push(&names, de->d_name);
  closedir(d);
  for (size_t i = 0; i < names.n; i++) {
    fchmodat(scratch_fd, names.v[i], 0755, 0);
    sbx__rm_rf_at(scratch_fd, names.v[i]);
  }
  sbx__strv_free(&names);
}

static void check_outside(void)
{
  char buf[64];
  FILE *f = fopen(outside, "r");
  if (f == NULL || fgets(buf, sizeof buf, f) == NULL || strcmp(buf, "CANARY\n") != 0)
    abort();
  if (fgets(buf, sizeof buf, f) != NULL)
    abort();
  fclose(f);
  /* the scratch root's parent holds exactly the root and the canary */
  char parent[64];
  snprintf(parent, sizeof parent, "%s", scratch);
  *strrchr(parent, '/') = '\0';
  DIR *d = opendir(parent);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.')
      n++;
  closedir(d);
  if (n != 2)
    abort();
}

static void drain(int fd)
{
  char buf[65536];
  while (read(fd, buf, sizeof buf) > 0)
    ;
}

/* EXEC is decoded as agent_exec does, and stops before anything is started. */
static int exec_decode_only(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  struct exec_req r;
  if (parse_exec(payload, len, &r, &err) < 0 || check_cwd(r.cwd, &err) < 0) {
    exec_req_free(&r);
    return agent_reply_error(c, &err);
  }
  sbx_strv_t env = {0};
  char **envp = build_env(&r, &env);
  for (char **e = envp; e && *e; e++)
    if (strchr(*e, '=') == NULL)
      abort(); /* every variable is KEY=VALUE */
  if (r.flags & SBX_EXEC_ARGV)
    free(resolve_exec(r.argv.v[0]));
  sbx__strv_free(&env);
  exec_req_free(&r);
  return agent_reply_ok(c, NULL);
}

struct input {
  const uint8_t *data;
  size_t size;
};

static void *serve_input(void *arg);

/* Each input is served on a thread with a connection thread's stack size (server.c's
 * CONN_STACK), so that unbounded recursion shows up as it would in sbx-init. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > MAX_STREAM)
    return 0;
  struct input in = {data, size};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, CONN_STACK);
  pthread_t t;
  if (pthread_create(&t, &attr, serve_input, &in) != 0)
    abort();
  pthread_join(t, NULL);
  pthread_attr_destroy(&attr);
  return 0;
}

static void *serve_input(void *arg)
{
  const uint8_t *data = ((struct input *) arg)->data;
  size_t size = ((struct input *) arg)->size;
  clear_scratch();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    abort();
  int big = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  for (size_t off = 0; off < size;) {
    ssize_t w = write(sv[1], data + off, size - off);
    if (w <= 0)
      abort();
    off += (size_t) w;
  }
  shutdown(sv[1], SHUT_WR);
  /* replies never block the harness: a full socket is a dropped client */
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  fcntl(sv[1], F_SETFL, O_NONBLOCK);

  /* server.c's conn_main, with EXEC and CONNECT kept inside the harness */
  struct agent_conn c = {.fd = sv[0]};
  for (int frames = 0; frames < 64; frames++) {
    sbx_frame_hdr_t hdr;
    char *payload = NULL;
    if (sbx__frame_recv(c.fd, &hdr, &payload, SBX_PROTO_MAX_PAYLOAD) < 0)
      break;
    c.req = hdr.req;
    int r;
    if (hdr.type == SBX_MSG_PING || hdr.type == SBX_MSG_HELLO) {
      r = agent_reply_ok(&c, NULL);
    } else if (!sbx__tlv_valid(payload, hdr.len)) {
      free(payload);
      break;
    } else if (hdr.type == SBX_MSG_EXEC) {
      r = exec_decode_only(&c, payload, hdr.len);
    } else if (hdr.type == SBX_MSG_CONNECT) {
      r = 0;
    } else {
      r = dispatch(&c, hdr.type, payload, hdr.len);
    }
    free(payload);
    drain(sv[1]);
    if (r < 0)
      break;
  }
  close(sv[0]);
  close(sv[1]);
  check_outside();
  return NULL;
}
