/* Unit tests for the provider's policies (src/lib/provider.c, spares.c, instance.c) over the
 * in-memory backend (fake_backend.c): the replica cap, reclaim and its health check, gc, and the
 * spare pool (fill, take, stale keys, a failed adopt, `down`). No root, no sandboxes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include <sbx/config.h>
#include <sbx/sbx.h>

#include "fake_backend.h"

struct ctx {
  char home[64];
  struct sbx_config *cfg;
  sbx_provider_t *p;
};

static int setup(void **state)
{
  struct ctx *c = xzalloc(sizeof *c);
  snprintf(c->home, sizeof c->home, "/tmp/sbx-test-provider-XXXXXX");
  if (mkdtemp(c->home) == NULL)
    return -1;
  c->cfg = sbx_config_new_default();
  free(c->cfg->use);
  c->cfg->use = xstrdup("fake");
  fake_reset();
  *state = c;
  return 0;
}

static int teardown(void **state)
{
  struct ctx *c = *state;
  sbx_provider_free(c->p);
  sbx_config_free(c->cfg);
  sbx__rm_rf_at(AT_FDCWD, c->home);
  free(c);
  return 0;
}

static sbx_provider_t *provider(struct ctx *c)
{
  sbx_error_t err = NULL;
  c->p = sbx_provider_new(c->home, c->cfg, &err);
  if (c->p == NULL)
    print_error("provider: %s\n", err ? err->msg : "?");
  assert_non_null(c->p);
  return c->p;
}

/* Acquires (user "u", thread) and returns its id (static storage per call site is enough). */
static const char *acquire(sbx_provider_t *p, const char *thread, char id[17])
{
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(p, "u", thread, &err);
  if (sb == NULL)
    print_error("acquire %s: %s\n", thread, err ? err->msg : "?");
  assert_non_null(sb);
  snprintf(id, 17, "%s", sbx_sandbox_id(sb));
  return id;
}

static void release(sbx_provider_t *p, const char *id)
{
  assert_int_equal(sbx_release(p, id, NULL), 0);
}

/* Makes the sandbox look last used `ago` seconds ago (its lease file's mtime is that time). */
static void set_idle(sbx_provider_t *p, const char *id, int ago)
{
  char *lease = xasprintf("%s/sandboxes/%s/lease", sbx_provider_home(p), id);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= ago;
  ts[1] = ts[0];
  assert_int_equal(utimensat(AT_FDCWD, lease, ts, 0), 0);
  free(lease);
}

static bool exists(sbx_provider_t *p, const char *id)
{
  char *dir = xasprintf("%s/sandboxes/%s", sbx_provider_home(p), id);
  bool r = access(dir, F_OK) == 0;
  free(dir);
  return r;
}

static struct fake_box *box(sbx_provider_t *p, const char *id)
{
  return fake_box_of(sbx_provider_home(p), id);
}

static void reclaim_same_scope(void **state)
{
  sbx_provider_t *p = provider(*state);
  char a[17], b[17];
  acquire(p, "t1", a);
  release(p, a);
  acquire(p, "t1", b);
  assert_string_equal(a, b);
  assert_int_equal(fake.creates, 1);
  assert_int_equal(fake.healths, 1); /* a warm sandbox is health-checked before reuse */
  assert_int_equal(fake.pings, 0);
  release(p, b);
}

static void reclaim_replaces_unhealthy(void **state)
{
  sbx_provider_t *p = provider(*state);
  char a[17], b[17];
  acquire(p, "t1", a);
  release(p, a);
  box(p, a)->healthy = false;
  long old = box(p, a)->pid;
  acquire(p, "t1", b);
  assert_string_equal(a, b); /* the scope keeps its id */
  assert_int_equal(fake.creates, 2);
  assert_int_equal(fake.destroys, 1);
  assert_int_not_equal(box(p, b)->pid, old);
  assert_true(box(p, b)->alive);
}

static void reclaim_replaces_dead(void **state)
{
  sbx_provider_t *p = provider(*state);
  char a[17], b[17];
  acquire(p, "t1", a);
  release(p, a);
  box(p, a)->alive = false;
  acquire(p, "t1", b);
  assert_int_equal(fake.creates, 2);
  assert_int_equal(fake.healths, 0); /* dead: no health check, a new one */
  assert_true(box(p, b)->alive);
}

