/* MCP over streamable HTTP (revision 2025-11-25) at /mcp: the MCP core (src/mcp/) behind
 * sbxd.
 *
 *   POST /mcp    one JSON-RPC message. initialize opens a session (its id comes back in
 *                Mcp-Session-Id, which every later request must carry). A notification or a
 *                response is answered 202; a tool call that asks for progress with an event
 *                stream (text/event-stream: its progress notifications, then its response);
 *                any other request with application/json.
 *   DELETE /mcp  ends the session: what runs is cancelled, the sandbox parked warm.
 *   GET /mcp     405: no server-initiated stream (we send no requests or unsolicited
 *                notifications).
 *
 * A session's scope: the Sbx-User / Sbx-Thread headers of its initialize request, else a thread
 * of its own. The API key, when sbxd has one, is required (OPEN-SANDBOX-API-KEY, or
 * Authorization: Bearer KEY); an Origin that is neither loopback nor the Host is refused (DNS
 * rebinding). Sessions idle for SBXD_MCP_IDLE_MS are ended. */
#include "ctx.h"
#include "http.h"
#include "mcp_http.h"
#include "parse.h"
#include "registry.h"
#include "stream.h"

#include "mcp.h"

#include <string.h>

#define SBXD_MCP_IDLE_MS (3600u * 1000u)

struct hsess {
  char id[33];
  struct mcp_session *ms;
  struct box *box; /* the scope's sandbox while the session holds it */
  int refs;        /* the table's, and each request's */
  bool gone;
  uint64_t used_ms;
  struct hsess *next;
};

static pthread_mutex_t sess_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hsess *sessions;

static sbx_sandbox_t *host_acquire(void *ctx, const char *user, const char *thread,
                                   sbx_error_t *err)
{
  struct hsess *h = ctx;
  sbxd_scope_lock(true);
  sbx_sandbox_t *sb = sbx_acquire(srv.p, user, thread, err);
  if (sb == NULL) {
    sbxd_scope_lock(false);
    return NULL;
  }
  struct box *b = box_get(sbx_sandbox_id(sb));
  if (b == NULL)
    b = box_add(sb, BOX_SCOPE, NULL);
  sbxd_scope_lock(false);
  h->box = b;
  return b->sb;
}

static void host_release(void *ctx, sbx_sandbox_t *sb, bool destroy)
{
  (void) sb;
  struct hsess *h = ctx;
  struct box *b = h->box;
  h->box = NULL;
  if (b == NULL)
    return;
  char id[17];
  snprintf(id, sizeof id, "%s", b->id);
  box_remove(b, destroy ? "mcp_reset" : "released", NULL);
  box_put(b);
  sbx_error_t err = NULL;
  if (destroy && sbx_destroy(srv.admin, id, &err) < 0) {
    sbxd_log(SBXD_WARN, "mcp reset_sandbox %s: %s", id, err->msg);
    sbx_error_release(&err);
  }
}

static struct hsess *sess_get(const char *id)
{
  pthread_mutex_lock(&sess_lock);
  struct hsess *h = sessions;
  while (h && strcmp(h->id, id) != 0)
    h = h->next;
  if (h) {
    h->refs++;
    h->used_ms = sbx__now_ms();
  }
  pthread_mutex_unlock(&sess_lock);
  return h;
}

static bool sess_exists(const char *id)
{
  pthread_mutex_lock(&sess_lock);
  struct hsess *h = sessions;
  while (h && strcmp(h->id, id) != 0)
    h = h->next;
  pthread_mutex_unlock(&sess_lock);
  return h != NULL;
}

static void sess_put(struct hsess *h)
{
  pthread_mutex_lock(&sess_lock);
  bool last = --h->refs == 0;
  pthread_mutex_unlock(&sess_lock);
  if (!last)
    return;
  mcp_session_free(h->ms); /* parks the sandbox (host_release) */
  free(h);
}

