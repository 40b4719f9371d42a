/* Creates that answered before their sandbox exists: sbxd's create of an image it has to pull
 * answers 202 at once (Pending, IMAGE_PULLING) and a thread pulls and makes the sandbox under the
 * id it answered with (lifecycle.c). Until then GET, list and DELETE find the record here; a
 * failed one stays Failed (PROVISIONING_ERROR, the error) for an hour, like the pending records
 * of OpenSandbox's Docker runtime. In memory only: a create in flight dies with sbxd. */
#include "pending.h"
#include "http.h"

#include <pthread.h>
#include <string.h>

#include "util.h"

#define FAILED_TTL_MS (3600 * 1000)

struct rec {
  struct pending_info i;
  bool deleted; /* by a DELETE while its create runs */
  struct rec *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct rec *head;

void pending_info_free(struct pending_info *pi)
{
  json_decref(pi->extra);
  free(pi->reason);
  free(pi->message);
  memset(pi, 0, sizeof *pi);
}

static void rec_set(struct rec *r, const char *state, const char *reason, const char *message)
{
  snprintf(r->i.state, sizeof r->i.state, "%s", state);
  free(r->i.reason);
  free(r->i.message);
  r->i.reason = xstrdup(reason);
  r->i.message = xstrdup(message);
  r->i.trans_ms = sbxd_now_ms();
}

/* Unlinks *pp's record and frees it. */
static void rec_drop(struct rec **pp)
{
  struct rec *r = *pp;
  *pp = r->next;
  pending_info_free(&r->i);
  free(r);
}

/* Failed records past their hour go (caller holds mu). */
static void expire(void)
{
  int64_t now = sbxd_now_ms();
  for (struct rec **pp = &head; *pp;) {
    if (strcmp((*pp)->i.state, "Failed") == 0 && now - (*pp)->i.trans_ms > FAILED_TTL_MS)
      rec_drop(pp);
    else
      pp = &(*pp)->next;
  }
}

static struct rec **find(const char *id)
{
  for (struct rec **pp = &head; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->i.id, id) == 0)
      return pp;
  return NULL;
}

void pending_add(const char *id, json_t *extra, const char *reason, const char *message)
{
  struct rec *r = xzalloc(sizeof *r);
  snprintf(r->i.id, sizeof r->i.id, "%s", id);
  r->i.extra = json_deep_copy(extra); /* the box changes its own once it exists */
  rec_set(r, "Pending", reason, message);
  pthread_mutex_lock(&mu);
  expire();
  struct rec **tail = &head;
  while (*tail)
    tail = &(*tail)->next;
  *tail = r;
  pthread_mutex_unlock(&mu);
}

void pending_set(const char *id, const char *state, const char *reason, const char *message)
{
  pthread_mutex_lock(&mu);
  struct rec **pp = find(id);
  if (pp)
    rec_set(*pp, state, reason, message);
  pthread_mutex_unlock(&mu);
}

static void copy_out(const struct rec *r, struct pending_info *out)
{
  *out = r->i;
  out->extra = json_deep_copy(r->i.extra);
  out->reason = xstrdup(r->i.reason);
  out->message = xstrdup(r->i.message);
}

bool pending_get(const char *id, struct pending_info *out)
{
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&mu);
  expire();
  struct rec **pp = id ? find(id) : NULL;
  bool ok = pp && !(*pp)->deleted;
  if (ok)
    copy_out(*pp, out);
  pthread_mutex_unlock(&mu);
  return ok;
}

size_t pending_list(struct pending_info **out)
{
  pthread_mutex_lock(&mu);
  expire();
  size_t n = 0;
  for (struct rec *r = head; r; r = r->next)
    n++;
  *out = xzalloc((n + 1) * sizeof **out);
  n = 0;
  for (struct rec *r = head; r; r = r->next)
    if (!r->deleted)
      copy_out(r, &(*out)[n++]);
  pthread_mutex_unlock(&mu);
  return n;
}

bool pending_done(const char *id, bool failed, const char *msg)
{
  pthread_mutex_lock(&mu);
  struct rec **pp = find(id);
  bool deleted = pp == NULL || (*pp)->deleted;
  if (pp && (deleted || !failed))
    rec_drop(pp);
  else if (pp)
    rec_set(*pp, "Failed", "PROVISIONING_ERROR", msg ? msg : "Sandbox provisioning failed.");
  pthread_mutex_unlock(&mu);
  return deleted;
}

bool pending_delete(const char *id)
{
  pthread_mutex_lock(&mu);
  struct rec **pp = find(id);
  bool found = pp && !(*pp)->deleted;
  if (found && strcmp((*pp)->i.state, "Failed") == 0)
    rec_drop(pp);
  else if (found)
    (*pp)->deleted = true; /* the create's thread removes it, and its sandbox */
  pthread_mutex_unlock(&mu);
  return found;
}
