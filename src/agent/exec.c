/* Running commands inside the sandbox.
 *
 * Each command runs as `sh -lc CMD` (`sh -lc 'exec CMD'` for a simple command, execable()) or a
 * given argv, in its own session and process group, stdin /dev/null, in the requested working
 * directory. A foreground command whose client goes away (found on a read of its frames or a
 * write of output) is killed with its group if the request had KILL_ON_DISCONNECT. Foreground
 * commands stream stdout and
 * stderr back on the requesting connection, each capped (bytes past the cap are counted and
 * dropped), and end with an EXIT frame. On timeout the whole process group is killed and the
 * partial output kept. The call returns as soon as the shell itself exits: whatever is already
 * in the pipes is drained, but a background child that still holds a pipe open does not delay
 * the answer and keeps running.
 *
 * Interactive commands (SBX_EXEC_STDIN, SBX_EXEC_PTY) are foreground commands whose stdin is a
 * pipe, or whose stdin, stdout and stderr are a new terminal (pty.h) that is their controlling
 * terminal; the client then sends STDIN, STDIN_EOF, RESIZE and SIGNAL frames during the exec.
 * A terminal's output comes back as STDOUT.
 *
 * Background commands (execd's `background: true`) write stdout and stderr to one pipe that the
 * main loop copies into a capped in-memory log (memfd), read with CMD_LOGS by byte cursor.
 *
 * Commands are clone children with exit signal 0 (see server.c); each is waited for through its
 * pidfd. The child code between clone and exec only makes async-signal-safe calls: sbx-init is
 * multithreaded. */
#include "exec.h"
#include "pty.h"
#include "text.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define MAX_CMDS 256
#define BG_LOG_CAP (64u << 20)
#define DEFAULT_CAP (10u << 20)

enum { COOKIE_PID = 1, COOKIE_OUT = 2 };

struct cmd;
struct cookie {
  int kind;
  struct cmd *cmd;
};