/* Takes the session out of the table (new requests get 404) and cancels what runs. */
static void sess_end(struct hsess *h, const char *why)
{
  pthread_mutex_lock(&sess_lock);
  bool was = !h->gone;
  if (was) {
    h->gone = true;
    for (struct hsess **p = &sessions; *p; p = &(*p)->next)
      if (*p == h) {
        *p = h->next;
        break;
      }
  }
  pthread_mutex_unlock(&sess_lock);
  if (!was)
    return;
  sbxd_log_json(SBXD_INFO, "mcp session ended",
                json_pack("{s:s,s:s,s:s,s:s}", "session", h->id, "reason", why, "user",
                          mcp_session_user(h->ms), "thread", mcp_session_thread(h->ms)));
  mcp_cancel_all(h->ms);
  sess_put(h); /* the table's reference */
}

static void sweep_idle(void)
{
  uint64_t now = sbx__now_ms();
  for (;;) {
    pthread_mutex_lock(&sess_lock);
    struct hsess *due = sessions;
    while (due && !(due->refs == 1 && now - due->used_ms > SBXD_MCP_IDLE_MS))
      due = due->next;
    if (due)
      due->refs++;
    pthread_mutex_unlock(&sess_lock);
    if (due == NULL)
      return;
    sess_end(due, "idle");
    sess_put(due);
  }
}

/* ---- responses ---- */

static enum MHD_Result send_body(struct req *r, unsigned status, const char *type, char *body,
                                 const char *session)
{
  size_t len = body ? strlen(body) : 0;
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      len, body ? body : (char *) "", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) {
    free(body);
    return MHD_NO;
  }
  if (type)
    MHD_add_response_header(resp, "Content-Type", type);
  if (session)
    MHD_add_response_header(resp, "Mcp-Session-Id", session);
  return sbxd_respond(r, status, resp);
}

/* An HTTP error with a JSON-RPC error body (id null: the message was not, or not yet, read). */
static enum MHD_Result http_error(struct req *r, unsigned status, json_t *id, int code,
                                  const char *msg)
{
  return send_body(r, status, "application/json", mcp_error_text(id, code, msg), NULL);
}

static void capture(void *arg, const char *json, size_t len)
{
  sbx_buf_t *b = arg;
  if (b->len == 0) /* a request has one answer */
    sbx__buf_append(b, json, len);
}

static void sse_send(void *arg, const char *json, size_t len)
{
  struct stream *s = arg;
  sbx_buf_t b = {0};
  sbx__buf_puts(&b, "event: message\ndata: ");
  sbx__buf_append(&b, json, len);
  sbx__buf_puts(&b, "\n\n");
  stream_raw(s, b.data, b.len);
  sbx__buf_free(&b);
}

/* ---- requests ---- */

/* A request whose client went away (its connection closed) is cancelled: its command killed. */
struct asker {
  struct mcp_session *ms;
  json_t *id;
};

static void asker_gone(void *arg)
{
  struct asker *a = arg;
  mcp_cancel(a->ms, a->id);
}

struct job {
  struct hsess *h;
  struct mcp_msg m;
  struct stream *s;
  struct asker asker;
  struct sbxd_watch *watch;
};

static void *job_main(void *arg)
{
  struct job *j = arg;
  mcp_handle(j->h->ms, &j->m, sse_send, j->s);
  sbxd_watch_stop(j->watch);
  json_decref(j->asker.id);
  stream_finish(j->s);
  stream_unref(j->s);
  sess_put(j->h);
  free(j);
  sbxd_worker_done();
  return NULL;
}

static enum MHD_Result run_streamed(struct req *r, struct hsess *h, struct mcp_msg *m)
{
  struct job *j = xzalloc(sizeof *j);
  j->h = h;
  j->m = *m;
  j->s = stream_new();
  /* the response's reference first: the worker may finish (and drop its own) at once */
  struct MHD_Response *resp = stream_response(j->s, false);
  if (resp == NULL) {
    stream_unref(j->s);
    mcp_msg_free(&j->m);
    free(j);
    sess_put(h);
    return MHD_NO;
  }
  /* stream_response says text/event-stream */
  sbxd_worker_start();
  j->asker = (struct asker){h->ms, json_incref(j->m.id)};
  j->watch = sbxd_watch_start(r->conn, NULL, asker_gone, &j->asker);
  if (sbxd_spawn(job_main, j) < 0) {
    sbxd_worker_done();
    sbxd_watch_stop(j->watch);
    json_decref(j->asker.id);
    MHD_destroy_response(resp);
    enum MHD_Result ret =
        http_error(r, 500, j->m.id, MCP_INTERNAL_ERROR, "Internal error: cannot start a thread");
    stream_unref(j->s);
    mcp_msg_free(&j->m);
    free(j);
    sess_put(h);
    return ret;
  }
  return sbxd_respond(r, 200, resp);
}

