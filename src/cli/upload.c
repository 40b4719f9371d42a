/* sbx upload: stdin's bytes to a file (update_file). */
#include "cli.h"

static const char usage[] =
    "Usage: sbx upload -t THREAD [-u USER] PATH\n"
    "\n"
    "Replaces PATH (absolute, inside the sandbox) with the bytes read from stdin, creating\n"
    "parent directories. The file is written to a temporary name and renamed into place, so a\n"
    "failure never leaves a torn file.\n";

static int run(sbx_sandbox_t *sb, void *arg)
{
  sbx_error_t err = NULL;
  return sbx_write_from_fd(sb, arg, 0, false, &err) < 0 ? cli_fail(&err) : 0;
}

int cmd_upload(struct cli *c, int argc, char **argv)
{
  struct cli_scope s = {0};
  int r = cli_parse(c, argc, argv, usage, &s, NULL, NULL, NULL, NULL, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  return cli_with_sandbox(c, &s, run, argv[optind]);
}