static void reclaim_recent_pings(void **state)
{
  struct ctx *c = *state;
  c->cfg->health_check_skip_seconds = 60;
  sbx_provider_t *p = provider(c);
  char a[17];
  acquire(p, "t1", a);
  release(p, a);
  acquire(p, "t1", a);
  assert_int_equal(fake.pings, 1);
  assert_int_equal(fake.healths, 0);
  release(p, a);
  set_idle(p, a, 120); /* no longer recent: the full check */
  acquire(p, "t1", a);
  assert_int_equal(fake.healths, 1);
}

static void cap_evicts_longest_idle(void **state)
{
  struct ctx *c = *state;
  c->cfg->replicas = 2;
  sbx_provider_t *p = provider(c);
  char a[17], b[17], d[17];
  acquire(p, "t1", a);
  acquire(p, "t2", b);
  release(p, a);
  release(p, b);
  set_idle(p, a, 100);
  set_idle(p, b, 50);
  acquire(p, "t3", d);
  assert_int_equal(fake.destroys, 1);
  assert_false(exists(p, a));
  assert_true(exists(p, b));
  assert_int_equal(fake_alive_count(), 2);
}

static void cap_never_evicts_active(void **state)
{
  struct ctx *c = *state;
  c->cfg->replicas = 1;
  sbx_provider_t *p = provider(c);
  char a[17], b[17];
  acquire(p, "t1", a); /* held: active */
  acquire(p, "t2", b); /* over the soft cap, with a warning */
  assert_int_equal(fake.destroys, 0);
  assert_int_equal(fake_alive_count(), 2);
  release(p, a);
  release(p, b);
}

static void cap_leaves_managed_alone(void **state)
{
  struct ctx *c = *state;
  c->cfg->replicas = 1;
  sbx_provider_t *p = provider(c);
  struct sbx_create_opts o = {0};
  sbx_sandbox_t *m = sbx_create(p, &o, NULL);
  assert_non_null(m);
  char mid[17];
  snprintf(mid, sizeof mid, "%s", sbx_sandbox_id(m));
  release(p, mid);
  set_idle(p, mid, 1000);
  char a[17];
  acquire(p, "t1", a); /* a managed sandbox is outside the cap: nothing to evict */
  assert_int_equal(fake.destroys, 0);
  assert_true(exists(p, mid));
}

/* max_sandboxes and max_sandboxes_per_user: SBX_E_LIMIT past them, nothing made or evicted;
 * managed sandboxes count as user "default"; a destroyed one makes room. */
static void hard_caps_refuse(void **state)
{
  struct ctx *c = *state;
  c->cfg->replicas = 10;
  c->cfg->max_sandboxes = 3;
  c->cfg->max_sandboxes_per_user = 2;
  sbx_provider_t *p = provider(c);
  char a[17], b[17];
  acquire(p, "t1", a);
  acquire(p, "t2", b);
  sbx_error_t err = NULL;
  assert_null(sbx_acquire(p, "u", "t3", &err)); /* u's third */
  assert_int_equal(err->kind, SBX_E_LIMIT);
  assert_non_null(strstr(err->msg, "sandbox.max_sandboxes_per_user is 2"));
  sbx_error_release(&err);
  struct sbx_create_opts o = {0};
  sbx_sandbox_t *m = sbx_create(p, &o, NULL); /* default's first: the third in all */
  assert_non_null(m);
  assert_null(sbx_create(p, &o, &err)); /* the fourth in all */
  assert_int_equal(err->kind, SBX_E_LIMIT);
  assert_non_null(strstr(err->msg, "3 sandboxes are live, sandbox.max_sandboxes is 3"));
  sbx_error_release(&err);
  assert_int_equal(fake.destroys, 0);
  assert_int_equal(sbx_destroy(p, a, NULL), 0);
  char d[17];
  acquire(p, "t3", d);
}

static void gc_reaps_idle_dead_and_half_made(void **state)
{
  struct ctx *c = *state;
  c->cfg->idle_timeout = 10;
  sbx_provider_t *p = provider(c);
  char a[17], b[17], h[17], w[17];
  acquire(p, "t1", a);
  acquire(p, "t2", b);
  acquire(p, "t3", h);
  acquire(p, "t4", w);
  release(p, a);
  release(p, b);
  release(p, w);
  set_idle(p, a, 100); /* warm, idle past the timeout */
  box(p, b)->alive = false;
  set_idle(p, h, 100); /* old, but held: active */
  /* a folder with no metadata: a creator died before writing it */
  char *half = xasprintf("%s/sandboxes/0123456789abcdef", sbx_provider_home(p));
  assert_int_equal(mkdir(half, 0700), 0);
  assert_int_equal(sbx_gc(p, NULL), 3);
  assert_false(exists(p, a));
  assert_false(exists(p, b));
  assert_true(exists(p, h));
  assert_true(exists(p, w)); /* warm, recent */
  assert_int_equal(access(half, F_OK), -1);
  assert_int_equal(fake.sweeps, 1);
  assert_int_equal(sbx_gc(p, NULL), 0);
  free(half);
}