static enum MHD_Result initialize(struct req *r, struct mcp_msg *m)
{
  const char *user = sbxd_header(r, "Sbx-User"), *thread = sbxd_header(r, "Sbx-Thread");
  char sid[17];
  sbx_error_t err = NULL;
  if ((user || thread) &&
      sbx_scope_to_id(user ? user : "default", thread ? thread : "x", sid, &err) < 0) {
    cleanup_free char *msg = xasprintf("Bad Sbx-User/Sbx-Thread header: %s", err->msg);
    sbx_error_release(&err);
    enum MHD_Result ret = http_error(r, 400, m->id, MCP_INVALID_REQUEST, msg);
    mcp_msg_free(m);
    return ret;
  }
  sweep_idle();
  struct hsess *h = xzalloc(sizeof *h);
  sbx__random_hex(h->id, 32);
  h->id[32] = '\0';
  struct mcp_host host = {.acquire = host_acquire,
                          .release = host_release,
                          .ctx = h,
                          .home = sbx_provider_home(srv.p),
                          .image = srv.cfg->image,
                          .bash_output_max_chars = srv.cfg->bash_output_max_chars,
                          .read_file_output_max_chars = srv.cfg->read_file_output_max_chars,
                          .ls_output_max_chars = srv.cfg->ls_output_max_chars};
  h->ms = mcp_session_new(&host, user, thread);
  h->refs = 1;
  h->used_ms = sbx__now_ms();
  sbx_buf_t out = {0};
  mcp_handle(h->ms, m, capture, &out);
  char *body = sbx__buf_steal(&out);
  if (mcp_session_protocol(h->ms) == NULL) {
    sess_put(h); /* a failed initialize opens no session */
    return send_body(r, 400, "application/json", body, NULL);
  }
  pthread_mutex_lock(&sess_lock);
  h->next = sessions;
  sessions = h;
  pthread_mutex_unlock(&sess_lock);
  sbxd_log_json(SBXD_INFO, "mcp session started",
                json_pack("{s:s,s:s,s:s}", "session", h->id, "user", mcp_session_user(h->ms),
                          "thread", mcp_session_thread(h->ms)));
  return send_body(r, 200, "application/json", body, h->id);
}

