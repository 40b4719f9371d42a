/* sbx exec: run a command in the scope's sandbox (created on first use). */
#include "cli.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx exec -t THREAD [-u USER] [-i] [-T] [-e KEY=VALUE]... [--timeout SECONDS] [--json]\n"
    "                [--image IMAGE] -- COMMAND\n"
    "\n"
    "Runs `sh -lc COMMAND` in /mnt/user-data/workspace of the scope's sandbox, stdin from\n"
    "/dev/null (with -i: ours). stdout and stderr go to ours as they arrive; the exit status\n"
    "is the command's (124 on timeout, 128+N if killed by signal N). Background processes the\n"
    "command starts keep running for later calls; the command's own process group ends with\n"
    "us (killed if we are, or if our stdout or stderr is closed while it prints). A simple\n"
    "command (one program and its arguments) is exec'd by that shell, which then adds nothing\n"
    "to its exit status or its signals.\n"
    "\n"
    "  -i, --interactive     stdin from ours (EOF on ours closes the command's); no deadline\n"
    "                        unless --timeout is given; SIGINT/SIGTERM/SIGHUP sent to us go\n"
    "                        to the command; SIGTERM/SIGHUP also end the session: the\n"
    "                        command's process group is killed 2 s later (at once on a\n"
    "                        second one) if it has not ended, and we exit 128+N\n"
    "  -T, --tty             run on a terminal in the sandbox (implies -i; docker's -it: -t\n"
    "                        is the thread here); our stdin must be a terminal (else a\n"
    "                        usage error, exit 2: use -i). Our terminal is in raw mode until the\n"
    "                        command ends (^C reaches the command, not sbx); window size\n"
    "                        changes are forwarded; stdout and stderr are the terminal's\n"
    "                        output. The detach keys of docker (^P ^Q) are not taken: the\n"
    "                        terminal lives as long as this connection (no attach), and a\n"
    "                        shell needs ^P. For a terminal to detach from and come back\n"
    "                        to, use an sbxd PTY session and `sbx attach` (^P ^Q there)\n"
    "  -t, --thread THREAD   scope thread id (^[A-Za-z0-9_-]{1,64}$, not\n"
    "                        starting with -), required\n"
    "  -u, --user USER       scope user id (default \"default\")\n"
    "  -e, --env KEY=VALUE   set a variable for this command (repeatable)\n"
    "      --timeout SECONDS default: sandbox.bash_command_timeout (600); -i, -T: none\n"
    "      --image IMAGE     make the sandbox from this image (default: sandbox.image;\n"
    "                        applies when the sandbox is created)\n"
    "      --json            print {\"stdout\",\"stderr\",\"exit_code\",\"timed_out\",\"output\"}\n"
    "                        (output = the rendered text an agent reads); each stream is\n"
    "                        kept up to 10 MiB\n";

static int write_stream(void *arg, int stream, const char *data, size_t len)
{
  (void) arg;
  return sbx__write_all(stream == 1 ? 1 : 2, data, len) < 0 ? 1 : 0;
}

int cli_run_command(struct cli *c, sbx_sandbox_t *sb, const char *command, const char *const *env,
                    size_t n_env, double timeout, bool json)
{
  (void) c;
  struct sbx_exec_opts o = {
      .env = env, .n_env = n_env, .timeout = timeout, .kill_on_disconnect = true};
  if (!json) {
    o.on_output = write_stream;
    o.discard_output = true;
    o.out_cap = UINT64_MAX; /* a terminal gets everything; the 10 MiB cap is for results */
  }
  struct sbx_exec_result r;
  sbx_error_t err = NULL;
  if (sbx_execute_command(sb, command, &o, &r, &err) < 0)
    return cli_fail(&err);
  int code = r.timed_out ? 124 : r.exit_code < 0 ? 128 - r.exit_code : r.exit_code & 0xff;
  int ret = code;
  if (json) {
    json_t *j = json_object();
    json_object_set_new(j, "stdout", cli_json_string(r.out, r.out_len));
    json_object_set_new(j, "stderr", cli_json_string(r.err, r.err_len));
    json_object_set_new(j, "exit_code", json_integer(r.exit_code));
    json_object_set_new(j, "timed_out", json_boolean(r.timed_out));
    json_object_set_new(j, "output", cli_json_string(r.output, r.output_len));
    if (cli_print_json(j) != 0)
      ret = EXIT_OP_ERROR;
  }
  sbx_exec_result_free(&r);
  return ret;
}

