/* sbxd: OpenSandbox's lifecycle and execd HTTP APIs (and DeerFlow's contract as JSON) over
 * libsbx, served by libmicrohttpd with a thread per connection. See docs/sbxd.md. */
#ifndef SBXD_H
#define SBXD_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sbx/sbx.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "parse.h"
#include "text.h"
#include "util.h"

#define SBXD_EXECD_PORT 44772
#define SBXD_EGRESS_PORT 18080
#define SBXD_TOKEN_HEADER "X-EXECD-ACCESS-TOKEN"
#define SBXD_API_KEY_HEADER "OPEN-SANDBOX-API-KEY"

/* body caps */
#define SBXD_BODY_LIFECYCLE (1u << 20) /* lifecycle JSON */
#define SBXD_BODY_EXECD (16u << 20)    /* execd JSON */
#define SBXD_BODY_CONTRACT (64u << 20) /* contract JSON (write_file content, base64 files) */
#define SBXD_BODY_STREAM (4ull << 30)  /* uploads and proxied bodies */
#define SBXD_STREAM_QUEUE (8u << 20)   /* event bytes kept for a slow client */
#define SBXD_MAX_CONNECTIONS 1024
#define SBXD_PING_INTERVAL_MS 3000

/* main.c: wakes the thread that keeps spares ready (after a create took one) */
void sbxd_spares_kick(void);

/* ---- logging: JSON lines on stderr ---- */
enum { SBXD_ERROR, SBXD_WARN, SBXD_INFO, SBXD_DEBUG };
void sbxd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One log line with extra JSON fields (steals fields). */
void sbxd_log_json(int level, const char *msg, json_t *fields);
void sbxd_lib_log(int level, const char *msg, void *arg);

/* ---- the sandboxes sbxd serves ---- */

enum { BOX_MANAGED = 1, BOX_SCOPE = 2 };

struct session;

struct box {
  char id[17];
  int kind;
  sbx_sandbox_t *sb;
  char token[65];
  pthread_mutex_t lock; /* everything below */
  json_t *extra;        /* persisted with the sandbox (sbx_extra_set) */
  int64_t created_ms;
  int64_t expires_ms; /* 0: manual cleanup */
  bool paused;
  struct session *sessions;
  double cpu_prev_s; /* metrics sample */
  uint64_t cpu_prev_at;
  sbx_strv_t users, groups; /* the sandbox's /etc/passwd and /etc/group, "name:id" */
  bool names_loaded;
  /* registry */
  int refs;
  bool gone;
  struct box *next;
};

struct sbxd {
  sbx_provider_t *p;     /* holds every sandbox sbxd serves */
  sbx_provider_t *admin; /* destroys sandboxes (never holds any) */
  struct sbx_config *cfg;
  char *home;
  char *api_key; /* NULL: no lifecycle auth */
  char *listen;
  const char *shell; /* "bash" if the image has it, else "sh" */
  struct MHD_Daemon *mhd;
  atomic_bool stopping;
  atomic_int workers; /* detached worker threads still running */
  pthread_mutex_t reg_lock;
  pthread_cond_t reg_cond; /* wakes the expiry thread */
  struct box *boxes;
};
extern struct sbxd g;

/* registry.c */
int sbxd_registry_start(void);
/* Stops the expiry thread; with free_boxes also drops the table (handles stay held by g.p). */
void sbxd_registry_stop(bool free_boxes);
/* Takes a reference to a live box, or NULL. */
struct box *box_get(const char *id);
void box_put(struct box *b);
struct box *box_ref(struct box *b); /* another reference to a box one already holds */
/* A new box for a handle sbxd holds; the returned reference is the caller's. */
struct box *box_add(sbx_sandbox_t *sb, int kind, json_t *extra);
/* Removes the box (new requests no longer find it) and destroys the sandbox when managed, or
 * releases it (parks it warm) for a scope box. */
int box_remove(struct box *b, const char *why, sbx_error_t *err);
/* Persists b->extra (caller holds b->lock). */
int box_save(struct box *b, sbx_error_t *err);
/* Refs to every box of a kind, newest first; free with box_list_free. */
struct box **box_list(int kind, size_t *n);
void box_list_free(struct box **v, size_t n);
void sbxd_expiry_kick(void);
/* Held around sbx_acquire + box_add, and around releasing a handle (see registry.c). */
void sbxd_scope_lock(bool lock);
/* Worker bookkeeping for shutdown. */
void sbxd_worker_start(void);
void sbxd_worker_done(void);
/* Starts a detached thread. */
int sbxd_spawn(void *(*fn)(void *), void *arg);

/* ---- requests ---- */

struct req;
typedef enum MHD_Result (*req_fn)(struct req *r);

