/* sbx grep: matching lines in text files. */
#include "cli.h"

#include "util.h"

#include <string.h>

static const char usage[] =
    "Usage: sbx grep -t THREAD [-u USER] PATH PATTERN [--glob G] [--fixed] [--case-sensitive]\n"
    "                [--max N] [--timeout S] [--json]\n"
    "\n"
    "Prints `path:line: text` for each line matching PATTERN (POSIX extended regex, or a fixed\n"
    "string with --fixed; case-insensitive unless --case-sensitive) in the text files below\n"
    "PATH (or PATH itself if it is a file). --glob filters files like `sbx glob`. Binary files,\n"
    "files over 1,000,000 bytes and lines over 2000 characters are skipped; long lines are cut\n"
    "to 197 characters + \"...\". At most N matches (default 100); a bad regex is an error.\n"
    "The search ends after S seconds (default 30, at most 590) with the matches found so far,\n"
    "reported as truncated.\n"
    "--json prints {\"matches\": [{\"path\",\"line_number\",\"line\"}], \"truncated\": bool}.\n";

struct args {
  const char *path, *pattern;
  struct sbx_grep_opts o;
  bool json;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct args *a = ctx;
  long long v;
  switch (ch) {
  case 'g':
    a->o.glob = arg;
    return 0;
  case 'F':
    a->o.literal = true;
    return 0;
  case 'C':
    a->o.case_sensitive = true;
    return 0;
  case 'j':
    a->json = true;
    return 0;
  case 'T':
    if (!cli_parse_seconds(arg, &a->o.timeout) || a->o.timeout <= 0)
      return cli_usage_error(c, "--timeout needs a positive number of seconds, got '%s'", arg);
    return 0;
  default:
    if (!cli_parse_long(arg, &v) || v < 0 || v > 100000)
      return cli_usage_error(c, "--max needs an integer from 0 to 100000, got '%s'", arg);
    a->o.max_results = (size_t) v;
    return 0;
  }
}

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  struct sbx_grep_match *m;
  size_t n;
  bool truncated;
  sbx_error_t err = NULL;
  if (sbx_grep(sb, a->path, a->pattern, &a->o, &m, &n, &truncated, &err) < 0)
    return cli_fail(&err);
  int r = 0;
  if (a->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(arr, json_pack("{s:o, s:I, s:o}", "path",
                                           cli_json_string(m[i].path, strlen(m[i].path)),
                                           "line_number", (json_int_t) m[i].line_number, "line",
                                           cli_json_string(m[i].line, strlen(m[i].line))));
    json_t *j = json_object();
    json_object_set_new(j, "matches", arr);
    json_object_set_new(j, "truncated", json_boolean(truncated));
    r = cli_print_json(j);
  } else {
    for (size_t i = 0; i < n; i++)
      printf("%s:%llu: %s\n", m[i].path, (unsigned long long) m[i].line_number, m[i].line);
    if (truncated && n < a->o.max_results)
      fprintf(stderr,
              "sbx: the search ran out of time (--timeout, default %d s); there may be more "
              "matches: narrow the path or add a glob filter\n",
              SBX_SEARCH_TIMEOUT);
    else if (truncated)
      fprintf(stderr, "sbx: results truncated at %zu; narrow the path or add a glob filter\n",
              a->o.max_results);
  }
  sbx_grep_matches_free(m, n);
  return r;
}

int cmd_grep(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"glob", required_argument, NULL, 'g'},
                                       {"fixed", no_argument, NULL, 'F'},
                                       {"case-sensitive", no_argument, NULL, 'C'},
                                       {"max", required_argument, NULL, 'm'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"timeout", required_argument, NULL, 'T'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {.o.max_results = 100};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &a, 2);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  a.pattern = argv[optind + 1];
  return cli_with_sandbox(c, &s, run, &a);
}
