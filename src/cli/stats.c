/* sbx stats: CPU and memory of the pool's sandboxes, once (docker stats --no-stream). */
#include "cli.h"

#include <string.h>

static const char usage[] =
    "Usage: sbx stats [--json] [-t THREAD [-u USER] | ID]\n"
    "\n"
    "Prints, for every sandbox of the pool (or the one given), the CPUs it may use, the CPU\n"
    "seconds it has used, and its memory use and limit, from its cgroup; `-` where it has no\n"
    "cgroup (rootless without delegation, cgroup_manager: none) or its init is gone. Once, not\n"
    "a live view. Reads only. --json: {\"sandboxes\": [{id, user, thread, cpus, cpu_seconds,\n"
    "memory, memory_limit}]} (null where unknown).\n";

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  *(bool *) ctx = true;
  return 0;
}

int cmd_stats(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  bool json = false;
  struct cli_scope s = {0};
  char id[17] = "";
  int r;
  /* with no target: every sandbox; else as the other verbs on one sandbox */
  bool one = false;
  for (int i = 1; i < argc && !one; i++)
    one = strcmp(argv[i], "--json") != 0 && strcmp(argv[i], "--help") != 0 &&
          strcmp(argv[i], "-h") != 0;
  if (one)
    r = cli_parse_target(c, argc, argv, usage, opts, "", on_opt, &json, &s, id);
  else
    r = cli_parse(c, argc, argv, usage, NULL, opts, "", on_opt, &json, 0);
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
  bool found = !one;
  json_t *arr = json_array();
  if (!json)
    printf("%-16s  %-12s  %-16s  %6s  %12s  %10s  %10s\n", "ID", "USER", "THREAD", "CPUS",
           "CPU SECONDS", "MEMORY", "LIMIT");
  for (size_t i = 0; i < n; i++) {
    if (one && strcmp(v[i].id, id) != 0)
      continue;
    found = true;
    struct sbx_metrics m;
    bool have = sbx_metrics_of(c->provider, v[i].id, &m, &err) == 0;
    sbx_error_release(&err);
    if (json) {
      json_t *o =
          json_pack("{s:s, s:s?, s:s?}", "id", v[i].id, "user", v[i].user, "thread", v[i].thread);
      json_object_set_new(o, "cpus", have ? json_real(m.cpu_count) : json_null());
      json_object_set_new(o, "cpu_seconds", have ? json_real(m.cpu_usage_s) : json_null());
      json_object_set_new(o, "memory", have ? json_integer((json_int_t) m.mem_used) : json_null());
      json_object_set_new(o, "memory_limit",
                          have ? json_integer((json_int_t) m.mem_limit) : json_null());
      json_array_append_new(arr, o);
    } else if (have) {
      printf("%-16s  %-12s  %-16s  %6.2f  %12.2f  %7.1fMiB  %7.1fMiB\n", v[i].id,
             v[i].user ? v[i].user : "-", v[i].thread ? v[i].thread : "-", m.cpu_count,
             m.cpu_usage_s, (double) m.mem_used / 1048576.0, (double) m.mem_limit / 1048576.0);
    } else {
      printf("%-16s  %-12s  %-16s  %6s  %12s  %10s  %10s\n", v[i].id, v[i].user ? v[i].user : "-",
             v[i].thread ? v[i].thread : "-", "-", "-", "-", "-");
    }
  }
  sbx_sandbox_info_free(v, n);
  if (!found) {
    json_decref(arr);
    return cli_no_sandbox(c, &s, id, "", false);
  }
  if (json)
    return cli_print_json(json_pack("{s:o}", "sandboxes", arr));
  json_decref(arr);
  return 0;
}
