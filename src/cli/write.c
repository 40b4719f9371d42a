/* sbx write: stdin to a text file (write_file: creates parents; --append appends). */
#include "cli.h"

static const char usage[] =
    "Usage: sbx write -t THREAD [-u USER] PATH [--append]\n"
    "\n"
    "Writes stdin to PATH (absolute, inside the sandbox), creating parent directories. Without\n"
    "--append the file is replaced atomically (never left half-written); with it, stdin is\n"
    "appended.\n";

struct args {
  const char *path;
  bool append;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  ((struct args *) ctx)->append = true;
  return 0;
}

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  sbx_error_t err = NULL;
  return sbx_write_from_fd(sb, a->path, 0, a->append, &err) < 0 ? cli_fail(&err) : 0;
}

int cmd_write(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"append", no_argument, NULL, 'a'}, {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {0};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "a", on_opt, &a, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  return cli_with_sandbox(c, &s, run, &a);
}