static void spares_fill_and_take(void **state)
{
  struct ctx *c = *state;
  c->cfg->spares = 2;
  sbx_provider_t *p = provider(c);
  assert_int_equal(sbx_spares_fill(p, NULL), 2);
  assert_int_equal(sbx_spares_ready(p), 2);
  assert_int_equal(sbx_spares_fill(p, NULL), 0); /* full */
  char a[17];
  acquire(p, "t1", a);
  assert_int_equal(fake.creates, 2); /* no launch: a spare was taken */
  assert_int_equal(fake.adopts, 1);
  assert_int_equal(sbx_spares_ready(p), 1);
  struct fake_box *b = box(p, a);
  assert_non_null(b);
  assert_string_equal(b->id, a); /* adopted under the scope's id, with its thread folder */
  assert_non_null(strstr(b->user_data, "/threads/t1/user-data"));
  assert_int_equal(sbx_spares_fill(p, NULL), 1);
  assert_int_equal(sbx_spares_ready(p), 2);
}

static void spares_stale_key_replaced(void **state)
{
  struct ctx *c = *state;
  c->cfg->spares = 1;
  sbx_provider_t *p = provider(c);
  assert_int_equal(sbx_spares_fill(p, NULL), 1);
  c->cfg->pids = 7; /* the configuration changed: that spare is for another one */
  assert_int_equal(sbx_spares_fill(p, NULL), 1);
  assert_int_equal(fake.destroys, 1);
  assert_int_equal(fake.creates, 2);
  assert_int_equal(sbx_spares_ready(p), 1);
  char a[17];
  acquire(p, "t1", a);
  assert_int_equal(fake.adopts, 1);
}

static void spares_not_for_extra_mounts(void **state)
{
  struct ctx *c = *state;
  c->cfg->spares = 1;
  sbx_provider_t *p = provider(c);
  assert_int_equal(sbx_spares_fill(p, NULL), 1);
  char data[] = "/data";
  struct sbx_mount m = {.host_path = c->home, .container_path = data, .read_only = true};
  struct sbx_create_opts o = {.mounts = &m, .n_mounts = 1};
  sbx_sandbox_t *sb = sbx_create(p, &o, NULL);
  assert_non_null(sb);
  assert_int_equal(fake.adopts, 0); /* a spare has no extra mounts: launched */
  assert_int_equal(fake.creates, 2);
  assert_int_equal(sbx_spares_ready(p), 1);
}

static void spares_failed_adopt_launches(void **state)
{
  struct ctx *c = *state;
  c->cfg->spares = 1;
  sbx_provider_t *p = provider(c);
  assert_int_equal(sbx_spares_fill(p, NULL), 1);
  fake.fail_adopt = true;
  char a[17];
  acquire(p, "t1", a);
  assert_int_equal(fake.creates, 2);
  assert_int_equal(fake.destroys, 1); /* the spare it could not adopt */
  assert_int_equal(sbx_spares_ready(p), 0);
  assert_true(box(p, a)->alive);
  assert_int_equal(fake_alive_count(), 1);
}

static void shutdown_undoes_spares(void **state)
{
  struct ctx *c = *state;
  c->cfg->spares = 2;
  sbx_provider_t *p = provider(c);
  /* another front-end over the same home, asked to fill before the `down` */
  sbx_provider_t *other = sbx_provider_new(c->home, c->cfg, NULL);
  assert_non_null(other);
  assert_int_equal(sbx_spares_fill(p, NULL), 2);
  char a[17];
  acquire(p, "t1", a);
  assert_int_equal(sbx_shutdown(p, NULL), 0);
  assert_int_equal(fake_alive_count(), 0);
  assert_int_equal(sbx_spares_ready(p), 0);
  assert_int_equal(sbx_spares_fill(p, NULL), 0);     /* shut down */
  assert_int_equal(sbx_spares_fill(other, NULL), 0); /* asked for before the `down` */
  assert_int_equal(sbx_spares_ready(other), 0);
  assert_int_equal(sbx_spares_fill(other, NULL), 2); /* asked for after it */
  sbx_provider_free(other);
}

