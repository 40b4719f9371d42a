/* sbx ls: list_dir. */
#include "cli.h"

#include "util.h"

#include <string.h>

static const char usage[] =
    "Usage: sbx ls -t THREAD [-u USER] PATH [--depth N] [--json]\n"
    "\n"
    "Lists the entries below PATH down to depth N (default 2; 1 = children only), sorted, with\n"
    "a trailing '/' on directories; ignored names (node_modules, .git, ...) below PATH are left\n"
    "out. A missing directory is an error, never an empty list. --json prints\n"
    "{\"entries\": [...]}.\n";

struct args {
  const char *path;
  long long depth;
  bool json;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct args *a = ctx;
  if (ch == 'j') {
    a->json = true;
    return 0;
  }
  if (!cli_parse_long(arg, &a->depth) || a->depth < 0 || a->depth > 256)
    return cli_usage_error(c, "--depth needs an integer from 0 to 256, got '%s'", arg);
  return 0;
}

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  char **entries;
  size_t n;
  sbx_error_t err = NULL;
  if (sbx_list_dir(sb, a->path, (int) a->depth, &entries, &n, &err) < 0)
    return cli_fail(&err);
  int r = 0;
  if (a->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(arr, cli_json_string(entries[i], strlen(entries[i])));
    json_t *j = json_object();
    json_object_set_new(j, "entries", arr);
    r = cli_print_json(j);
  } else {
    for (size_t i = 0; i < n; i++)
      printf("%s\n", entries[i]);
  }
  sbx_strv_free_array(entries, n);
  return r;
}

int cmd_ls(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"depth", required_argument, NULL, 'd'},
                                       {"json", no_argument, NULL, 'j'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {.depth = 2};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &a, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  return cli_with_sandbox(c, &s, run, &a);
}
