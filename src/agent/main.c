/* sbx-init: `sbx-init launch FD` builds a sandbox from the spec read on FD (see
 * src/backends/linux/launch.c) and leaves this program running inside it as PID 1. */
#include "../backends/linux/linux.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
  fputs("Usage: sbx-init launch FD\n"
        "\n"
        "sbx-init is started by libsbx; it is not meant to be run by hand. It builds one sandbox\n"
        "from the launch spec read on file descriptor FD and stays inside it as PID 1, serving\n"
        "the sandbox's control socket.\n",
        f);
}

int main(int argc, char **argv)
{
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("sbx-init %s\n", SBX_VERSION);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "launch") == 0) {
    char *end;
    long fd = strtol(argv[2], &end, 10);
    if (*end == '\0' && fd >= 0 && fd < 1024)
      return sbx_launch_main((int) fd);
  }
  usage(stderr);
  return 2;
}