static bool cli_env_has(const sbx_strv_t *env, const char *key)
{
  size_t k = strlen(key);
  for (size_t i = 0; i < env->n; i++)
    if (strncmp(env->v[i], key, k) == 0 && env->v[i][k] == '=')
      return true;
  return false;
}

struct exec_args {
  const char *image;
  sbx_strv_t env;
  double timeout;
  bool json, interactive, tty;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct exec_args *a = ctx;
  switch (ch) {
  case 'e':
    if (strchr(arg, '=') == NULL)
      return cli_usage_error(c, "-e needs KEY=VALUE, got '%s'", arg);
    sbx__strv_push(&a->env, arg);
    return 0;
  case 2:
    a->image = arg;
    return 0;
  case 'i':
    a->interactive = true;
    return 0;
  case 'T':
    a->tty = a->interactive = true;
    return 0;
  case 1:
    if (!cli_parse_seconds(arg, &a->timeout))
      return cli_usage_error(c, "--timeout needs a positive number of seconds, got '%s'", arg);
    return 0;
  default:
    a->json = true;
    return 0;
  }
}

/* exec and run: parse, then run the command in a sandbox from get (scoped or throw-away). */
int cli_exec_main(struct cli *c, int argc, char **argv, const char *help, bool scoped);
int cli_exec_main(struct cli *c, int argc, char **argv, const char *help, bool scoped)
{
  static const struct option opts[] = {{"env", required_argument, NULL, 'e'},
                                       {"timeout", required_argument, NULL, 1},
                                       {"interactive", no_argument, NULL, 'i'},
                                       {"tty", no_argument, NULL, 'T'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"image", required_argument, NULL, 2},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct exec_args a = {0};
  int r = cli_parse(c, argc, argv, help, scoped ? &s : NULL, opts, "e:iT", on_opt, &a, -1);
  if (r == 0 && a.interactive && a.json)
    r = cli_usage_error(c, "--json cannot be combined with -i or --tty");
  /* docker's "the input device is not a TTY": a terminal fed from a pipe cannot be given the
   * pipe's end reliably (an EOF typed before a program switched its terminal to raw mode is
   * lost, and the program waits forever) */
  if (r == 0 && a.tty && !isatty(0))
    r = cli_usage_error(c, "--tty needs a terminal on stdin (the input device is not a "
                           "terminal); use -i to feed a command from a pipe or a file");
  if (r == 0)
    r = cli_open(c);
  /* for this sandbox only: the spares made after this call are the configured image's */
  char *configured_image = NULL;
  if (r == 0 && a.image) {
    configured_image = c->cfg->image;
    c->cfg->image = xstrdup(a.image);
  }
  if (r == 0) {
    cleanup_free char *command = cli_join(argc, argv, optind);
    sbx_error_t err = NULL;
    sbx_sandbox_t *sb =
        scoped ? cli_acquire(c, &s, &err) : sbx_acquire(c->provider, NULL, NULL, &err);
    if (sb == NULL) {
      r = cli_fail(&err);
    } else {
      cleanup_free char *id = xstrdup(sbx_sandbox_id(sb));
      if (a.tty && getenv("TERM") && !cli_env_has(&a.env, "TERM"))
        sbx__strv_push_owned(&a.env, xasprintf("TERM=%s", getenv("TERM")));
      if (a.interactive)
        r = cli_run_interactive(c, sb, command, NULL, (const char *const *) a.env.v, a.env.n,
                                a.timeout, a.tty);
      else
        r = cli_run_command(c, sb, command, (const char *const *) a.env.v, a.env.n, a.timeout,
                            a.json);
      int e = scoped ? sbx_release(c->provider, id, &err) : sbx_destroy(c->provider, id, &err);
      if (e < 0 && r == 0)
        r = cli_fail(&err);
      sbx_error_release(&err);
    }
  }
  sbx__strv_free(&a.env);
  if (configured_image) {
    free(c->cfg->image);
    c->cfg->image = configured_image;
  }
  return r == CLI_DONE ? 0 : r;
}

int cmd_exec(struct cli *c, int argc, char **argv)
{
  return cli_exec_main(c, argc, argv, usage, true);
}