struct cmd {
  bool used;
  char id[65];
  pid_t pid;
  int pidfd;  /* background only: owned by the table */
  int out_fd; /* background only: read end of the output pipe */
  int log_fd; /* background only: memfd with the output */
  uint64_t log_len, log_total;
  bool background, running, timed_out;
  int exit_code; /* negative: killed by that signal */
  uint64_t started_ms, finished_ms, seq;
  struct cookie pid_cookie, out_cookie;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cmd table[MAX_CMDS];
static uint64_t table_seq;
static int epoll_fd = -1;
static struct rlimit cmd_nofile; /* rlim_cur 0: commands keep sbx-init's limit */
static int (*cmd_confine)(void);

void agent_exec_init(int ep, uint64_t nofile, int (*confine)(void))
{
  epoll_fd = ep;
  cmd_confine = confine;
  /* sbx-init itself may hold many connections and pipes: its soft limit is its hard one; each
   * command gets the conventional soft limit back (select() users, close-all-fds loops). */
  struct rlimit rl;
  if (nofile > 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    cmd_nofile.rlim_max = rl.rlim_max;
    cmd_nofile.rlim_cur = nofile < rl.rlim_max ? nofile : rl.rlim_max;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Finds a slot: a free one, else the oldest finished command. Called with table_lock held. */
static struct cmd *table_alloc(void)
{
  struct cmd *best = NULL;
  for (int i = 0; i < MAX_CMDS; i++) {
    struct cmd *c = &table[i];
    if (!c->used)
      return c;
    if (!c->running && c->out_fd < 0 && (best == NULL || c->seq < best->seq))
      best = c;
  }
  if (best && best->log_fd >= 0)
    close(best->log_fd);
  return best;
}

static struct cmd *table_find(const char *id)
{
  for (int i = 0; i < MAX_CMDS; i++)
    if (table[i].used && strcmp(table[i].id, id) == 0)
      return &table[i];
  return NULL;
}

/* ---- the child side: async-signal-safe only ---- */

static void child_write(const char *s)
{
  (void) !write(2, s, strlen(s));
}

struct spawn_args {
  const char *path;
  char *const *argv;
  char *const *envp;
  const char *cwd;
  int in, out, err;
  bool ctty; /* in is a terminal to make the controlling one */
};

static int child_exec(void *arg)
{
  const struct spawn_args *a = arg;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  setsid();
  if (a->ctty && ioctl(a->in, TIOCSCTTY, 0) < 0)
    _exit(126);
  if (dup2(a->in, 0) < 0 || dup2(a->out, 1) < 0 || dup2(a->err, 2) < 0)
    _exit(126);
  if (chdir(a->cwd) < 0) {
    child_write("sbx-init: cannot enter the working directory ");
    child_write(a->cwd);
    child_write("\n");
    _exit(126);
  }
  syscall(SYS_close_range, 3, ~0U, 0);
  if (cmd_nofile.rlim_cur > 0)
    setrlimit(RLIMIT_NOFILE, &cmd_nofile); /* per process: the clone shares memory, not limits */
  if (cmd_confine && cmd_confine() != 0) {
    child_write("sbx-init: cannot confine the command\n");
    _exit(126);
  }
  execve(a->path, a->argv, a->envp);
  child_write("sbx-init: cannot execute ");
  child_write(a->path);
  child_write(errno == ENOENT ? ": No such file or directory\n" : ": exec failed\n");
  _exit(errno == ENOENT ? 127 : 126);
}

#define SPAWN_STACK (64u << 10)

/* posix_spawn's technique: the child shares our memory (no page tables to copy) on its own
 * stack, and this thread is suspended until it has exec'd or exited. Exit signal 0 makes it a
 * "clone child", invisible to PID 1's waitpid(-1). */
static pid_t spawn(const struct spawn_args *a, int *pidfd)
{
  char *stack = malloc(SPAWN_STACK);
  if (stack == NULL)
    return -1;
  int pfd = -1;
  pid_t pid = sbx__clone_vm(child_exec, stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK | CLONE_PIDFD,
                            (void *) a, &pfd);
  int saved = errno;
  free(stack);
  if (pid < 0) {
    errno = saved;
    return -1;
  }
  *pidfd = pfd;
  return pid;
}

/* ---- request parsing ---- */

struct exec_req {
  char *cmd;
  sbx_strv_t argv;
  sbx_strv_t env;
  char *cwd;
  char *id;
  uint64_t timeout_ms, out_cap, err_cap, flags, rows, cols;
};

static void exec_req_free(struct exec_req *r)
{
  free(r->cmd);
  sbx__strv_free(&r->argv);
  sbx__strv_free(&r->env);
  free(r->cwd);
  free(r->id);
}

static int parse_exec(const char *p, size_t len, struct exec_req *r, sbx_error_t *err)
{
  memset(r, 0, sizeof *r);
  if (sbx__tlv_get_str(p, len, SBX_T_CMD, &r->cmd) < 0 ||
      sbx__tlv_get_str(p, len, SBX_T_CWD, &r->cwd) < 0 ||
      sbx__tlv_get_str(p, len, SBX_T_ID, &r->id) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_TIMEOUT_MS, 0, &r->timeout_ms) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_OUT_CAP, DEFAULT_CAP, &r->out_cap) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_ERR_CAP, DEFAULT_CAP, &r->err_cap) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_FLAGS, 0, &r->flags) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_ROWS, 24, &r->rows) < 0 ||
      sbx__tlv_get_u64(p, len, SBX_T_COLS, 80, &r->cols) < 0)
    return sbx__make_error(err, EPROTO, SBX_E_INVALID, "malformed exec request");
  if ((r->flags & (SBX_EXEC_STDIN | SBX_EXEC_PTY)) && (r->flags & SBX_EXEC_BACKGROUND))
    return sbx__make_error(err, 0, SBX_E_INVALID, "a background command cannot take input");
  if ((r->flags & SBX_EXEC_PTY) &&
      (r->rows == 0 || r->cols == 0 || r->rows > SBX_PTY_MAX_DIM || r->cols > SBX_PTY_MAX_DIM))
    return sbx__make_error(err, 0, SBX_E_INVALID, "terminal size must be 1-%d rows and columns",
                           SBX_PTY_MAX_DIM);
  sbx_tlv_reader_t rd;
  sbx_tlv_t f;
  sbx__tlv_reader_init(&rd, p, len);
  while (sbx__tlv_next(&rd, &f) > 0) {
    if (f.tag != SBX_T_ARG && f.tag != SBX_T_ENV)
      continue;
    if (memchr(f.data, '\0', f.len))
      return sbx__make_error(err, 0, SBX_E_INVALID, "argument or environment contains NUL");
    const unsigned char *eq = f.tag == SBX_T_ENV ? memchr(f.data, '=', f.len) : NULL;
    if (f.tag == SBX_T_ENV &&
        (eq == NULL || !sbx__env_key_valid((const char *) f.data, (size_t) (eq - f.data))))
      return sbx__make_error(err, 0, SBX_E_INVALID, "environment entries must be KEY=VALUE");
    sbx__strv_push_owned(f.tag == SBX_T_ARG ? &r->argv : &r->env,
                         xstrndup((const char *) f.data, f.len));
  }
  if ((r->flags & SBX_EXEC_ARGV) ? r->argv.n == 0 : (r->cmd == NULL || r->cmd[0] == '\0'))
    return sbx__make_error(err, 0, SBX_E_INVALID, "command must be a non-empty string");
  if (r->id && (strlen(r->id) == 0 || strlen(r->id) > 64))
    return sbx__make_error(err, 0, SBX_E_INVALID, "command id must be 1-64 characters");
  if (r->cwd == NULL)
    r->cwd = xstrdup("/mnt/user-data/workspace");
  return 0;
}

