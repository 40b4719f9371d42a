/* The egress denials in sbxd's log (docs/network.md, "The denied log"): a thread follows every
 * sandbox's net/denied.log (the enforcer appends a JSON line per denied lookup or connection)
 * and logs each new line as an "egress denied" entry with the sandbox id, the kind, the target
 * and the rule. */
#ifndef SBXD_NETLOG_H
#define SBXD_NETLOG_H

#define SBXD_NETLOG_POLL_MS 500 /* how often the logs are looked at */

/* Starts the thread: the lines already in the logs of the sandboxes there now are not logged
 * again; a sandbox that appears later is followed from its log's start. */
int sbxd_netlog_start(void);
void sbxd_netlog_stop(void);

#endif
