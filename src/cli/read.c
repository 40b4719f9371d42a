/* sbx read: print a text file, optionally a 1-based inclusive line range. */
#include "cli.h"

#include "util.h"

static const char usage[] =
    "Usage: sbx read -t THREAD [-u USER] PATH [--start N] [--end N]\n"
    "\n"
    "Prints the UTF-8 text file PATH (absolute, inside the sandbox). With a range, lines N to M\n"
    "(1-based, inclusive) joined by newlines: a start below 1 counts as 1; an end at or below 0,\n"
    "or a start past the end of the file, prints nothing. A file that is not UTF-8 is an error.\n";

struct args {
  const char *path;
  int64_t start, end;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct args *a = ctx;
  long long v;
  if (!cli_parse_long(arg, &v) || v == INT64_MIN)
    return cli_usage_error(c, "--%s needs an integer, got '%s'", ch == 's' ? "start" : "end", arg);
  *(ch == 's' ? &a->start : &a->end) = v;
  return 0;
}

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  cleanup_free char *text = NULL;
  size_t len = 0;
  sbx_error_t err = NULL;
  if (sbx_read_file(sb, a->path, a->start, a->end, &text, &len, &err) < 0)
    return cli_fail(&err);
  return sbx__write_all(1, text, len) < 0 ? EXIT_OP_ERROR : 0;
}

int cmd_read(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"start", required_argument, NULL, 's'},
                                       {"end", required_argument, NULL, 'e'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {.start = SBX_LINE_NONE, .end = SBX_LINE_NONE};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &a, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  return cli_with_sandbox(c, &s, run, &a);
}