/* Defaults, then the request's variables (later ones win). */
static char **build_env(const struct exec_req *r, sbx_strv_t *out)
{
  static const char *const defaults[] = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "HOME=/root",
      "USER=root",
      "LOGNAME=root",
      "SHELL=/bin/sh",
      "LANG=C.UTF-8",
  };
  sbx_strv_t all = {0};
  for (size_t i = 0; i < ARRAY_SIZE(defaults); i++)
    sbx__strv_push(&all, defaults[i]);
  sbx__strv_push_owned(&all, xasprintf("PWD=%s", r->cwd));
  if (r->flags & SBX_EXEC_PTY)
    sbx__strv_push(&all, "TERM=xterm-256color"); /* the client's TERM, if sent, wins */
  for (size_t i = 0; i < r->env.n; i++)
    sbx__strv_push(&all, r->env.v[i]);
  /* keep the last definition of each key */
  for (size_t i = 0; i < all.n; i++) {
    size_t klen = strcspn(all.v[i], "=");
    bool shadowed = false;
    for (size_t j = i + 1; j < all.n && !shadowed; j++)
      shadowed = strncmp(all.v[i], all.v[j], klen + 1) == 0;
    if (!shadowed)
      sbx__strv_push(out, all.v[i]);
  }
  sbx__strv_free(&all);
  return out->v;
}

/* The absolute path to execute for argv mode (PATH search done here, before clone). */
static char *resolve_exec(const char *name)
{
  if (strchr(name, '/'))
    return xstrdup(name);
  static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                     "/usr/bin",        "/sbin",          "/bin"};
  for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
    char *p = xasprintf("%s/%s", dirs[i], name);
    if (access(p, X_OK) == 0)
      return p;
    free(p);
  }
  return xstrdup(name);
}

/* Whether `sh -lc CMD` may be `sh -lc 'exec CMD'`: CMD is one simple command (no list,
 * pipeline, redirection, subshell or compound command outside quotes) whose first word is a
 * plain name of an executable file in PATH, not a shell builtin or keyword. The shell then adds
 * nothing between the command and us: a ^C typed at a REPL reaches only the REPL, whose own exit
 * status is the one reported (a waiting sh that got the SIGINT too would turn a later exit(0)
 * into 130), and signals sent to the command's process reach it. */
static bool execable(const char *cmd, const char *path_env)
{
  static const char *const shell_words[] = {
      ".",       ":",      "[",       "[[",        "alias",    "bg",      "bind",     "break",
      "builtin", "caller", "cd",      "chdir",     "command",  "compgen", "complete", "continue",
      "declare", "dirs",   "disown",  "echo",      "enable",   "eval",    "exec",     "exit",
      "export",  "false",  "fc",      "fg",        "getopts",  "hash",    "help",     "history",
      "jobs",    "kill",   "let",     "local",     "logout",   "mapfile", "popd",     "printf",
      "pushd",   "pwd",    "read",    "readarray", "readonly", "return",  "set",      "shift",
      "shopt",   "source", "suspend", "test",      "times",    "trap",    "true",     "type",
      "typeset", "ulimit", "umask",   "unalias",   "unset",    "wait",    "case",     "coproc",
      "do",      "done",   "elif",    "else",      "esac",     "fi",      "for",      "function",
      "if",      "in",     "select",  "then",      "time",     "until",   "while"};
  size_t first = strspn(cmd, " \t");
  size_t wlen = strspn(cmd + first, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                    "0123456789_./+-");
  char end = cmd[first + wlen];
  if (wlen == 0 || wlen > 255 || (end != '\0' && end != ' ' && end != '\t'))
    return false;
  char name[256];
  memcpy(name, cmd + first, wlen);
  name[wlen] = '\0';
  for (size_t i = 0; i < ARRAY_SIZE(shell_words); i++)
    if (strcmp(name, shell_words[i]) == 0)
      return false;
  char quote = 0;
  for (const char *p = cmd + first + wlen; *p; p++) {
    if (quote == '\'') {
      if (*p == '\'')
        quote = 0;
    } else if (*p == '\\') {
      if (*++p == '\0')
        return false;
    } else if (quote == '"') {
      if (*p == '"')
        quote = 0;
    } else if (*p == '\'' || *p == '"') {
      quote = *p;
    } else if (strchr(";&|<>(){}`\n", *p)) {
      return false;
    }
  }
  if (quote)
    return false;
  if (strchr(name, '/'))
    return access(name, X_OK) == 0;
  /* found where the shell will look (the request's PATH, else the default one) */
  cleanup_free char *dirs = xstrdup(path_env ? path_env
                                             : "/usr/local/sbin:/usr/local/bin:"
                                               "/usr/sbin:/usr/bin:/sbin:/bin");
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char file[PATH_MAX];
    struct stat st;
    if (d[0] == '/' && (size_t) snprintf(file, sizeof file, "%s/%s", d, name) < sizeof file &&
        stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0)
      return true;
  }
  return false;
}

