/* The in-memory backend (fake_backend.h). */
#include "fake_backend.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/lib/registry.h"

struct fake_stats fake;

static struct fake_box *box_by_pid(long pid)
{
  for (int i = 0; i < fake.n; i++)
    if (fake.box[i].pid == pid)
      return &fake.box[i];
  return NULL;
}

static int fake_create(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  if (fake.n == FAKE_MAX)
    return sbx__make_error(err, 0, SBX_E_INTERNAL, "fake backend: table full");
  struct fake_box *b = &fake.box[fake.n];
  memset(b, 0, sizeof *b);
  b->pid = 1000 + fake.n++;
  b->alive = b->healthy = true;
  snprintf(b->id, sizeof b->id, "%s", in->meta.id);
  snprintf(b->user_data, sizeof b->user_data, "%s", user_data);
  in->meta.pid = b->pid;
  fake.creates++;
  return 0;
}

static int fake_destroy(struct sbx_instance *in, sbx_error_t *err)
{
  (void) err;
  struct fake_box *b = box_by_pid(in->meta.pid);
  if (b && b->alive) {
    b->alive = false;
    fake.destroys++;
  }
  return 0;
}

static bool fake_alive(struct sbx_instance *in)
{
  struct fake_box *b = box_by_pid(in->meta.pid);
  return b && b->alive;
}

static int fake_health(struct sbx_instance *in, int timeout_s, sbx_error_t *err)
{
  (void) timeout_s;
  fake.healths++;
  struct fake_box *b = box_by_pid(in->meta.pid);
  if (b == NULL || !b->alive || !b->healthy)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "fake: unhealthy");
  return 0;
}

static int fake_ping(struct sbx_instance *in, sbx_error_t *err)
{
  fake.pings++;
  return fake_alive(in) ? 0 : sbx__make_error(err, 0, SBX_E_BACKEND, "fake: no answer");
}

static void fake_sweep(void)
{
  fake.sweeps++;
}

static int fake_adopt(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  if (fake.fail_adopt)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "fake: adopt refused");
  struct fake_box *b = box_by_pid(in->meta.pid);
  if (b == NULL || !b->alive)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "fake: adopting a dead spare");
  snprintf(b->id, sizeof b->id, "%s", in->meta.id);
  snprintf(b->user_data, sizeof b->user_data, "%s", user_data);
  fake.adopts++;
  return 0;
}

/* Echoes the command on stdout and exits with its length: enough for the contract's rendering. */
static int fake_exec(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *o,
                     struct sbx_exec_result *res, sbx_error_t *err)
{
  (void) o;
  if (!fake_alive(in))
    return sbx__make_error(err, 0, SBX_E_BACKEND, "fake: not running");
  fake.execs++;
  res->out = xstrdup(command);
  res->out_len = res->out_total = strlen(command);
  res->err = xstrdup("");
  res->exit_code = (int) strlen(command);
  return 0;
}

struct sbx_backend_ops fake_backend = {
    .name = "fake",
    .create = fake_create,
    .destroy = fake_destroy,
    .alive = fake_alive,
    .sweep = fake_sweep,
    .ping = fake_ping,
    .health = fake_health,
    .adopt = fake_adopt,
    .exec = fake_exec,
};

void fake_reset(void)
{
  memset(&fake, 0, sizeof fake);
  fake_backend.data_owner = (unsigned) getuid();
  sbx__backend_register(&fake_backend);
}

struct fake_box *fake_box_of(const char *home, const char *id)
{
  struct sbx_meta m;
  if (sbx__meta_read(home, id, &m, NULL) < 0)
    return NULL;
  struct fake_box *b = box_by_pid(m.pid);
  sbx__meta_free(&m);
  return b;
}

int fake_alive_count(void)
{
  int n = 0;
  for (int i = 0; i < fake.n; i++)
    n += fake.box[i].alive;
  return n;
}
