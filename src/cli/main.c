/* sbx: the command-line front-end of libsbx. */
#include "cli.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct cli_verb verbs[] = {
    {"exec", cmd_exec, "run a command in the scope's sandbox"},
    {"run", cmd_run, "run a command in a throw-away sandbox"},
    {"shell", cmd_shell, "an interactive shell in the scope's sandbox"},
    {"attach", cmd_attach, "a terminal on a PTY session of sbxd (^P ^Q detaches)"},
    {"read", cmd_read, "print a text file (optionally a line range)"},
    {"write", cmd_write, "write stdin to a file (text; --append to append)"},
    {"upload", cmd_upload, "write stdin to a file (bytes)"},
    {"download", cmd_download, "copy a file from /mnt/user-data to stdout or a file"},
    {"ls", cmd_ls, "list a directory"},
    {"glob", cmd_glob, "find paths matching a pattern"},
    {"grep", cmd_grep, "search file contents"},
    {"ps", cmd_ps, "list the sandboxes of the pool"},
    {"release", cmd_release, "park the scope's sandbox warm"},
    {"rm", cmd_rm, "destroy the scope's sandbox (--data: and its thread folder)"},
    {"inspect", cmd_inspect, "print one sandbox's record as JSON (by scope or id)"},
    {"kill", cmd_kill, "signal every process of a sandbox but its init"},
    {"pause", cmd_pause, "freeze every process of a sandbox"},
    {"unpause", cmd_unpause, "thaw a paused sandbox"},
    {"stats", cmd_stats, "CPU and memory of the sandboxes (or of one), once"},
    {"net", cmd_net, "show or change the egress policy of the scope's sandbox"},
    {"gc", cmd_gc, "reap dead and idle sandboxes now"},
    {"down", cmd_down, "destroy every sandbox of the pool"},
    {"config", cmd_config, "check or show the configuration"},
    {"mcp", cmd_mcp, "serve the sandbox as MCP tools over stdio (for agents)"},
    {"image", cmd_image, "import, list, remove or prune images (sbx image --help)"},
    {"images", cmd_images, "list the images of the store"},
    {"rmi", cmd_rmi, "remove images (refused while a sandbox uses one)"},
    {"pull", cmd_pull, "fetch an image from a registry into the store"},
    {"commit", cmd_commit, "store the scope's sandbox's root as a new image"},
    {"doctor", cmd_doctor, "say what works on this host and what does not, with fixes"},
};

static void usage(FILE *f)
{
  fputs("Usage: sbx [--home DIR] [--config FILE] VERB [OPTIONS] ...\n"
        "\n"
        "Sandboxes for AI agents: one per (user, thread) scope, created on first use and kept\n"
        "warm between calls.\n"
        "\n"
        "Global options:\n"
        "  --home DIR      state directory (default $SBX_HOME, else " SBX_ROOT_HOME " as root,\n"
        "                  $XDG_STATE_HOME/sbx (~/.local/state/sbx) as a user; made 0700)\n"
        "  --config FILE   configuration (default $SBX_HOME/config.yaml if present)\n"
        "  --help          this help; `sbx VERB --help` for a verb\n"
        "  --version       print the version\n"
        "\n"
        "Verbs:\n",
        f);
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    fprintf(f, "  %-9s %s\n", verbs[i].name, verbs[i].summary);
  fputs("\nScope options of sandbox verbs: -t/--thread THREAD (required), -u/--user USER\n"
        "(default \"default\"). Exit status: the command's for exec/run, 1 for an operation\n"
        "error, 2 for a usage error.\n",
        f);
}

int main(int argc, char **argv)
{
  struct cli c = {0};
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf("sbx %s\n", SBX_VERSION);
      return 0;
    } else if (strcmp(a, "--home") == 0 || strcmp(a, "--config") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sbx: %s needs a value\n", a);
        return EXIT_USAGE;
      }
      if (a[2] == 'h')
        c.home = argv[++i];
      else
        c.config_path = argv[++i];
    } else if (strncmp(a, "--home=", 7) == 0) {
      c.home = a + 7;
    } else if (strncmp(a, "--config=", 9) == 0) {
      c.config_path = a + 9;
    } else if (a[0] == '-') {
      fprintf(stderr, "sbx: unknown option '%s'\nTry 'sbx --help'.\n", a);
      return EXIT_USAGE;
    } else {
      break;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (c.home == NULL || *c.home == '\0')
    c.home = getenv("SBX_HOME");
  if (c.home == NULL || *c.home == '\0')
    c.home = sbx__default_home();
  for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++) {
    if (strcmp(argv[i], verbs[v].name) != 0)
      continue;
    c.verb = verbs[v].name;
    int r = verbs[v].fn(&c, argc - i, argv + i);
    /* rootless linux sandboxes have no spares (libsbx warns): no filler to start */
    bool rootless = geteuid() != 0 && (c.cfg && (!c.cfg->use || strcmp(c.cfg->use, "linux") == 0));
    bool missing = c.provider && !rootless && c.cfg->spares > 0 && strcmp(c.verb, "down") != 0 &&
                   sbx_spares_ready(c.provider) < c.cfg->spares;
    sbx_provider_free(c.provider); /* drops every lease before a filler could inherit one */
    c.provider = NULL;
    cli_refill_spares(&c, missing);
    sbx_config_free(c.cfg);
    return r;
  }
  fprintf(stderr, "sbx: unknown verb '%s'\nTry 'sbx --help'.\n", argv[i]);
  return EXIT_USAGE;
}