static int check_cwd(const char *cwd, sbx_error_t *err)
{
  if (cwd[0] != '/')
    return sbx__make_error(err, 0, SBX_E_INVALID, "working directory must be absolute: %s", cwd);
  struct stat st;
  if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode))
    return sbx__make_error(err, 0, SBX_E_INVALID, "working directory does not exist: %s", cwd);
  return 0;
}

static void kill_group(pid_t pid, int sig)
{
  if (kill(-pid, sig) < 0)
    kill(pid, sig);
}

static int exit_code_of(const siginfo_t *si)
{
  if (si->si_code == CLD_EXITED)
    return si->si_status;
  return -si->si_status;
}

static int send_started(struct agent_conn *c, const char *id, pid_t pid)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_ID, id);
  sbx__tlv_put_u64(&w, SBX_T_PID, (uint64_t) pid);
  int r = sbx__frame_send_tlv(c->fd, SBX_MSG_STARTED, c->req, &w);
  sbx__tlv_free(&w);
  return r;
}

struct stream {
  int fd;
  uint16_t type;
  uint64_t cap, kept, total;
};

enum { PUMP_EOF = 0, PUMP_AGAIN = 1, PUMP_DATA = 2 };

/* Reads what is available from s and forwards what fits under the cap. */
static int pump(struct agent_conn *c, struct stream *s, char *buf, size_t bufsz, bool *client_gone)
{
  ssize_t n = read(s->fd, buf, bufsz);
  if (n < 0)
    return errno == EAGAIN || errno == EINTR ? PUMP_AGAIN : PUMP_EOF;
  if (n == 0)
    return PUMP_EOF;
  s->total += (uint64_t) n;
  uint64_t room = s->kept < s->cap ? s->cap - s->kept : 0;
  size_t take = (uint64_t) n < room ? (size_t) n : (size_t) room;
  if (take > 0) {
    s->kept += take;
    if (!*client_gone && sbx__frame_send(c->fd, s->type, c->req, buf, take) < 0)
      *client_gone = true;
  }
  return PUMP_DATA;
}

static struct cmd *register_cmd(const char *want_id, pid_t pid, bool background, sbx_error_t *err)
{
  pthread_mutex_lock(&table_lock);
  struct cmd *e = table_alloc();
  if (e == NULL) {
    pthread_mutex_unlock(&table_lock);
    sbx__make_error(err, 0, SBX_E_BUSY, "too many commands running (%d)", MAX_CMDS);
    return NULL;
  }
  memset(e, 0, sizeof *e);
  e->used = true;
  e->pid = pid;
  e->pidfd = e->out_fd = e->log_fd = -1;
  e->background = background;
  e->running = true;
  e->started_ms = sbx__realtime_ms();
  e->seq = ++table_seq;
  if (want_id)
    snprintf(e->id, sizeof e->id, "%s", want_id);
  else
    sbx__random_hex(e->id, 32);
  pthread_mutex_unlock(&table_lock);
  return e;
}

/* A frame the client sent during the exec: SIGNAL, or for an interactive command its input.
 * Returns false for anything else (the client is then treated as gone). */
static bool client_frame(const sbx_frame_hdr_t *hdr, const char *p, pid_t pid, int pty_master,
                         struct agent_input *in)
{
  bool interactive = in->fd >= 0 || in->own || in->pty;
  switch (hdr->type) {
  case SBX_MSG_SIGNAL: {
    uint64_t sig = SIGTERM;
    if (sbx__tlv_get_u64(p, hdr->len, SBX_T_SIGNO, SIGTERM, &sig) < 0)
      return false;
    if (sig > 0 && sig < 65) {
      /* on a terminal: its foreground job (a shell's child), as a ^C typed there would */
      int fg = pty_master >= 0 ? agent_pty_foreground(pty_master) : 0;
      if (fg > 0)
        kill(-fg, (int) sig);
      else
        kill_group(pid, (int) sig);
    }
    return true;
  }
  case SBX_MSG_STDIN:
    if (!interactive)
      return false;
    agent_input_push(in, p, hdr->len);
    return true;
  case SBX_MSG_STDIN_EOF:
    if (!interactive)
      return false;
    agent_input_eof(in);
    return true;
  case SBX_MSG_RESIZE: {
    uint64_t rows = 0, cols = 0;
    if (pty_master < 0 || !sbx__tlv_valid(p, hdr->len) ||
        sbx__tlv_get_u64(p, hdr->len, SBX_T_ROWS, 0, &rows) < 0 ||
        sbx__tlv_get_u64(p, hdr->len, SBX_T_COLS, 0, &cols) < 0)
      return false;
    if (rows <= SBX_PTY_MAX_DIM && cols <= SBX_PTY_MAX_DIM) /* else ignored, as 0 is */
      agent_pty_resize(pty_master, (unsigned) rows, (unsigned) cols);
    return true;
  }
  default:
    return false;
  }
}

