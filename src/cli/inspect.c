/* sbx inspect: one sandbox's record as JSON (docker inspect's habit). */
#include "cli.h"

#include "util.h"

#include <string.h>
#include <time.h>

static const char usage[] =
    "Usage: sbx inspect (-t THREAD [-u USER] | ID)\n"
    "\n"
    "Prints the sandbox's record as one JSON object: id, user, thread, backend, state (active,\n"
    "warm, dead), paused, host pid of its init, created, last_used, idle (seconds), memory\n"
    "(bytes, null if unknown), owners (pids holding it active), its state folder and, for a\n"
    "scope's sandbox, the host folder mounted at /mnt/user-data. Reads only: the sandbox is not\n"
    "touched (its idle time goes on). A thread whose sandbox the pool evicted is an error that\n"
    "says when and why (exit 1), as is one that has none.\n";

int cmd_inspect(struct cli *c, int argc, char **argv)
{
  struct cli_scope s = {0};
  char id[17];
  int r = cli_parse_target(c, argc, argv, usage, NULL, NULL, NULL, NULL, &s, id);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0 && r != CLI_NO_HOME)
    return r;
  struct sbx_sandbox_info *v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (r == 0 && sbx_list(c->provider, &v, &n, &err) < 0)
    return cli_fail(&err);
  size_t i = 0;
  while (i < n && strcmp(v[i].id, id) != 0)
    i++;
  if (i == n) {
    sbx_sandbox_info_free(v, n);
    return cli_no_sandbox(c, &s, id, "", false);
  }
  const struct sbx_sandbox_info *x = &v[i];
  const char *home = sbx_provider_home(c->provider);
  json_t *owners = json_array();
  for (size_t k = 0; k < x->n_owners; k++)
    json_array_append_new(owners, json_integer(x->owners[k]));
  json_t *o = json_pack("{s:s, s:s?, s:s?, s:s, s:s, s:b, s:I, s:f, s:f, s:f, s:o}", "id", x->id,
                        "user", x->user, "thread", x->thread, "backend", x->backend, "state",
                        sbx_state_name(x->state), "paused", x->paused, "pid", (json_int_t) x->pid,
                        "created", x->created, "last_used", x->last_used, "idle",
                        sbx__realtime_sec() - x->last_used, "owners", owners);
  json_object_set_new(o, "memory", x->memory >= 0 ? json_integer(x->memory) : json_null());
  cleanup_free char *dir = xasprintf("%s/sandboxes/%s", home, x->id);
  json_object_set_new(o, "state_dir", json_string(dir));
  if (x->thread) {
    cleanup_free char *data = xasprintf("%s/users/%s/threads/%s/user-data", home,
                                        x->user ? x->user : "default", x->thread);
    json_object_set_new(o, "user_data", json_string(data));
  }
  sbx_sandbox_info_free(v, n);
  return cli_print_json(o);
}
