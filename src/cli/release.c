/* sbx release: park the scope's sandbox warm. */
#include "cli.h"

static const char usage[] =
    "Usage: sbx release -t THREAD [-u USER]\n"
    "\n"
    "Parks the scope's sandbox: its processes keep running and its idle time starts now; it is\n"
    "reclaimed by the next call for the same scope, or reaped after sandbox.idle_timeout.\n";

int cmd_release(struct cli *c, int argc, char **argv)
{
  struct cli_scope s = {0};
  int r = cli_parse(c, argc, argv, usage, &s, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(s.user, s.thread, id, &err) < 0 || sbx_park(c->provider, id, &err) < 0)
    return cli_fail(&err);
  return 0;
}