/* The command's stdio: /dev/null, a pipe fed by STDIN frames, or a new terminal. */
struct stdio_set {
  int in_r, in_w; /* stdin pipe */
  int master, slave;
  int outp[2], errp[2];
  int devnull;
};

static void stdio_close(struct stdio_set *io)
{
  int *fds[] = {&io->in_r,    &io->in_w,    &io->slave,   &io->outp[0],
                &io->outp[1], &io->errp[0], &io->errp[1], &io->devnull};
  for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
    if (*fds[i] >= 0) {
      close(*fds[i]);
      *fds[i] = -1;
    }
  agent_pty_close(io->master);
  io->master = -1;
}

static int stdio_open(struct stdio_set *io, const struct exec_req *r, struct spawn_args *a,
                      sbx_error_t *err)
{
  *io = (struct stdio_set){-1, -1, -1, -1, {-1, -1}, {-1, -1}, -1};
  if (r->flags & SBX_EXEC_PTY) {
    io->master = agent_pty_open((unsigned) r->rows, (unsigned) r->cols, &io->slave, err);
    if (io->master < 0)
      return -1;
    a->in = a->out = a->err = io->slave;
    a->ctty = true;
    return 0;
  }
  bool merge = r->flags & SBX_EXEC_MERGE_OUTPUT;
  int inp[2] = {-1, -1};
  if (r->flags & SBX_EXEC_STDIN) {
    if (pipe2(inp, O_CLOEXEC) < 0) {
      sbx__make_error(err, errno, SBX_E_IO, "create pipes");
      return -1;
    }
    io->in_r = inp[0];
    io->in_w = inp[1];
    fcntl(io->in_w, F_SETFL, O_NONBLOCK);
  } else if ((io->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
    sbx__make_error(err, errno, SBX_E_IO, "open /dev/null");
    return -1;
  }
  if (pipe2(io->outp, O_CLOEXEC) < 0 || (!merge && pipe2(io->errp, O_CLOEXEC) < 0)) {
    sbx__make_error(err, errno, SBX_E_IO, "create pipes");
    stdio_close(io);
    return -1;
  }
  a->in = io->in_r >= 0 ? io->in_r : io->devnull;
  a->out = io->outp[1];
  a->err = merge ? io->outp[1] : io->errp[1];
  return 0;
}

/* A terminal's last output after its command exited: read until the terminal says all its
 * users are gone (EIO), or until it has been quiet for a moment (a background job that keeps
 * it open does not keep us waiting). */
static void drain_pty(struct agent_conn *c, struct stream *so, char *buf, bool *client_gone)
{
  /* a background job writing without pause must not hold the EXIT back: 500 ms at most */
  uint64_t until = sbx__now_ms() + 500;
  while (so->fd >= 0 && sbx__now_ms() < until) {
    struct pollfd p = {so->fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0 || pump(c, so, buf, 65536, client_gone) == PUMP_EOF)
      break;
  }
}

/* (No goto past the cleanup variables below: clang refuses to jump over them.) */
static int run_foreground(struct agent_conn *c, struct exec_req *r, const char *path, char **argv,
                          char **envp, sbx_error_t *err)
{
  struct spawn_args a = {.path = path, .argv = argv, .envp = envp, .cwd = r->cwd};
  struct stdio_set io;
  if (stdio_open(&io, r, &a, err) < 0)
    return -1;
  int pidfd_raw = -1;
  pid_t pid = spawn(&a, &pidfd_raw);
  if (pid < 0) {
    sbx__make_error(err, errno, SBX_E_IO, "start the command");
    stdio_close(&io);
    return -1;
  }
  cleanup_close int pidfd = pidfd_raw;
  /* what the child has; ours to keep: the read ends, the stdin write end, the master */
  int keep_out = io.master >= 0 ? io.master : io.outp[0];
  int keep_err = io.errp[0];
  struct agent_input in = {
      .fd = io.master >= 0 ? io.master : io.in_w, .pty = io.master >= 0, .own = io.in_w >= 0};
  int master = io.master;
  io.master = io.outp[0] = io.errp[0] = io.in_w = -1;
  stdio_close(&io);
  fcntl(keep_out, F_SETFL, O_NONBLOCK);
  if (keep_err >= 0)
    fcntl(keep_err, F_SETFL, O_NONBLOCK);

  struct cmd *e = register_cmd(r->id, pid, false, NULL);
  bool client_gone = send_started(c, e ? e->id : "", pid) < 0;
  /* The client may be found gone anywhere: a failed read of its frames, or a failed write of
   * output (a client killed, or whose own reader went away, while the command prints); each
   * pass of the loop below kills the group once it is. */
  bool kill_on_gone = r->flags & SBX_EXEC_KILL_ON_DISCONNECT, gone_seen = false;

  struct stream so = {keep_out, SBX_MSG_STDOUT, r->out_cap, 0, 0};
  struct stream se = {keep_err, SBX_MSG_STDERR, r->err_cap, 0, 0};
  uint64_t start = sbx__now_ms();
  uint64_t deadline = r->timeout_ms ? start + r->timeout_ms : 0;
  bool timed_out = false, exited = false;
  siginfo_t si = {0};
  cleanup_free char *buf = xmalloc(65536);
  while (!exited) {
    if (client_gone && !gone_seen) {
      gone_seen = true;
      if (kill_on_gone)
        kill_group(pid, SIGKILL);
      else if (in.own)
        agent_input_eof(&in); /* nobody feeds the command any more */
    }
    /* while input is queued the client is not read: its writes wait (bounded memory) */
    bool queued = agent_input_pending(&in);
    struct pollfd fds[5] = {{so.fd, POLLIN, 0},
                            {se.fd, POLLIN, 0},
                            {pidfd, POLLIN, 0},
                            {client_gone || queued ? -1 : c->fd, POLLIN, 0},
                            {queued && in.fd != so.fd ? in.fd : -1, POLLOUT, 0}};
    if (queued && in.fd == so.fd)
      fds[0].events |= POLLOUT;
    int timeout = -1;
    if (deadline) {
      uint64_t now = sbx__now_ms();
      timeout = now >= deadline ? 0 : (int) (deadline - now);
    }
    int n = poll(fds, 5, timeout);
    if (n < 0 && errno != EINTR)
      break;
    if (deadline && sbx__now_ms() >= deadline) {
      kill_group(pid, SIGKILL);
      timed_out = true;
      deadline = 0;
    }
    if (n <= 0)
      continue;
    if ((fds[4].revents || (fds[0].revents & POLLOUT)) && queued)
      agent_input_flush(&in);
    if ((fds[0].revents & ~POLLOUT) && pump(c, &so, buf, 65536, &client_gone) == PUMP_EOF)
      so.fd = -1;
    if (fds[1].revents && pump(c, &se, buf, 65536, &client_gone) == PUMP_EOF)
      se.fd = -1;
    if (fds[3].revents) {
      sbx_frame_hdr_t hdr;
      cleanup_free char *payload = NULL;
      if (sbx__frame_recv(c->fd, &hdr, &payload, SBX_STDIN_MAX_FRAME) < 0 ||
          !client_frame(&hdr, payload, pid, master, &in)) {
        client_gone = true;
      }
    }
    if (fds[2].revents) {
      if (waitid(P_PIDFD, (id_t) pidfd, &si, WEXITED | __WALL) == 0) {
        exited = true;
      } else if (errno == ECHILD) {
        /* reaped elsewhere: never spin on a dead pidfd; the status is lost */
        si.si_code = CLD_KILLED;
        si.si_status = SIGKILL;
        exited = true;
      }
    }
  }
  /* Drain what the shell left in the pipes; a background child holding them open does not
   * keep us waiting (the read ends are non-blocking). */
  if (master >= 0)
    drain_pty(c, &so, buf, &client_gone);
  else
    while (so.fd >= 0 && pump(c, &so, buf, 65536, &client_gone) == PUMP_DATA)
      ;
  while (se.fd >= 0 && pump(c, &se, buf, 65536, &client_gone) == PUMP_DATA)
    ;
  agent_input_free(&in);
  if (master >= 0)
    agent_pty_close(master);
  else
    close(keep_out);
  if (keep_err >= 0)
    close(keep_err);
  int code = timed_out ? 124 : exit_code_of(&si);
  if (e) {
    pthread_mutex_lock(&table_lock);
    e->running = false;
    e->exit_code = code;
    e->timed_out = timed_out;
    e->finished_ms = sbx__realtime_ms();
    pthread_mutex_unlock(&table_lock);
  }
  if (client_gone)
    return -1;
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_i64(&w, SBX_T_CODE, code);
  sbx__tlv_put_u64(&w, SBX_T_TIMED_OUT, timed_out);
  sbx__tlv_put_u64(&w, SBX_T_SIGNALED, !timed_out && si.si_code != CLD_EXITED);
  sbx__tlv_put_u64(&w, SBX_T_OUT_TOTAL, so.total);
  sbx__tlv_put_u64(&w, SBX_T_ERR_TOTAL, se.total);
  sbx__tlv_put_u64(&w, SBX_T_DURATION_MS, sbx__now_ms() - start);
  int ret = sbx__frame_send_tlv(c->fd, SBX_MSG_EXIT, c->req, &w);
  sbx__tlv_free(&w);
  return ret;
}

static int run_background(struct agent_conn *c, struct exec_req *r, const char *path, char **argv,
                          char **envp, sbx_error_t *err)
{
  int outp[2];
  cleanup_close int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  cleanup_close int log_fd = memfd_create("sbx-command-log", MFD_CLOEXEC);
  if (devnull < 0 || log_fd < 0 || pipe2(outp, O_CLOEXEC) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create the command log");
  struct spawn_args a = {.path = path,
                         .argv = argv,
                         .envp = envp,
                         .cwd = r->cwd,
                         .in = devnull,
                         .out = outp[1],
                         .err = outp[1]};
  int pidfd = -1;
  pid_t pid = spawn(&a, &pidfd);
  close(outp[1]);
  if (pid < 0) {
    close(outp[0]);
    return sbx__make_error(err, errno, SBX_E_IO, "start the command");
  }
  fcntl(outp[0], F_SETFL, O_NONBLOCK);
  struct cmd *e = register_cmd(r->id, pid, true, err);
  if (e == NULL) {
    kill_group(pid, SIGKILL);
    waitid(P_PIDFD, (id_t) pidfd, &(siginfo_t){0}, WEXITED | __WALL);
    close(pidfd);
    close(outp[0]);
    return -1;
  }
  pthread_mutex_lock(&table_lock);
  e->pidfd = pidfd;
  e->out_fd = outp[0];
  e->log_fd = steal_fd(&log_fd);
  e->pid_cookie = (struct cookie){COOKIE_PID, e};
  e->out_cookie = (struct cookie){COOKIE_OUT, e};
  struct epoll_event ev1 = {.events = EPOLLIN, .data.ptr = &e->pid_cookie};
  struct epoll_event ev2 = {.events = EPOLLIN, .data.ptr = &e->out_cookie};
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, pidfd, &ev1);
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, e->out_fd, &ev2);
  char id[65];
  snprintf(id, sizeof id, "%s", e->id);
  pthread_mutex_unlock(&table_lock);
  if (send_started(c, id, pid) < 0)
    return -1;
  return agent_reply_ok(c, NULL);
}

