/* Sockets of the host's network namespace for the enforcer, whose main thread lives in the
 * sandbox's (listeners, the nftables socket). A socket belongs to the namespace it was made in
 * for its life. The enforcer cannot step back into the host's namespace for each socket: as an
 * ordinary user it holds no capability over that namespace (setns needs CAP_SYS_ADMIN there),
 * so a thread that never leaves it makes them, and the fd table the threads share hands them
 * over. */
#ifndef SBX_NET_HOSTSOCK_H
#define SBX_NET_HOSTSOCK_H

#include <sbx/error.h>

struct sbx_hostsock;

/* Starts the thread; call it while the calling thread is still in the host's namespace, with
 * the signals the process handles blocked (the thread inherits the mask). */
struct sbx_hostsock *sbx__hostsock_start(sbx_error_t *err);
/* socket(family, type | SOCK_CLOEXEC, 0), made in the host's namespace: the fd, or -1 and
 * errno. One caller thread at a time. */
int sbx__hostsock_socket(struct sbx_hostsock *h, int family, int type);

#endif
