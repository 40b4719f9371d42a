/* sbx glob: paths matching a pattern (DeerFlow's path_matches). */
#include "cli.h"

#include "util.h"

#include <string.h>

static const char usage[] =
    "Usage: sbx glob -t THREAD [-u USER] PATH PATTERN [--include-dirs] [--max N] [--json]\n"
    "\n"
    "Prints the files below PATH whose path relative to PATH matches PATTERN: a pattern without\n"
    "'/' matches the file name at any depth (`*.py`); one with '/' is anchored at PATH, segment\n"
    "by segment, with `**` for any number of directories (`src/**/*.py`). Ignored folders\n"
    "(node_modules, .git, ...) are skipped. At most N results (default 200); when more exist the\n"
    "list is marked truncated. --json prints {\"matches\": [...], \"truncated\": bool}.\n";

struct args {
  const char *path, *pattern;
  bool dirs, json;
  long long max;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct args *a = ctx;
  if (ch == 'd')
    a->dirs = true;
  else if (ch == 'j')
    a->json = true;
  else if (!cli_parse_long(arg, &a->max) || a->max < 0 || a->max > 100000)
    return cli_usage_error(c, "--max needs an integer from 0 to 100000, got '%s'", arg);
  return 0;
}

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  char **m;
  size_t n;
  bool truncated;
  sbx_error_t err = NULL;
  if (sbx_glob(sb, a->path, a->pattern, a->dirs, (size_t) a->max, &m, &n, &truncated, &err) < 0)
    return cli_fail(&err);
  int r = 0;
  if (a->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(arr, cli_json_string(m[i], strlen(m[i])));
    json_t *j = json_object();
    json_object_set_new(j, "matches", arr);
    json_object_set_new(j, "truncated", json_boolean(truncated));
    r = cli_print_json(j);
  } else {
    for (size_t i = 0; i < n; i++)
      printf("%s\n", m[i]);
    if (truncated)
      fprintf(stderr, "sbx: results truncated at %lld; narrow the path or pattern\n", a->max);
  }
  sbx_strv_free_array(m, n);
  return r;
}

int cmd_glob(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"include-dirs", no_argument, NULL, 'd'},
                                       {"max", required_argument, NULL, 'm'},
                                       {"json", no_argument, NULL, 'j'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {.max = 200};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &a, 2);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  a.pattern = argv[optind + 1];
  return cli_with_sandbox(c, &s, run, &a);
}