/* Background command e has ended with si (table_lock held). */
static void finish(struct cmd *e, const siginfo_t *si)
{
  if (e->pidfd >= 0) {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, e->pidfd, NULL);
    close(e->pidfd);
    e->pidfd = -1;
  }
  e->running = false;
  e->exit_code = exit_code_of(si);
  e->finished_ms = sbx__realtime_ms();
}

/* Records the end of background command e if it has exited (table_lock held). */
static void reap_if_exited(struct cmd *e)
{
  siginfo_t si = {0};
  if (e->pidfd >= 0 && waitid(P_PIDFD, (id_t) e->pidfd, &si, WEXITED | WNOHANG | __WALL) == 0 &&
      si.si_pid != 0)
    finish(e, &si);
}

void agent_exec_reaped(const siginfo_t *si)
{
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < MAX_CMDS; i++)
    if (table[i].used && table[i].background && table[i].running && table[i].pid == si->si_pid) {
      finish(&table[i], si);
      break;
    }
  pthread_mutex_unlock(&table_lock);
}

/* Main loop callback: a background command exited or wrote output. */
void agent_exec_reap_background(void *cookie)
{
  struct cookie *k = cookie;
  struct cmd *e = k->cmd;
  pthread_mutex_lock(&table_lock);
  if (k->kind == COOKIE_PID) {
    reap_if_exited(e);
  } else if (k->kind == COOKIE_OUT && e->out_fd >= 0) {
    char buf[65536];
    ssize_t n = read(e->out_fd, buf, sizeof buf);
    if (n > 0) {
      e->log_total += (uint64_t) n;
      size_t room = e->log_len < BG_LOG_CAP ? BG_LOG_CAP - e->log_len : 0;
      size_t take = (size_t) n < room ? (size_t) n : room;
      if (take && pwrite(e->log_fd, buf, take, (off_t) e->log_len) == (ssize_t) take)
        e->log_len += take;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, e->out_fd, NULL);
      close(e->out_fd);
      e->out_fd = -1;
    }
  }
  pthread_mutex_unlock(&table_lock);
}

