/* sbx config check|show */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx config check|show\n"
    "\n"
    "check  validates the configuration (--config FILE, else $SBX_HOME/config.yaml if present)\n"
    "       and says which file was used\n"
    "show   prints the effective values (defaults filled in) as YAML, secrets masked\n";

int cmd_config(struct cli *c, int argc, char **argv)
{
  int r = cli_parse(c, argc, argv, usage, NULL, NULL, NULL, NULL, NULL, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  const char *what = argv[optind];
  if (strcmp(what, "check") != 0 && strcmp(what, "show") != 0)
    return cli_usage_error(c, "unknown subcommand '%s' (check or show)", what);
  sbx_error_t err = NULL;
  char *def = NULL;
  const char *path = c->config_path;
  if (path == NULL) {
    if (asprintf(&def, "%s/config.yaml", c->home) < 0)
      return EXIT_OP_ERROR;
    if (access(def, F_OK) == 0)
      path = def;
  }
  c->cfg = path ? sbx_config_load(path, &err) : sbx_config_new_default();
  if (c->cfg == NULL) {
    free(def);
    return cli_fail(&err);
  }
  if (strcmp(what, "check") == 0) {
    printf("configuration OK: %s\n", path ? path : "(defaults; no config file)");
  } else {
    char *dump = sbx_config_dump(c->cfg);
    fputs(dump, stdout);
    free(dump);
  }
  free(def);
  return 0;
}
