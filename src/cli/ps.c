/* sbx ps: the sandboxes of the pool. */
#include "cli.h"

#include "util.h"

#include <time.h>

static const char usage[] =
    "Usage: sbx ps [--json]\n"
    "\n"
    "Lists every sandbox of the pool: id, user, thread, state (active: held by a front-end;\n"
    "warm: parked; dead: its init is gone and the next gc cleans it up), host pid of its\n"
    "init, creation time, last use, idle seconds, memory and the pids holding it.\n"
    "With sandbox.spares set, a last line counts the spares ready (started ahead of time,\n"
    "outside the pool; --json: \"spares\": {\"ready\", \"configured\"}).\n"
    "Then one line per scope whose sandbox the pool evicted (the replica cap made room for\n"
    "another, the idle reaper, a dead init): thread, user, id, when and why (--json:\n"
    "\"evicted\": [{id, user, thread, time, reason}]). The scope's next use reports it once\n"
    "on stderr and starts a new sandbox; sbx rm -t THREAD forgets it.\n";

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  *(bool *) ctx = true;
  return 0;
}

static void fmt_time(double t, char *buf, size_t n)
{
  time_t s = (time_t) t;
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cmd_ps(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  bool json = false;
  int r = cli_parse(c, argc, argv, usage, NULL, opts, "", on_opt, &json, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0 && r != CLI_NO_HOME)
    return r;
  struct sbx_sandbox_info *v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (r == 0 && sbx_list(c->provider, &v, &n, &err) < 0)
    return cli_fail(&err);
  r = 0;
  int spares = c->provider ? sbx_spares_ready(c->provider) : 0;
  struct sbx_eviction *ev = NULL;
  size_t n_ev = 0;
  if (c->provider && sbx_evictions(c->provider, &ev, &n_ev, &err) < 0) {
    sbx_sandbox_info_free(v, n);
    return cli_fail(&err);
  }
  double now = sbx__realtime_sec();
  if (json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
      json_t *owners = json_array();
      for (size_t k = 0; k < v[i].n_owners; k++)
        json_array_append_new(owners, json_integer(v[i].owners[k]));
      json_t *o =
          json_pack("{s:s, s:s?, s:s?, s:s, s:s, s:I, s:f, s:f, s:f, s:o, s:b}", "id", v[i].id,
                    "user", v[i].user, "thread", v[i].thread, "backend", v[i].backend, "state",
                    sbx_state_name(v[i].state), "pid", (json_int_t) v[i].pid, "created",
                    v[i].created, "last_used", v[i].last_used, "idle", now - v[i].last_used,
                    "owners", owners, "paused", v[i].paused);
      json_object_set_new(o, "memory", v[i].memory >= 0 ? json_integer(v[i].memory) : json_null());
      json_array_append_new(arr, o);
    }
    json_t *j = json_object();
    json_object_set_new(j, "sandboxes", arr);
    json_t *evicted = json_array();
    for (size_t i = 0; i < n_ev; i++)
      json_array_append_new(evicted, json_pack("{s:s, s:s, s:s, s:f, s:s}", "id", ev[i].id, "user",
                                               ev[i].user, "thread", ev[i].thread, "time",
                                               ev[i].time, "reason", ev[i].reason));
    json_object_set_new(j, "evicted", evicted);
    json_object_set_new(j, "spares",
                        json_pack("{s:i, s:i}", "ready", spares, "configured", c->cfg->spares));
    r = cli_print_json(j);
  } else {
    printf("%-16s  %-12s  %-16s  %-6s  %-8s  %-20s  %-20s  %8s  %9s  %s\n", "ID", "USER", "THREAD",
           "STATE", "PID", "CREATED", "LAST USED", "IDLE", "MEMORY", "OWNERS");
    for (size_t i = 0; i < n; i++) {
      char created[32], used[32], mem[32] = "-";
      fmt_time(v[i].created, created, sizeof created);
      fmt_time(v[i].last_used, used, sizeof used);
      if (v[i].memory >= 0)
        snprintf(mem, sizeof mem, "%.1fMiB", (double) v[i].memory / 1048576.0);
      sbx_buf_t owners = {0};
      for (size_t k = 0; k < v[i].n_owners; k++)
        sbx__buf_printf(&owners, "%s%ld", k ? "," : "", v[i].owners[k]);
      printf("%-16s  %-12s  %-16s  %-6s  %-8ld  %-20s  %-20s  %7.0fs  %9s  %s\n", v[i].id,
             v[i].user ? v[i].user : "-", v[i].thread ? v[i].thread : "-",
             v[i].paused ? "paused" : sbx_state_name(v[i].state), v[i].pid, created, used,
             now - v[i].last_used, mem, owners.len ? owners.data : "-");
      sbx__buf_free(&owners);
    }
    if (spares > 0 || c->cfg->spares > 0)
      printf("spares: %d (configured: %d)\n", spares, c->cfg->spares);
    for (size_t i = 0; i < n_ev; i++) {
      char when[32];
      fmt_time(ev[i].time, when, sizeof when);
      printf("evicted: thread %s (user %s), sandbox %s, at %s: %s\n", ev[i].thread, ev[i].user,
             ev[i].id, when, ev[i].reason);
    }
  }
  sbx_evictions_free(ev, n_ev);
  sbx_sandbox_info_free(v, n);
  return r;
}
