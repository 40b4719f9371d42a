/* sbx rm: destroy the scope's sandbox. */
#include "cli.h"

static const char usage[] =
    "Usage: sbx rm -t THREAD [-u USER]\n"
    "\n"
    "Destroys the scope's sandbox and every process in it. Its /mnt/user-data folder on the host\n"
    "($SBX_HOME/users/USER/threads/THREAD/user-data) is kept.\n";

int cmd_rm(struct cli *c, int argc, char **argv)
{
  struct cli_scope s = {0};
  int r = cli_parse(c, argc, argv, usage, &s, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(s.user, s.thread, id, &err) < 0 || sbx_destroy(c->provider, id, &err) < 0)
    return cli_fail(&err);
  return 0;
}
