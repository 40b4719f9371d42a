/* The sandboxes sbxd serves, their expiry, and adoption at startup.
 *
 * A box wraps a handle held by srv.p. Requests take a reference; removal unlinks the box at once
 * (later requests get 404) and destroys the sandbox through a second provider, srv.admin, which
 * holds nothing: the kill and the state removal never free a handle that an in-flight request
 * (a long command, a download) is still using. That request then fails with a backend error,
 * and the last reference releases the handle.
 *
 * Expiry lives in the sandbox's extra JSON on disk, so a restarted sbxd adopts what is still
 * running and destroys what expired while it was down. */
#include "registry.h"
#include "ctx.h"
#include "http.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define GC_INTERVAL_MS 60000

static pthread_t expiry_thread;
static bool expiry_running;

/* the table */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER; /* wakes the expiry thread */
static struct box *boxes;

static void session_free_all(struct box *b);

/* A scope's sandbox can be released and acquired again while a request still holds the old box:
 * both boxes share the provider's handle. The handle is released only when no live box has the
 * id, under scope_lock, which sbx_acquire + box_add also hold. */
static pthread_mutex_t scope_lock = PTHREAD_MUTEX_INITIALIZER;

void sbxd_scope_lock(bool lock)
{
  if (lock)
    pthread_mutex_lock(&scope_lock);
  else
    pthread_mutex_unlock(&scope_lock);
}

static bool live_box(const char *id)
{
  pthread_mutex_lock(&reg_lock);
  bool found = false;
  for (struct box *o = boxes; o && !found; o = o->next)
    found = strcmp(o->id, id) == 0;
  pthread_mutex_unlock(&reg_lock);
  return found;
}

/* What a box owns (its handle is the provider's). */
static void box_free(struct box *b)
{
  session_free_all(b);
  json_decref(b->extra);
  sbx__strv_free(&b->users);
  sbx__strv_free(&b->groups);
  pthread_mutex_destroy(&b->lock);
  free(b);
}

static void box_finalize(struct box *b)
{
  sbx_error_t err = NULL;
  sbxd_scope_lock(true);
  if (!live_box(b->id) && sbx_release(srv.p, b->id, &err) < 0) {
    sbxd_log(SBXD_DEBUG, "release %s: %s", b->id, err->msg);
    sbx_error_release(&err);
  }
  sbxd_scope_lock(false);
  box_free(b);
}

struct box *box_get(const char *id)
{
  if (id == NULL)
    return NULL;
  pthread_mutex_lock(&reg_lock);
  struct box *b = boxes;
  while (b && strcmp(b->id, id) != 0)
    b = b->next;
  if (b)
    b->refs++;
  pthread_mutex_unlock(&reg_lock);
  return b;
}

struct box *box_ref(struct box *b)
{
  pthread_mutex_lock(&reg_lock);
  b->refs++;
  pthread_mutex_unlock(&reg_lock);
  return b;
}

struct box *box_get_kind(const char *id, int kind)
{
  struct box *b = box_get(id);
  if (b && b->kind != kind) {
    box_put(b);
    return NULL;
  }
  return b;
}

void box_put(struct box *b)
{
  if (b == NULL)
    return;
  pthread_mutex_lock(&reg_lock);
  bool last = --b->refs == 0 && b->gone;
  pthread_mutex_unlock(&reg_lock);
  if (last)
    box_finalize(b);
}

static int64_t json_ms(json_t *v)
{
  return json_is_integer(v) ? (int64_t) json_integer_value(v) : 0;
}

