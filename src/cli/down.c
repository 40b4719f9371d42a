/* sbx down: destroy the whole pool (the provider's shutdown). */
#include "cli.h"

static const char usage[] =
    "Usage: sbx down\n"
    "\n"
    "Destroys every sandbox of the pool, active or warm, with all their processes. The host\n"
    "thread folders (/mnt/user-data of each scope) are kept.\n";

int cmd_down(struct cli *c, int argc, char **argv)
{
  int r = cli_parse(c, argc, argv, usage, NULL, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0)
    return r == CLI_NO_HOME ? 0 : r; /* no state directory: no pool to take down */
  sbx_error_t err = NULL;
  if (sbx_shutdown(c->provider, &err) < 0)
    return cli_fail(&err);
  return 0;
}
