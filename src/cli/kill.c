/* sbx kill: signal every process of a sandbox but its init (docker kill's habit). */
#include "cli.h"

#include <signal.h>
#include <string.h>

static const char usage[] =
    "Usage: sbx kill [-s SIGNAL] (-t THREAD [-u USER] | ID)\n"
    "\n"
    "Sends SIGNAL (default KILL; a name such as TERM, INT, HUP or SIGTERM, or a number) to\n"
    "every process of the sandbox but its init: its commands, background ones included, and\n"
    "whatever they started. The sandbox itself stays (warm, its /tmp and files kept) and the\n"
    "next command starts in it as usual; to destroy it, sbx rm. Prints how many processes got\n"
    "the signal. A paused sandbox's processes act on it once it is unpaused.\n";

static const struct {
  const char *name;
  int signo;
} signals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
               {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
               {"STOP", SIGSTOP}, {"ALRM", SIGALRM}};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) ch;
  int *signo = ctx;
  const char *name = strncmp(arg, "SIG", 3) == 0 ? arg + 3 : arg;
  long long n;
  if (cli_parse_long(arg, &n)) {
    if (n < 1 || n > 64)
      return cli_usage_error(c, "bad signal number '%s' (1-64)", arg);
    *signo = (int) n;
    return 0;
  }
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
    if (strcmp(name, signals[i].name) == 0) {
      *signo = signals[i].signo;
      return 0;
    }
  return cli_usage_error(c, "unknown signal '%s'", arg);
}

int cmd_kill(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"signal", required_argument, NULL, 's'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  char id[17];
  int signo = SIGKILL;
  int r = cli_parse_target(c, argc, argv, usage, opts, "s:", on_opt, &signo, &s, id);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0) {
    if (r != CLI_NO_HOME)
      return r;
    return cli_no_sandbox(c, &s, id, "", false);
  }
  sbx_error_t err = NULL;
  int n = sbx_kill(c->provider, id, signo, &err);
  if (n < 0) {
    if (err->kind == SBX_E_NOT_FOUND) {
      sbx_error_release(&err);
      return cli_no_sandbox(c, &s, id, "running ", false);
      return EXIT_OP_ERROR;
    }
    return cli_fail(&err);
  }
  printf("signalled %d process%s\n", n, n == 1 ? "" : "es");
  return 0;
}