struct box *box_add(sbx_sandbox_t *sb, int kind, json_t *extra)
{
  struct box *b = xzalloc(sizeof *b);
  snprintf(b->id, sizeof b->id, "%s", sbx_sandbox_id(sb));
  b->kind = kind;
  b->sb = sb;
  pthread_mutex_init(&b->lock, NULL);
  b->extra = extra ? extra : json_object();
  const char *tok = json_string_value(json_object_get(b->extra, "token"));
  if (tok && strlen(tok) == 64) {
    snprintf(b->token, sizeof b->token, "%s", tok);
  } else {
    sbx__random_hex(b->token, 64);
    b->token[64] = '\0';
  }
  b->created_ms = json_ms(json_object_get(b->extra, "createdAt"));
  if (b->created_ms == 0)
    b->created_ms = sbxd_now_ms();
  b->expires_ms = json_ms(json_object_get(b->extra, "expiresAt"));
  b->refs = 2; /* the table's and the caller's */
  pthread_mutex_lock(&reg_lock);
  for (struct box *o = boxes; o; o = o->next)
    if (strcmp(o->id, b->id) == 0) { /* another thread added it meanwhile */
      o->refs++;
      pthread_mutex_unlock(&reg_lock);
      json_decref(b->extra);
      pthread_mutex_destroy(&b->lock);
      free(b);
      return o;
    }
  b->next = boxes;
  boxes = b;
  pthread_cond_broadcast(&reg_cond);
  pthread_mutex_unlock(&reg_lock);
  return b;
}

int box_save(struct box *b, sbx_error_t *err)
{
  cleanup_free char *s = json_dumps(b->extra, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s == NULL)
    return -1;
  return sbx_extra_set(srv.p, b->id, s, err);
}

int box_remove(struct box *b, const char *why, sbx_error_t *err)
{
  pthread_mutex_lock(&reg_lock);
  if (b->gone) {
    pthread_mutex_unlock(&reg_lock);
    return 0;
  }
  for (struct box **pp = &boxes; *pp; pp = &(*pp)->next)
    if (*pp == b) {
      *pp = b->next;
      break;
    }
  b->gone = true;
  pthread_mutex_unlock(&reg_lock);
  int r = 0;
  if (b->kind == BOX_MANAGED) {
    pthread_mutex_lock(&b->lock);
    bool paused = b->paused;
    pthread_mutex_unlock(&b->lock);
    /* a frozen process cannot die: thaw first */
    if (paused)
      sbx_pause(srv.p, b->id, false, NULL);
    r = sbx_destroy(srv.admin, b->id, err);
    if (r < 0 && err && *err && (*err)->kind == SBX_E_NOT_FOUND) {
      sbx_error_release(err);
      r = 0;
    }
    sbxd_log_json(SBXD_INFO, "sandbox removed",
                  json_pack("{s:s,s:s,s:b}", "sandbox_id", b->id, "reason", why, "ok", r == 0));
  }
  box_put(b); /* the table's reference */
  return r;
}

static int cmp_box(const void *a, const void *b)
{
  const struct box *x = *(struct box *const *) a, *y = *(struct box *const *) b;
  if (x->created_ms != y->created_ms)
    return x->created_ms > y->created_ms ? -1 : 1;
  return strcmp(x->id, y->id);
}

struct box **box_list(int kind, size_t *n)
{
  pthread_mutex_lock(&reg_lock);
  size_t count = 0;
  for (struct box *b = boxes; b; b = b->next)
    count++;
  struct box **v = xzalloc((count + 1) * sizeof *v);
  size_t k = 0;
  for (struct box *b = boxes; b; b = b->next)
    if (b->kind == kind) {
      b->refs++;
      v[k++] = b;
    }
  pthread_mutex_unlock(&reg_lock);
  qsort(v, k, sizeof *v, cmp_box);
  *n = k;
  return v;
}

void box_list_free(struct box **v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    box_put(v[i]);
  free(v);
}

void sbxd_expiry_kick(void)
{
  pthread_mutex_lock(&reg_lock);
  pthread_cond_broadcast(&reg_cond);
  pthread_mutex_unlock(&reg_lock);
}