struct req {
  struct MHD_Connection *conn;
  char *raw_uri; /* as sent: path and query */
  const char *method;
  const char *url; /* the decoded path (MHD's) */
  char rid[80];    /* X-Request-ID */
  uint64_t t0;
  unsigned status;
  bool begun;
  bool responded;
  /* route */
  sbx_strv_t seg; /* decoded path segments */
  struct box *box;
  const char *sub; /* execd path below the endpoint prefix ("/" at least) */
  char *raw_sub;   /* raw path + query below the prefix (port proxy) */
  int port;
  /* body */
  sbx_buf_t body;
  uint64_t body_max, body_seen;
  bool body_too_big;
  req_fn done;                                            /* at the end of the body */
  int (*on_body)(struct req *r, const char *d, size_t n); /* streaming consumers */
  void (*on_close)(struct req *r, bool completed);
  void *ctx;
};

/* server.c: the listener */
bool sbxd_listen_is_loopback(const char *listen);
int sbxd_server_start(char **bound); /* *bound gets the address actually bound */
void sbxd_server_stop(void);

/* server.c: responses (each queues, adds X-Request-ID, and marks r->responded) */
enum MHD_Result sbxd_respond(struct req *r, unsigned status, struct MHD_Response *resp);
enum MHD_Result sbxd_json(struct req *r, unsigned status, json_t *j); /* steals j */
enum MHD_Result sbxd_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
enum MHD_Result sbxd_empty(struct req *r, unsigned status); /* Content-Length: 0 */
enum MHD_Result sbxd_text(struct req *r, unsigned status, const char *type, const char *data,
                          size_t len);
/* The library error's HTTP status and {code, message} (code: "SBX::<KIND>"). Releases err. */
enum MHD_Result sbxd_lib_error(struct req *r, sbx_error_t *err);
unsigned sbxd_kind_status(int kind);

const char *sbxd_header(struct req *r, const char *name);
const char *sbxd_query(struct req *r, const char *name);
/* Every value of a repeated query parameter (pointers into MHD's storage). */
size_t sbxd_query_all(struct req *r, const char *name, const char **out, size_t max);
/* Parses the JSON body; on failure answers (status/code given) and returns NULL. */
json_t *sbxd_body_json(struct req *r, unsigned status, const char *code, enum MHD_Result *ret);
/* "host[:port]" clients used to reach us (the Host header when sane, else the listen address). */
char *sbxd_public_host(struct req *r);
bool sbxd_api_key_ok(struct req *r);

/* json helpers */
json_t *sbxd_jstr(const char *s, size_t len); /* sanitised UTF-8 */
json_t *sbxd_jtime(int64_t ms);
int64_t sbxd_now_ms(void);

/* lifecycle.c */
enum MHD_Result sbxd_lifecycle(struct req *r, sbx_strv_t *seg);
json_t *sbxd_sandbox_json(struct box *b, const char *state, bool for_create);

/* execd.c: r->box and r->sub are set; decides the handler (may start streaming) */
enum MHD_Result sbxd_execd_begin(struct req *r);
bool sbxd_box_paused(struct box *b);
void sbxd_sessions_free(struct box *b); /* caller holds no lock; the box is going away */

/* files.c */
enum MHD_Result sbxd_files_begin(struct req *r, const char *sub);
/* Maps uid/gid to names inside the sandbox (its /etc/passwd, /etc/group). */
char *sbxd_owner_name(struct box *b, unsigned id, bool group);
json_t *sbxd_file_info_json(struct box *b, const struct sbx_file_info *fi, const char *path);

/* proxy.c: forwards the request to r->port inside r->box */
enum MHD_Result sbxd_proxy_begin(struct req *r);

/* contract.c */
enum MHD_Result sbxd_contract(struct req *r, sbx_strv_t *seg);

/* mcp_http.c: MCP over streamable HTTP at /mcp (the whole endpoint: auth, methods, body) */
enum MHD_Result sbxd_mcp(struct req *r);

/* stream.c: an event stream fed by a worker thread and drained by MHD */
struct stream;
struct stream *stream_new(void);
void stream_unref(struct stream *s);
/* Appends one event (JSON object; type and timestamp are added first) as "{...}\n\n". */
void stream_event(struct stream *s, const char *type, json_t *fields);
void stream_raw(struct stream *s, const char *data, size_t len);
/* No more events (the response ends when the queue is drained). */
void stream_finish(struct stream *s);
bool stream_detached(struct stream *s);
/* The response draining s (takes a reference); pings every SBXD_PING_INTERVAL_MS if ping. */
struct MHD_Response *stream_response(struct stream *s, bool ping);
/* Start handshake: the worker reports start (or failure) once; the handler waits for it. */
void stream_started(struct stream *s);
void stream_failed(struct stream *s, sbx_error_t *err); /* takes err */
/* Waits for the handshake; returns 0 when started, -1 with *err when failed. */
int stream_wait_start(struct stream *s, sbx_error_t *err);

/* A response body read from a file descriptor (a pipe fed by a worker): size bytes, or
 * MHD_SIZE_UNKNOWN. The fd is closed with the response. */
struct MHD_Response *fd_response(int fd, uint64_t size);

#endif
