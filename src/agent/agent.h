/* sbx-init: PID 1 of every local sandbox. It reaps zombies, runs commands in their own process
 * groups, streams their output, and does file and search operations natively, serving many
 * clients at once (a thread per connection) over the framed protocol of proto.h. Its layers and
 * how to add a request type: docs/design/agent.md. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <stdbool.h>
#include <stdint.h>

struct sbx_agent_opts {
  int listen_fd;          /* a listening unix socket */
  int lease_fd;           /* the sandbox's lease file (flock'ed by active users), or -1 */
  int64_t idle_timeout_s; /* exit when unleased and idle this long; 0 = never */
  uint64_t cmd_nofile;    /* soft RLIMIT_NOFILE of every command; 0 = sbx-init's own */
  /* run in each command's child before its exec (async-signal-safe; nonzero: the command
   * fails with status 126), or NULL: the backend's extra confinement of commands */
  int (*cmd_confine)(void);
  /* a writable host folder is idmapped (ids.c), so commands run under the setid guard:
   * sbx-init's own chmod and write_file give no setuid/setgid mode either; guard_nobody: host
   * root's files are mapped as 65534 there (the id guard), so sbx-init's chown refuses 65534 */
  bool guard_ids, guard_nobody;
};

/* server.c: the main loop, until the sandbox expires. */
int sbx__agent_serve(const struct sbx_agent_opts *o);

/* search_cli.c: `sbx-init search ...` (argv[0] = "search"). */
int sbx__agent_search_main(int argc, char **argv);

#endif