static void *expiry_main(void *arg)
{
  (void) arg;
  int64_t last_gc = sbxd_now_ms();
  pthread_mutex_lock(&reg_lock);
  while (!atomic_load(&srv.stopping)) {
    int64_t now = sbxd_now_ms(), next = now + 5000;
    struct box **due = NULL;
    size_t n_due = 0;
    for (struct box *b = boxes; b; b = b->next) {
      if (b->kind != BOX_MANAGED)
        continue;
      pthread_mutex_lock(&b->lock);
      int64_t exp = b->expires_ms;
      pthread_mutex_unlock(&b->lock);
      if (exp == 0)
        continue;
      if (exp <= now) {
        due = xreallocarray(due, n_due + 1, sizeof *due);
        b->refs++;
        due[n_due++] = b;
      } else if (exp < next) {
        next = exp;
      }
    }
    pthread_mutex_unlock(&reg_lock);
    for (size_t i = 0; i < n_due; i++) {
      sbx_error_t err = NULL;
      if (box_remove(due[i], "ttl_expiry", &err) < 0) {
        sbxd_log(SBXD_WARN, "expire sandbox %s: %s", due[i]->id, err ? err->msg : "?");
        sbx_error_release(&err);
      }
      box_put(due[i]);
    }
    free(due);
    if (now - last_gc >= GC_INTERVAL_MS) {
      last_gc = now;
      sbx_error_t err = NULL;
      if (sbx_gc(srv.p, &err) < 0) {
        sbxd_log(SBXD_WARN, "reaper pass: %s", err->msg);
        sbx_error_release(&err);
      }
      if (last_gc + GC_INTERVAL_MS < next)
        next = last_gc + GC_INTERVAL_MS;
    }
    pthread_mutex_lock(&reg_lock);
    if (n_due == 0 && !atomic_load(&srv.stopping)) {
      struct timespec ts = {.tv_sec = (time_t) (next / 1000),
                            .tv_nsec = (long) (next % 1000) * 1000000};
      pthread_cond_timedwait(&reg_cond, &reg_lock, &ts);
    }
  }
  pthread_mutex_unlock(&reg_lock);
  return NULL;
}

/* Adopts the managed sandboxes a previous sbxd left running; destroys the dead and the
 * expired. */
static void adopt(void)
{
  struct sbx_sandbox_info *infos = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (sbx_list(srv.p, &infos, &n, &err) < 0) {
    sbxd_log(SBXD_WARN, "list sandboxes: %s", err->msg);
    sbx_error_release(&err);
    return;
  }
  int64_t now = sbxd_now_ms();
  size_t adopted = 0, removed = 0;
  for (size_t i = 0; i < n; i++) {
    const struct sbx_sandbox_info *in = &infos[i];
    if (in->user != NULL || in->thread != NULL)
      continue; /* a scope's sandbox: the provider's business */
    cleanup_free char *extra_s = sbx_extra_get(srv.p, in->id, NULL);
    json_auto_t *extra = extra_s ? json_loads(extra_s, 0, NULL) : NULL;
    if (!json_is_object(extra) || !json_object_get(extra, "sbxd"))
      continue; /* not made by sbxd */
    int64_t exp = json_ms(json_object_get(extra, "expiresAt"));
    const char *why = in->state == SBX_STATE_DEAD ? "dead"
                      : exp && exp <= now         ? "ttl_expiry"
                                                  : NULL;
    if (why) {
      if (in->paused)
        sbx_pause(srv.p, in->id, false, NULL);
      int r = sbx_destroy(srv.admin, in->id, &err);
      sbxd_log_json(SBXD_INFO, "sandbox removed at startup",
                    json_pack("{s:s,s:s,s:b}", "sandbox_id", in->id, "reason", why, "ok", r == 0));
      sbx_error_release(&err);
      removed++;
      continue;
    }
    sbx_sandbox_t *sb = sbx_open(srv.p, in->id, &err);
    if (sb == NULL) {
      sbxd_log(SBXD_WARN, "adopt sandbox %s: %s", in->id, err->msg);
      sbx_error_release(&err);
      continue;
    }
    struct box *b = box_add(sb, BOX_MANAGED, steal_pointer(&extra));
    b->paused = in->paused;
    box_put(b);
    adopted++;
  }
  sbx_sandbox_info_free(infos, n);
  sbxd_log_json(
      SBXD_INFO, "sandboxes adopted",
      json_pack("{s:I,s:I}", "adopted", (json_int_t) adopted, "removed", (json_int_t) removed));
}

int sbxd_registry_start(void)
{
  adopt();
  if (pthread_create(&expiry_thread, NULL, expiry_main, NULL) != 0) {
    sbxd_log(SBXD_ERROR, "cannot start the expiry thread: %s", strerror(errno));
    return -1;
  }
  expiry_running = true;
  return 0;
}

