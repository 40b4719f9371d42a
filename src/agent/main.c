/* sbx-init: `sbx-init launch FD` builds a sandbox from the spec read on FD (see
 * src/backends/linux/launch.c) and leaves this program running inside it as PID 1. */
#include "../backends/linux/linux.h"
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void usage(FILE *f)
{
  fputs("Usage: sbx-init launch FD\n"
        "       sbx-init search ls|glob|grep ...\n"
        "\n"
        "sbx-init is started by libsbx; it is not meant to be run by hand. It builds one sandbox\n"
        "from the launch spec read on file descriptor FD and stays inside it as PID 1, serving\n"
        "the sandbox's control socket. `search` runs the native list_dir/glob/grep as a plain\n"
        "command and prints JSON lines (used inside remote sandboxes).\n",
        f);
}

/* Closes every descriptor above stdio but keep. The launcher becomes PID 1 of the sandbox: a
 * descriptor inherited from whoever started it (a host directory, a host file) would stay open
 * inside the sandbox for its whole life, reachable through /proc/self/fd. */
static void close_inherited(int keep)
{
  if (keep > 3)
    syscall(SYS_close_range, 3u, (unsigned) keep - 1, 0u);
  syscall(SYS_close_range, keep < 3 ? 3u : (unsigned) keep + 1, ~0u, 0u);
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
  if (argc >= 2 && strcmp(argv[1], "search") == 0)
    return sbx__agent_search_main(argc - 1, argv + 1);
  if (argc == 3 && strcmp(argv[1], "launch") == 0) {
    char *end;
    long fd = strtol(argv[2], &end, 10);
    if (*end == '\0' && fd >= 0 && fd < 1024) {
      close_inherited((int) fd);
      return sbx__launch_main((int) fd);
    }
  }
  usage(stderr);
  return 2;
}
