/* sbx shell: an interactive login shell in the scope's sandbox. */
#include "cli.h"

#include "util.h"

#include <string.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx shell -t THREAD [-u USER] [-e KEY=VALUE]...\n"
    "\n"
    "Starts a login shell (bash if the sandbox has it, else sh) in /mnt/user-data/workspace of\n"
    "the scope's sandbox, on a terminal there when our stdin is one (as `sbx exec --tty`), else\n"
    "fed from our stdin (as `sbx exec -i`). Exit status: the shell's. Exiting the shell (exit,\n"
    "^D) ends it; processes it started in the background with nohup or setsid keep running.\n"
    "\n"
    "  -t, --thread THREAD   scope thread id (^[A-Za-z0-9_-]{1,64}$, not\n"
    "                        starting with -), required\n"
    "  -u, --user USER       scope user id (default \"default\")\n"
    "  -e, --env KEY=VALUE   set a variable for the shell (repeatable)\n";

struct shell_args {
  sbx_strv_t env;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct shell_args *a = ctx;
  (void) ch;
  if (strchr(arg, '=') == NULL)
    return cli_usage_error(c, "-e needs KEY=VALUE, got '%s'", arg);
  sbx__strv_push(&a->env, arg);
  return 0;
}

struct shell_run {
  struct cli *c;
  struct shell_args *a;
};

static int run_shell(sbx_sandbox_t *sb, void *arg)
{
  struct shell_run *r = arg;
  sbx_strv_t env = {0};
  for (size_t i = 0; i < r->a->env.n; i++)
    sbx__strv_push(&env, r->a->env.v[i]);
  const char *term = getenv("TERM");
  bool tty = isatty(0);
  if (tty && term && term[0])
    sbx__strv_push_owned(&env, xasprintf("TERM=%s", term));
  static const char *const argv[] = {
      "/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l",
      NULL};
  int ret = cli_run_interactive(r->c, sb, NULL, argv, (const char *const *) env.v, env.n, 0, tty);
  sbx__strv_free(&env);
  return ret;
}

int cmd_shell(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"env", required_argument, NULL, 'e'}, {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct shell_args a = {0};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "e:", on_opt, &a, 0);
  if (r == 0) {
    struct shell_run run = {c, &a};
    r = cli_with_sandbox(c, &s, run_shell, &run);
  }
  sbx__strv_free(&a.env);
  return r == CLI_DONE ? 0 : r;
}