int agent_exec(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  struct exec_req r;
  if (parse_exec(payload, len, &r, &err) < 0 || check_cwd(r.cwd, &err) < 0) {
    exec_req_free(&r);
    return agent_reply_error(c, &err);
  }
  sbx_strv_t env = {0};
  char **envp = build_env(&r, &env);
  cleanup_free char *path = NULL;
  char sh[] = "sh", lc[] = "-lc";
  char *shell_argv[] = {sh, lc, r.cmd, NULL};
  char **argv = shell_argv;
  cleanup_free char *exec_cmd = NULL;
  if (r.flags & SBX_EXEC_ARGV) {
    path = resolve_exec(r.argv.v[0]);
    argv = r.argv.v;
  } else {
    path = xstrdup("/bin/sh");
    const char *path_env = NULL;
    for (size_t i = 0; envp[i]; i++)
      if (strncmp(envp[i], "PATH=", 5) == 0)
        path_env = envp[i] + 5;
    if (execable(r.cmd, path_env))
      shell_argv[2] = exec_cmd = xasprintf("exec %s", r.cmd);
  }
  int ret = (r.flags & SBX_EXEC_BACKGROUND) ? run_background(c, &r, path, argv, envp, &err)
                                            : run_foreground(c, &r, path, argv, envp, &err);
  if (ret < 0 && err)
    ret = agent_reply_error(c, &err);
  sbx__strv_free(&env);
  exec_req_free(&r);
  return ret;
}

