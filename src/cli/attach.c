/* sbx attach: our terminal on a PTY session of sbxd (GET /pty/{id}/ws, docs/sbxd.md), with
 * docker's detach keys (^P ^Q). Detaching leaves the session running in sbxd (for its grace
 * period); attaching again goes on where it was, --since replaying only what is new. The
 * WebSocket is ws.c's framing from the client's side over a plain TCP connection. */
#include "cli.h"

#include "base64.h"
#include "util.h"
#include "ws.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx attach [--server HOST:PORT] [--since N] [--takeover] SANDBOX SESSION\n"
    "\n"
    "Attaches our terminal to PTY session SESSION of sandbox SANDBOX served by sbxd (POST\n"
    "/pty makes one: docs/sbxd.md). Our terminal is in raw mode (every key goes to the\n"
    "session) and window size changes are forwarded. ^P ^Q detaches: the session keeps\n"
    "running in sbxd (for sbxd.pty_grace seconds without a client) and the offset to go on\n"
    "from is printed; ^P then any other key sends both. Exit status: the session's command's\n"
    "(255 if it was killed by a signal), 0 when detached, 1 when the connection ends without\n"
    "an exit (another client took the session over, sbxd stopped).\n"
    "\n"
    "  --server HOST:PORT  sbxd's address (default: sbxd.listen, 127.0.0.1:8080)\n"
    "  --since N           replay the output kept from byte offset N (default 0: all of it)\n"
    "  --takeover          take the session from the client attached to it (it is closed)\n"
    "The API key is sbxd.api_key of the configuration, else $OPEN_SANDBOX_API_KEY; with it\n"
    "(or from a server without a key) attach asks for the sandbox's access token\n"
    "(GET /v1/sandboxes/SANDBOX/endpoints/44772) and sends it, as the session's routes want.\n";

struct attach_args {
  const char *server;
  long long since;
  bool takeover;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct attach_args *a = ctx;
  if (ch == 's') {
    a->server = arg;
  } else if (ch == 'n') {
    if (!cli_parse_long(arg, &a->since) || a->since < 0)
      return cli_usage_error(c, "--since needs a byte offset (an integer >= 0), got '%s'", arg);
  } else if (ch == 'T') {
    a->takeover = true;
  }
  return 0;
}

