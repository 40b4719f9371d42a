/* sbx doctor: what works on this host for this user (libsbx's sbx_doctor does the checks) */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx doctor\n"
    "\n"
    "Reports, for this host and this user, what the linux backend needs and whether it has it:\n"
    "the kernel and each system call sbx relies on (with the Linux version that added it), root\n"
    "or, as an ordinary user, rootless mode (user namespaces and what blocks them: sysctls,\n"
    "AppArmor; newuidmap and /etc/subuid; a nosuid/noexec state directory), seccomp, the\n"
    "cgroup hierarchy (v1 or v2, read-only or not, where\n"
    "sandboxes would go, which controllers are delegated there, systemd delegation), with the fix\n"
    "for each problem. Reads the configuration as other verbs do (cgroup_manager, cgroup_required\n"
    "and the limits change the verdict). Creates nothing.\n"
    "\n"
    "Exit status: 0 if sandboxes can start here, 1 if they cannot (a line marked FAIL says why).\n";

int cmd_doctor(struct cli *c, int argc, char **argv)
{
  int r = cli_parse(c, argc, argv, usage, NULL, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
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
  printf("configuration: %s\n", path ? path : "(defaults; no config file)");
  free(def);
  if (c->cfg->use && strcmp(c->cfg->use, "linux") != 0)
    printf("backend %s: sandboxes run elsewhere; below is the linux backend on this host\n",
           c->cfg->use);
  int failed = 0;
  if (c->home)
    setenv("SBX_HOME", c->home, 1); /* the folder whose file system sbx_doctor tries idmapping on */
  char *report = sbx_doctor_home(c->cfg, c->home, &failed);
  fputs(report, stdout);
  free(report);
  return failed ? EXIT_OP_ERROR : 0;
}
