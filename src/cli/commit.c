/* sbx commit: the scope's sandbox's writable root as a new image of the store. */
#include "cli.h"

#include <stdlib.h>

static const char usage[] =
    "Usage: sbx commit -t THREAD [-u USER] NAME[:TAG]\n"
    "\n"
    "Stores what the scope's sandbox wrote to its root (its overlay's upper: installed packages,\n"
    "changed and deleted files) as one new layer on top of the image it was made from, under\n"
    "NAME[:TAG] (default tag: latest) in the store. The image keeps its parent's config (Env,\n"
    "Entrypoint, Cmd) and gets a history entry. A running sandbox is frozen while its root is\n"
    "read (its cgroup's freezer; where this user has none to write, e.g. rootless without a\n"
    "delegated cgroup, each of its processes is stopped with SIGSTOP), then thawed; it keeps\n"
    "running. /mnt/user-data, /tmp and /run are not part of the\n"
    "root and are not committed. Prints the new image's name and manifest digest.\n"
    "\n"
    "Refused for a sandbox of the `host` image (it has no writable root).\n";

int cmd_commit(struct cli *c, int argc, char **argv)
{
  struct cli_scope s = {0};
  int r = cli_parse(c, argc, argv, usage, &s, NULL, NULL, NULL, NULL, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  char id[17];
  char *digest = NULL;
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(s.user, s.thread, id, &err) < 0 ||
      sbx_commit(c->provider, id, argv[optind], &digest, &err) < 0)
    return cli_fail(&err);
  printf("%s %s\n", argv[optind], digest);
  free(digest);
  return 0;
}