/* A TCP connection to "host:port" ("[v6]:port" too), or -1 with a message printed. */
static int dial(const char *server)
{
  cleanup_free char *host = NULL;
  const char *port;
  if (server[0] == '[') {
    const char *e = strchr(server, ']');
    if (e == NULL || e[1] != ':')
      goto bad;
    host = xstrndup(server + 1, (size_t) (e - server - 1));
    port = e + 2;
  } else {
    const char *colon = strrchr(server, ':');
    if (colon == NULL)
      goto bad;
    host = xstrndup(server, (size_t) (colon - server));
    port = colon + 1;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int e = getaddrinfo(host, port, &hints, &res);
  if (e != 0) {
    fprintf(stderr, "sbx: attach: %s: %s\n", server, gai_strerror(e));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    fprintf(stderr, "sbx: attach: cannot connect to sbxd at %s: %s\n", server, strerror(errno));
  return fd;
bad:
  fprintf(stderr, "sbx: attach: --server must be HOST:PORT, got '%s'\n", server);
  return -1;
}

/* The sandbox's access token, as the lifecycle API hands it out (GET
 * /v1/sandboxes/{id}/endpoints/44772, with the API key when there is one): the endpoint mount
 * wants it, and a server without a key has no other credential for it. NULL when it cannot be
 * had (the handshake then goes without, and its error says why). */
static char *learn_token(int fd, const char *server, const char *box, const char *key)
{
  sbx_buf_t req = {0};
  sbx__buf_printf(&req,
                  "GET /v1/sandboxes/%s/endpoints/44772 HTTP/1.1\r\nHost: %s\r\n"
                  "Connection: close\r\nAccept: application/json\r\n",
                  box, server);
  if (key && *key)
    sbx__buf_printf(&req, "OPEN-SANDBOX-API-KEY: %s\r\n", key);
  sbx__buf_puts(&req, "\r\n");
  int w = sbx__write_all(fd, req.data, req.len);
  sbx__buf_free(&req);
  sbx_buf_t resp = {0};
  while (w == 0 && resp.len < 65536) {
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
      break;
    sbx__buf_append(&resp, buf, (size_t) n);
  }
  char *token = NULL;
  const char *body = resp.data ? strstr(resp.data, "\r\n\r\n") : NULL;
  if (body && strncmp(resp.data, "HTTP/1.1 200", 12) == 0) {
    json_t *j = json_loads(body + 4, 0, NULL);
    const char *t =
        json_string_value(json_object_get(json_object_get(j, "headers"), "X-EXECD-ACCESS-TOKEN"));
    if (t && *t)
      token = xstrdup(t);
    json_decref(j);
  }
  sbx__buf_free(&resp);
  return token;
}

/* The handshake; bytes after the response's head go to rx. 0, or -1 with a message printed. */
static int handshake(int fd, const char *server, const char *path, const char *key,
                     const char *token, struct ws_rx *rx)
{
  char nonce_hex[33], nonce[16];
  sbx__random_hex(nonce_hex, 32);
  for (int i = 0; i < 16; i++) {
    char two[3] = {nonce_hex[2 * i], nonce_hex[2 * i + 1], '\0'};
    nonce[i] = (char) strtoul(two, NULL, 16);
  }
  cleanup_free char *b64 = sbx__base64_encode(nonce, sizeof nonce);
  sbx_buf_t req = {0};
  sbx__buf_printf(&req,
                  "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n",
                  path, server, b64);
  if (key && *key)
    sbx__buf_printf(&req, "OPEN-SANDBOX-API-KEY: %s\r\n", key);
  if (token)
    sbx__buf_printf(&req, "X-EXECD-ACCESS-TOKEN: %s\r\n", token);
  sbx__buf_puts(&req, "\r\n");
  int w = sbx__write_all(fd, req.data, req.len);
  sbx__buf_free(&req);
  sbx_buf_t head = {0};
  char *end = NULL;
  while (w == 0 && (end = strstr(head.data ? head.data : "", "\r\n\r\n")) == NULL &&
         head.len < 65536) {
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
      break;
    sbx__buf_append(&head, buf, (size_t) n);
  }
  int ret = -1;
  char accept[29];
  if (end == NULL) {
    fprintf(stderr, "sbx: attach: sbxd at %s closed the connection during the handshake\n", server);
  } else if (strncmp(head.data, "HTTP/1.1 101", 12) != 0) {
    /* sbxd's error: the status line and the JSON body ({code, message}) */
    *end = '\0';
    fprintf(stderr, "sbx: attach: %.*s: %s\n", (int) strcspn(head.data, "\r"), head.data, end + 4);
  } else if (!sbxd_ws_accept(b64, accept) || strcasestr(head.data, accept) == NULL) {
    fprintf(stderr, "sbx: attach: the server's Sec-WebSocket-Accept is wrong\n");
  } else {
    sbxd_ws_feed(rx, end + 4, head.len - (size_t) (end + 4 - head.data));
    ret = 0;
  }
  sbx__buf_free(&head);
  return ret;
}

static int send_frame(int fd, int op, const void *d, size_t n)
{
  sbx_buf_t f = {0};
  sbxd_ws_client_frame(&f, op, d, n);
  int r = sbx__write_all(fd, f.data, f.len);
  sbx__buf_free(&f);
  return r;
}

static int send_resize(int fd)
{
  unsigned rows, cols;
  cli_window_size(&rows, &cols);
  char j[80];
  int n = snprintf(j, sizeof j, "{\"type\":\"resize\",\"cols\":%u,\"rows\":%u}", cols, rows);
  return send_frame(fd, WS_OP_TEXT, j, (size_t) n);
}

int cmd_attach(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"server", required_argument, NULL, 's'},
                                       {"since", required_argument, NULL, 'n'},
                                       {"takeover", no_argument, NULL, 'T'},
                                       {NULL, 0, NULL, 0}};
  struct attach_args a = {0};
  int r = cli_parse(c, argc, argv, usage, NULL, opts, "", on_opt, &a, 2);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  const char *box = argv[optind], *sid = argv[optind + 1];
  if ((r = cli_open(c)) != 0)
    return r;
  const char *server = a.server ? a.server : c->cfg->listen ? c->cfg->listen : "127.0.0.1:8080";
  const char *key =
      c->cfg->server_api_key ? c->cfg->server_api_key : getenv("OPEN_SANDBOX_API_KEY");
  cleanup_free char *path = xasprintf("/direct/%s/44772/pty/%s/ws?since=%lld%s", box, sid, a.since,
                                      a.takeover ? "&takeover=1" : "");
  int fd = dial(server);
  if (fd < 0)
    return EXIT_OP_ERROR;
  cleanup_free char *token = learn_token(fd, server, box, key);
  close(fd);
  if ((fd = dial(server)) < 0)
    return EXIT_OP_ERROR;
  struct ws_rx rx = {.client = true, .max = 64u << 20};
  if (handshake(fd, server, path, key, token, &rx) < 0) {
    close(fd);
    sbxd_ws_rx_free(&rx);
    return EXIT_OP_ERROR;
  }

  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGWINCH);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, &old);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  bool tty = isatty(0) && cli_tty_make_raw();
  if (tty)
    send_resize(fd);

  uint64_t offset = (uint64_t) a.since;
  int exit_code = -2; /* none yet */
  bool detached = false, held_p = false, over = false, in_open = true;
  const char *why = "the connection ended";
  char why_buf[160];
  while (!over) {
    struct pollfd fds[3] = {{in_open ? 0 : -1, POLLIN, 0}, {fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[1].revents) {
      char buf[65536];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0)
        break;
      sbxd_ws_feed(&rx, buf, (size_t) n);
      struct ws_event ev;
      int got;
      while (!over && (got = sbxd_ws_next(&rx, &ev)) == 1) {
        if (ev.op == WS_OP_BINARY && ev.len > 0) {
          const char *d = ev.data + 1;
          size_t len = ev.len - 1;
          if (ev.data[0] == 0x03 && len >= 8) { /* the replay: its offset first */
            offset = 0;
            for (int i = 0; i < 8; i++)
              offset = offset << 8 | (uint8_t) d[i];
            d += 8;
            len -= 8;
          }
          offset += len;
          sbx__write_all(ev.data[0] == 0x02 ? 2 : 1, d, len);
        } else if (ev.op == WS_OP_TEXT) {
          json_auto_t *j = json_loadb(ev.data, ev.len, 0, NULL);
          const char *type = json_string_value(json_object_get(j, "type"));
          if (type && strcmp(type, "exit") == 0)
            exit_code = (int) json_integer_value(json_object_get(j, "exit_code"));
          if (type && strcmp(type, "error") == 0) {
            const char *code = json_string_value(json_object_get(j, "code"));
            const char *msg = json_string_value(json_object_get(j, "error"));
            snprintf(why_buf, sizeof why_buf, "%s: %s", code ? code : "error", msg ? msg : "");
            why = why_buf;
          }
        } else if (ev.op == WS_OP_PING) {
          send_frame(fd, WS_OP_PONG, ev.data, ev.len);
        } else if (ev.op == WS_OP_CLOSE) {
          if (exit_code == -2 && ev.code != WS_CLOSE_NORMAL) {
            snprintf(why_buf, sizeof why_buf, "sbxd closed the connection (%d %.*s)", ev.code,
                     (int) ev.len, ev.data);
            why = why_buf;
          }
          send_frame(fd, WS_OP_CLOSE, "\x03\xe8", 2);
          over = true;
        }
      }
      if (got < 0) {
        snprintf(why_buf, sizeof why_buf, "bad frame from sbxd: %s", rx.err);
        why = why_buf;
        over = true;
      }
    }
    if (!over && fds[0].revents) {
      char in[4096], out[4097];
      ssize_t n = read(0, in, sizeof in);
      if (n <= 0) {
        in_open = false; /* our input ended: the session goes on, we keep showing it */
        continue;
      }
      size_t m = 0;
      out[m++] = 0x00;
      for (ssize_t i = 0; i < n && !detached; i++) {
        if (held_p) {
          held_p = false;
          if (in[i] == 0x11) { /* ^P ^Q */
            detached = true;
            break;
          }
          out[m++] = 0x10;
        }
        if (in[i] == 0x10)
          held_p = true;
        else
          out[m++] = in[i];
      }
      if (m > 1 && send_frame(fd, WS_OP_BINARY, out, m) < 0)
        break;
      if (detached) {
        send_frame(fd, WS_OP_CLOSE,
                   "\x03\xe8"
                   "detached",
                   10);
        over = true;
      }
    }
    if (!over && fds[2].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGWINCH && tty)
          send_resize(fd);
        else if (si.ssi_signo != SIGWINCH)
          detached = over = true; /* told to stop: leave the session running */
      }
    }
  }
  cli_tty_restore();
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(sfd);
  close(fd);
  sbxd_ws_rx_free(&rx);
  if (detached) {
    fprintf(stderr, "\r\nsbx: detached from %s at offset %llu (sbx attach --since %llu %s %s)\n",
            sid, (unsigned long long) offset, (unsigned long long) offset, box, sid);
    return 0;
  }
  if (exit_code == -2) {
    fprintf(stderr, "\r\nsbx: attach: %s\n", why);
    return EXIT_OP_ERROR;
  }
  return exit_code < 0 ? 255 : exit_code & 0xff;
}