int agent_signal(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *id = NULL;
  uint64_t sig = SIGTERM;
  if (sbx__tlv_get_str(payload, len, SBX_T_ID, &id) <= 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_SIGNO, SIGTERM, &sig) < 0 || sig == 0 || sig > 64) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "signal needs a command id and a signal number");
    return agent_reply_error(c, &err);
  }
  pthread_mutex_lock(&table_lock);
  struct cmd *e = table_find(id);
  pid_t pid = e && e->running ? e->pid : 0;
  pthread_mutex_unlock(&table_lock);
  if (pid == 0) {
    sbx__make_error(&err, 0, SBX_E_NOT_FOUND, "no running command %s", id);
    return agent_reply_error(c, &err);
  }
  kill_group(pid, (int) sig);
  return agent_reply_ok(c, NULL);
}

int agent_cmd_status(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *id = NULL;
  if (sbx__tlv_get_str(payload, len, SBX_T_ID, &id) <= 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "status needs a command id");
    return agent_reply_error(c, &err);
  }
  sbx_tlv_writer_t w = {0};
  pthread_mutex_lock(&table_lock);
  struct cmd *e = table_find(id);
  if (e && e->background && e->running)
    reap_if_exited(e);
  if (e) {
    sbx__tlv_put_str(&w, SBX_T_ID, e->id);
    sbx__tlv_put_u64(&w, SBX_T_RUNNING, e->running);
    sbx__tlv_put_u64(&w, SBX_T_STARTED_MS, e->started_ms);
    sbx__tlv_put_u64(&w, SBX_T_PID, (uint64_t) e->pid);
    if (!e->running) {
      sbx__tlv_put_i64(&w, SBX_T_CODE, e->exit_code);
      sbx__tlv_put_u64(&w, SBX_T_FINISHED_MS, e->finished_ms);
      sbx__tlv_put_u64(&w, SBX_T_TIMED_OUT, e->timed_out);
    }
    sbx__tlv_put_u64(&w, SBX_T_FLAGS, e->background ? SBX_EXEC_BACKGROUND : 0);
  }
  pthread_mutex_unlock(&table_lock);
  int ret;
  if (e == NULL) {
    sbx__make_error(&err, 0, SBX_E_NOT_FOUND, "command not found: %s", id);
    ret = agent_reply_error(c, &err);
  } else {
    ret = agent_reply_ok(c, &w);
  }
  sbx__tlv_free(&w);
  return ret;
}

int agent_cmd_logs(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *id = NULL;
  uint64_t cursor = 0, limit = 0;
  if (sbx__tlv_get_str(payload, len, SBX_T_ID, &id) <= 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_CURSOR, 0, &cursor) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_LIMIT, 16u << 20, &limit) < 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "logs needs a command id");
    return agent_reply_error(c, &err);
  }
  pthread_mutex_lock(&table_lock);
  struct cmd *e = table_find(id);
  int fd = e && e->background && e->log_fd >= 0 ? dup(e->log_fd) : -1;
  uint64_t log_len = e ? e->log_len : 0;
  pthread_mutex_unlock(&table_lock);
  if (fd < 0) {
    sbx__make_error(&err, 0, SBX_E_NOT_FOUND, "no background command %s", id);
    return agent_reply_error(c, &err);
  }
  cleanup_close int lfd = fd;
  if (cursor > log_len)
    cursor = log_len;
  uint64_t end = log_len - cursor > limit ? cursor + limit : log_len;
  char buf[65536];
  uint64_t off = cursor;
  while (off < end) {
    size_t want = end - off < sizeof buf ? (size_t) (end - off) : sizeof buf;
    ssize_t n = pread(lfd, buf, want, (off_t) off);
    if (n <= 0)
      break;
    if (sbx__frame_send(c->fd, SBX_MSG_DATA, c->req, buf, (size_t) n) < 0)
      return -1;
    off += (uint64_t) n;
  }
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_CURSOR, off);
  int ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}