static void exec_output_rendered_once(void **state)
{
  sbx_provider_t *p = provider(*state);
  sbx_sandbox_t *sb = sbx_acquire(p, "u", "t1", NULL);
  assert_non_null(sb);
  struct sbx_exec_result r;
  assert_int_equal(sbx_execute_command(sb, "hello", NULL, &r, NULL), 0);
  assert_string_equal(r.output, "hello\nExit Code: 5");
  sbx_exec_result_free(&r);
  struct sbx_exec_opts o = {.background = true};
  assert_int_equal(sbx_execute_command(sb, "hello", &o, &r, NULL), 0);
  assert_string_equal(r.output, "(no output)");
  sbx_exec_result_free(&r);
  o = (struct sbx_exec_opts){.discard_output = true};
  assert_int_equal(sbx_execute_command(sb, "hello", &o, &r, NULL), 0);
  assert_int_equal(r.out_total, 0);
  sbx_exec_result_free(&r);
}

static void broken_sandbox_evicted(void **state)
{
  sbx_provider_t *p = provider(*state);
  char a[17];
  acquire(p, "t1", a);
  sbx_sandbox_t *sb = sbx_get(p, a);
  box(p, a)->alive = false; /* the backend's exec now fails terminally */
  struct sbx_exec_result r;
  sbx_error_t err = NULL;
  assert_int_equal(sbx_execute_command(sb, "x", NULL, &r, &err), -1);
  assert_int_equal(err->kind, SBX_E_BACKEND);
  sbx_error_release(&err);
  assert_false(exists(p, a));
  assert_null(sbx_get(p, a));
  char b[17];
  acquire(p, "t1", b); /* a fresh one */
  assert_int_equal(fake.creates, 2);
}

/* A backend without interactive commands says so, and the sandbox stays usable. */
static void session_unsupported(void **state)
{
  sbx_provider_t *p = provider(*state);
  char a[17];
  acquire(p, "t1", a);
  sbx_sandbox_t *sb = sbx_get(p, a);
  sbx_error_t err = NULL;
  struct sbx_session_opts so = {.tty = true};
  assert_null(sbx_session_start(sb, "sh", NULL, &so, &err));
  assert_int_equal(err->kind, SBX_E_UNSUPPORTED);
  assert_non_null(strstr(err->msg, "interactive command"));
  sbx_error_release(&err);
  assert_null(sbx_session_start(NULL, "sh", NULL, &so, &err));
  assert_int_equal(err->kind, SBX_E_INVALID);
  sbx_error_release(&err);
  assert_ptr_equal(sbx_get(p, a), sb);
  struct sbx_exec_result r;
  assert_int_equal(sbx_execute_command(sb, "x", NULL, &r, &err), 0);
  sbx_exec_result_free(&r);
  /* the calls on a session refuse a NULL one with an error, not a crash */
  assert_int_equal(sbx_session_write(NULL, "x", 1, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  sbx_error_release(&err);
  assert_int_equal(sbx_session_resize(NULL, 24, 80, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  sbx_error_release(&err);
  assert_int_equal(sbx_session_fd(NULL), -1);
  sbx_session_free(NULL);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(reclaim_same_scope, setup, teardown),
      cmocka_unit_test_setup_teardown(reclaim_replaces_unhealthy, setup, teardown),
      cmocka_unit_test_setup_teardown(reclaim_replaces_dead, setup, teardown),
      cmocka_unit_test_setup_teardown(reclaim_recent_pings, setup, teardown),
      cmocka_unit_test_setup_teardown(cap_evicts_longest_idle, setup, teardown),
      cmocka_unit_test_setup_teardown(cap_never_evicts_active, setup, teardown),
      cmocka_unit_test_setup_teardown(cap_leaves_managed_alone, setup, teardown),
      cmocka_unit_test_setup_teardown(hard_caps_refuse, setup, teardown),
      cmocka_unit_test_setup_teardown(gc_reaps_idle_dead_and_half_made, setup, teardown),
      cmocka_unit_test_setup_teardown(spares_fill_and_take, setup, teardown),
      cmocka_unit_test_setup_teardown(spares_stale_key_replaced, setup, teardown),
      cmocka_unit_test_setup_teardown(spares_not_for_extra_mounts, setup, teardown),
      cmocka_unit_test_setup_teardown(spares_failed_adopt_launches, setup, teardown),
      cmocka_unit_test_setup_teardown(shutdown_undoes_spares, setup, teardown),
      cmocka_unit_test_setup_teardown(exec_output_rendered_once, setup, teardown),
      cmocka_unit_test_setup_teardown(broken_sandbox_evicted, setup, teardown),
      cmocka_unit_test_setup_teardown(session_unsupported, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
