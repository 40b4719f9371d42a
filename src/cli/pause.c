/* sbx pause / unpause: freeze and thaw every process of a sandbox (docker pause's habit). */
#include "cli.h"

static const char usage_pause[] =
    "Usage: sbx pause (-t THREAD [-u USER] | ID)\n"
    "\n"
    "Freezes every process of the sandbox (the cgroup freezer; where this user has no freezer\n"
    "to write, rootless without a delegated cgroup, each process is stopped with SIGSTOP and\n"
    "only those are continued by unpause). A paused sandbox keeps its memory and files; sbx ps\n"
    "shows it as paused; commands and file operations wait until sbx unpause.\n";

static const char usage_unpause[] = "Usage: sbx unpause (-t THREAD [-u USER] | ID)\n"
                                    "\n"
                                    "Thaws a sandbox paused with sbx pause.\n";

static int pause_or_not(struct cli *c, int argc, char **argv, bool paused)
{
  struct cli_scope s = {0};
  char id[17];
  int r = cli_parse_target(c, argc, argv, paused ? usage_pause : usage_unpause, NULL, NULL, NULL,
                           NULL, &s, id);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0) {
    if (r != CLI_NO_HOME)
      return r;
    return cli_no_sandbox(c, &s, id, "", false);
  }
  sbx_error_t err = NULL;
  if (sbx_pause(c->provider, id, paused, &err) < 0) {
    if (err->kind == SBX_E_NOT_FOUND) {
      sbx_error_release(&err);
      return cli_no_sandbox(c, &s, id, "", false);
    }
    return cli_fail(&err);
  }
  return 0;
}

int cmd_pause(struct cli *c, int argc, char **argv)
{
  return pause_or_not(c, argc, argv, true);
}

int cmd_unpause(struct cli *c, int argc, char **argv)
{
  return pause_or_not(c, argc, argv, false);
}
