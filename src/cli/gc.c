/* sbx gc: one reaper pass now. */
#include "cli.h"

static const char usage[] =
    "Usage: sbx gc\n"
    "\n"
    "Cleans up dead sandboxes and destroys warm ones (and spares) idle for longer than\n"
    "sandbox.idle_timeout (a pass also runs, at most every 10 seconds, with other verbs).\n"
    "Prints how many sandboxes were removed.\n";

int cmd_gc(struct cli *c, int argc, char **argv)
{
  int r = cli_parse(c, argc, argv, usage, NULL, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0 && r != CLI_NO_HOME)
    return r;
  sbx_error_t err = NULL;
  int n = r == CLI_NO_HOME ? 0 : sbx_gc(c->provider, &err);
  if (n < 0)
    return cli_fail(&err);
  printf("reaped %d sandbox%s\n", n, n == 1 ? "" : "es");
  return 0;
}