static enum MHD_Result on_post(struct req *r)
{
  struct mcp_msg m;
  mcp_msg_parse(r->body.data, r->body.len, &m);
  if (m.kind == MCP_MSG_INVALID) {
    enum MHD_Result ret = http_error(r, 400, m.id, m.err_code, m.err_msg);
    mcp_msg_free(&m);
    return ret;
  }
  const char *sid = sbxd_header(r, "Mcp-Session-Id");
  /* initialize opens a session; on a live one it is the core's "already initialized" */
  if (m.kind == MCP_MSG_REQUEST && strcmp(m.method, "initialize") == 0 &&
      (sid == NULL || !sess_exists(sid)))
    return initialize(r, &m);
  if (sid == NULL) {
    enum MHD_Result ret =
        http_error(r, 400, m.id, MCP_INVALID_REQUEST,
                   "Bad Request: the Mcp-Session-Id header is required (initialize first)");
    mcp_msg_free(&m);
    return ret;
  }
  const char *ver = sbxd_header(r, "MCP-Protocol-Version");
  if (ver && !mcp_protocol_supported(ver)) {
    cleanup_free char *msg =
        xasprintf("Bad Request: unsupported MCP-Protocol-Version '%.40s'", ver);
    enum MHD_Result ret = http_error(r, 400, m.id, MCP_INVALID_REQUEST, msg);
    mcp_msg_free(&m);
    return ret;
  }
  struct hsess *h = sess_get(sid);
  if (h == NULL) {
    enum MHD_Result ret = http_error(r, 404, m.id, MCP_INVALID_REQUEST,
                                     "Session not found (it ended or expired): initialize again");
    mcp_msg_free(&m);
    return ret;
  }
  if (m.kind != MCP_MSG_REQUEST) {
    mcp_handle(h->ms, &m, capture, &(sbx_buf_t){0});
    sess_put(h);
    return send_body(r, 202, NULL, NULL, NULL);
  }
  /* an event stream only when there is something to stream: progress was asked for. Otherwise
   * the call runs on this connection's thread (a cancellation comes on another connection). */
  json_t *meta = json_object_get(m.params, "_meta");
  if (mcp_msg_slow(&m) && json_object_get(meta, "progressToken"))
    return run_streamed(r, h, &m); /* takes m and our reference */
  sbx_buf_t out = {0};
  struct asker asker = {h->ms, json_incref(m.id)};
  struct sbxd_watch *w =
      mcp_msg_slow(&m) ? sbxd_watch_start(r->conn, NULL, asker_gone, &asker) : NULL;
  mcp_handle(h->ms, &m, capture, &out);
  sbxd_watch_stop(w);
  json_decref(asker.id);
  sess_put(h);
  if (out.len == 0) /* cancelled: no response, as the spec asks */
    return send_body(r, 202, NULL, NULL, NULL);
  return send_body(r, 200, "application/json", sbx__buf_steal(&out), NULL);
}

static bool origin_ok(struct req *r)
{
  const char *o = sbxd_header(r, "Origin");
  if (o == NULL)
    return true; /* not a browser */
  const char *host = strstr(o, "://");
  host = host ? host + 3 : o;
  const char *h = sbxd_header(r, "Host");
  if (h && strcmp(host, h) == 0)
    return true;
  size_t n = strcspn(host, ":/");
  if (host[0] == '[')
    n = strcspn(host, "]") + 1;
  static const char *const loop[] = {"localhost", "127.0.0.1", "[::1]"};
  for (size_t i = 0; i < ARRAY_SIZE(loop); i++)
    if (strlen(loop[i]) == n && strncmp(host, loop[i], n) == 0)
      return true;
  return false;
}

static bool key_ok(struct req *r)
{
  if (srv.api_key == NULL)
    return true;
  const char *k = sbxd_header(r, SBXD_API_KEY_HEADER);
  if (k && sbxd_secret_equal(k, srv.api_key))
    return true;
  const char *a = sbxd_header(r, "Authorization");
  return a && strncmp(a, "Bearer ", 7) == 0 && sbxd_secret_equal(a + 7, srv.api_key);
}

enum MHD_Result sbxd_mcp(struct req *r)
{
  if (!key_ok(r))
    return http_error(r, 401, NULL, MCP_INVALID_REQUEST,
                      "Unauthorized: send the API key (OPEN-SANDBOX-API-KEY header, or "
                      "Authorization: Bearer KEY)");
  if (!origin_ok(r))
    return http_error(r, 403, NULL, MCP_INVALID_REQUEST,
                      "Forbidden: this Origin may not use the MCP endpoint");
  if (strcmp(r->method, "POST") == 0) {
    r->done = on_post;
    r->body_max = MCP_MSG_MAX;
    return MHD_YES;
  }
  if (strcmp(r->method, "DELETE") == 0) {
    const char *sid = sbxd_header(r, "Mcp-Session-Id");
    struct hsess *h = sid ? sess_get(sid) : NULL;
    if (h == NULL)
      return http_error(r, sid ? 404 : 400, NULL, MCP_INVALID_REQUEST,
                        sid ? "Session not found" : "Bad Request: Mcp-Session-Id is required");
    sess_end(h, "deleted");
    sess_put(h);
    return send_body(r, 204, NULL, NULL, NULL);
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(0, (char *) "", MHD_RESPMEM_PERSISTENT);
  if (resp == NULL)
    return MHD_NO;
  MHD_add_response_header(resp, "Allow", "POST, DELETE");
  return sbxd_respond(r, 405, resp);
}
