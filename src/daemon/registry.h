/* The sandboxes sbxd serves (boxes) and everything it keeps about each: its token, expiry,
 * pause state, bash sessions, metrics sample and owner names; their expiry thread, and their
 * adoption at startup. The table and its lock are registry.c's own. */
#ifndef SBXD_REGISTRY_H
#define SBXD_REGISTRY_H

#include <jansson.h>
#include <pthread.h>
#include <sbx/sbx.h>
#include <stdbool.h>
#include <stdint.h>

#include "util.h"

enum { BOX_MANAGED = 1, BOX_SCOPE = 2 };

/* A bash session (execd's /session): cwd and exported variables carried from run to run. */
struct session {
  char id[37];
  char *cwd;
  json_t *env;     /* persisted exports */
  char run_id[65]; /* the command running now, "" when idle */
  struct session *next;
};

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
  /* the table's (under its lock) */
  int refs;
  bool gone;
  struct box *next;
};

/* Adopts what a previous sbxd left running, then starts the expiry thread. */
int sbxd_registry_start(void);
/* Stops the expiry thread; with free_boxes also drops the table (handles stay held by srv.p). */
void sbxd_registry_stop(bool free_boxes);
/* Takes a reference to a live box, or NULL. */
struct box *box_get(const char *id);
/* A reference to a live box of that kind, or NULL. */
struct box *box_get_kind(const char *id, int kind);
void box_put(struct box *b);
struct box *box_ref(struct box *b); /* another reference to a box one already holds */
/* A new box for a handle sbxd holds; the returned reference is the caller's. */
struct box *box_add(sbx_sandbox_t *sb, int kind, json_t *extra);
/* Removes the box (new requests no longer find it) and destroys the sandbox when managed, or
 * releases it (parks it warm) for a scope box. */
int box_remove(struct box *b, const char *why, sbx_error_t *err);
/* Persists b->extra (caller holds b->lock). */
int box_save(struct box *b, sbx_error_t *err);
bool box_paused(struct box *b);
/* Refs to every box of a kind, newest first; free with box_list_free. */
struct box **box_list(int kind, size_t *n);
void box_list_free(struct box **v, size_t n);
/* Wakes the expiry thread (an expiry changed). */
void sbxd_expiry_kick(void);
/* Held around sbx_acquire + box_add, and around releasing a handle (see registry.c). */
void sbxd_scope_lock(bool lock);

/* Sessions: find needs b->lock held; add and take lock it themselves. */
struct session *box_session_find(struct box *b, const char *id);
void box_session_add(struct box *b, struct session *s);
/* Unlinks the session and returns it (the caller frees it with session_free), or NULL. */
struct session *box_session_take(struct box *b, const char *id);
void session_free(struct session *s);

/* The name of a uid/gid inside the sandbox (its /etc/passwd, /etc/group), else the number. */
char *box_owner_name(struct box *b, unsigned id, bool group);

#endif