void sbxd_registry_stop(bool free_boxes)
{
  if (expiry_running) {
    sbxd_expiry_kick();
    pthread_join(expiry_thread, NULL);
    expiry_running = false;
  }
  if (!free_boxes)
    return;
  /* Drop the table's references; handles still held are parked by sbx_provider_free. */
  pthread_mutex_lock(&reg_lock);
  struct box *b = boxes;
  boxes = NULL;
  pthread_mutex_unlock(&reg_lock);
  while (b) {
    struct box *next = b->next;
    box_free(b);
    b = next;
  }
}

/* ---- what is kept per box ---- */

bool box_paused(struct box *b)
{
  pthread_mutex_lock(&b->lock);
  bool p = b->paused;
  pthread_mutex_unlock(&b->lock);
  return p;
}

void session_free(struct session *s)
{
  if (s == NULL)
    return;
  free(s->cwd);
  json_decref(s->env);
  free(s);
}

static void session_free_all(struct box *b)
{
  struct session *s = b->sessions;
  while (s) {
    struct session *next = s->next;
    session_free(s);
    s = next;
  }
  b->sessions = NULL;
}

struct session *box_session_find(struct box *b, const char *id)
{
  for (struct session *s = b->sessions; s; s = s->next)
    if (strcmp(s->id, id) == 0)
      return s;
  return NULL;
}

void box_session_add(struct box *b, struct session *s)
{
  pthread_mutex_lock(&b->lock);
  s->next = b->sessions;
  b->sessions = s;
  pthread_mutex_unlock(&b->lock);
}

struct session *box_session_take(struct box *b, const char *id)
{
  struct session *found = NULL;
  pthread_mutex_lock(&b->lock);
  for (struct session **pp = &b->sessions; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, id) == 0) {
      found = *pp;
      *pp = found->next;
      break;
    }
  pthread_mutex_unlock(&b->lock);
  return found;
}

/* "name:id" lines of a passwd/group file inside the sandbox. */
static void load_names(struct box *b, const char *file, sbx_strv_t *out)
{
  cleanup_close int fd = memfd_create("sbxd-names", MFD_CLOEXEC);
  if (fd < 0 || sbx_read_range(b->sb, file, 0, 1u << 20, fd, NULL, NULL, NULL) < 0)
    return;
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0)
    return;
  cleanup_free char *text = xmalloc((size_t) size + 1);
  if (pread(fd, text, (size_t) size, 0) != size)
    return;
  text[size] = '\0';
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *f1 = strchr(line, ':');
    char *f2 = f1 ? strchr(f1 + 1, ':') : NULL;
    if (f2 == NULL)
      continue;
    *f1 = '\0';
    sbx__strv_push_owned(out, xasprintf("%s:%ld", line, strtol(f2 + 1, NULL, 10)));
  }
}

char *box_owner_name(struct box *b, unsigned id, bool group)
{
  pthread_mutex_lock(&b->lock);
  bool loaded = b->names_loaded;
  pthread_mutex_unlock(&b->lock);
  if (!loaded) {
    sbx_strv_t users = {0}, groups = {0};
    load_names(b, "/etc/passwd", &users);
    load_names(b, "/etc/group", &groups);
    pthread_mutex_lock(&b->lock);
    if (!b->names_loaded) {
      b->users = users;
      b->groups = groups;
      b->names_loaded = true;
    } else {
      sbx__strv_free(&users);
      sbx__strv_free(&groups);
    }
    pthread_mutex_unlock(&b->lock);
  }
  char *name = NULL;
  pthread_mutex_lock(&b->lock);
  sbx_strv_t *v = group ? &b->groups : &b->users;
  char want[24];
  snprintf(want, sizeof want, ":%u", id);
  for (size_t i = 0; i < v->n && name == NULL; i++)
    if (sbx__str_has_suffix(v->v[i], want))
      name = xstrndup(v->v[i], strlen(v->v[i]) - strlen(want));
  pthread_mutex_unlock(&b->lock);
  return name ? name : xasprintf("%u", id);
}
