/* sbx run: a command in a throw-away sandbox that is gone when it returns. */
#include "cli.h"

#include "util.h"

static const char usage[] =
    "Usage: sbx run [-i] [-T] [-e KEY=VALUE]... [--timeout SECONDS] [--json] [--image IMAGE]\n"
    "               -- COMMAND\n"
    "\n"
    "Creates a sandbox with a random id, runs `sh -lc COMMAND` in it like `sbx exec`, and\n"
    "destroys it (with every process the command started). Exit status as for exec.\n"
    "--image makes it from an image of the store (sbx images) instead of sandbox.image.\n";

int cli_exec_main(struct cli *c, int argc, char **argv, const char *help, bool scoped);

int cmd_run(struct cli *c, int argc, char **argv)
{
  return cli_exec_main(c, argc, argv, usage, false);
}
