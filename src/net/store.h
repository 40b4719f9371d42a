/* The per-sandbox network state files, in the sandbox's state folder:
 * - net/policy.json: the policy (the source of truth). Written as a whole by temp + rename
 *   under an flock on net/policy.lock, so the enforcer always reads a complete file; the writer
 *   then signals the enforcer (SBX_NET_RELOAD_SIGNAL), which also looks at the file's inode
 *   and mtime every SBX_NET_RELOAD_POLL_MS (a signal that found no record yet, a hand edit).
 * - net/enforcer: the enforcer's record, "pid=N\nstart=N\n" (host pid, /proc start time).
 * - net/counters.json: the enforcer's counters, {"denied_connections": N, "denied_lookups": N,
 *   "allowed_lookups": N} (it rewrites the file the same way; sbxd's /metrics reads it).
 * - net/denied.log: one JSON object a line per denied lookup or connection: {"ts": seconds,
 *   "sandbox": id, "kind": "lookup"|"connect", "target": name or address[:port], "rule": the
 *   decision's text}, appended with O_APPEND (a line is one write). A connection refused for
 *   its Host or SNI (docs/network.md) also has "name": the name it sent ("" for none) and
 *   "pinned": the names its address was pinned for. */
#ifndef SBX_NET_STORE_H
#define SBX_NET_STORE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <sbx/error.h>

#include "policy.h"

#define SBX_NET_DIR "net"
#define SBX_NET_POLICY_FILE "net/policy.json"
#define SBX_NET_POLICY_LOCK "net/policy.lock"
#define SBX_NET_COUNTERS_FILE "net/counters.json"
#define SBX_NET_DENIED_LOG "net/denied.log"
#define SBX_NET_POLICY_MAX (4u << 20) /* bytes of policy.json read at most */
#define SBX_NET_ENFORCER_RECORD "net/enforcer"
#define SBX_NET_RELOAD_SIGNAL SIGUSR1
#define SBX_NET_RELOAD_POLL_MS 250

/* Sends sig to the enforcer net/enforcer names, if it still runs (a pidfd, its start time
 * checked: never another process that took its pid). 0 sent, -1 not (no record, gone). */
int sbx__net_enforcer_signal(const char *sandbox_dir, int sig);

/* The sandbox's policy. A missing file is SBX_E_NOT_FOUND ("sandbox has no egress policy"). */
sbx_net_policy_t *sbx__net_store_read(const char *sandbox_dir, sbx_error_t *err);
/* Replaces the policy (creates net/ if needed). */
int sbx__net_store_write(const char *sandbox_dir, const sbx_net_policy_t *p, sbx_error_t *err);

/* Read-modify-write under the lock: edit changes the policy in place (or fails, and then nothing
 * is written). The result is returned in *out when out is non-NULL. With create, a missing file
 * starts as default deny; without, it is SBX_E_NOT_FOUND. */
typedef int (*sbx_net_edit_fn)(sbx_net_policy_t *p, void *data, sbx_error_t *err);
int sbx__net_store_update(const char *sandbox_dir, bool create, sbx_net_edit_fn edit, void *data,
                          sbx_net_policy_t **out, sbx_error_t *err);

struct sbx_net_counters {
  uint64_t denied_connections;
  uint64_t denied_lookups;
  uint64_t allowed_lookups;
};
/* A missing file reads as zeros (returns 0); a bad one is SBX_E_INVALID. */
int sbx__net_counters_read(const char *sandbox_dir, struct sbx_net_counters *c, sbx_error_t *err);
int sbx__net_counters_write(const char *sandbox_dir, const struct sbx_net_counters *c,
                            sbx_error_t *err);
/* Appends one line to net/denied.log. kind: "lookup" or "connect". */
int sbx__net_denied_log(const char *sandbox_dir, const char *sandbox_id, const char *kind,
                        const char *target, const char *rule, sbx_error_t *err);
/* The same with "name" and "pinned" (name NULL: neither). */
int sbx__net_denied_log_names(const char *sandbox_dir, const char *sandbox_id, const char *kind,
                              const char *target, const char *rule, const char *name,
                              const char *const *pinned, size_t n_pinned, sbx_error_t *err);

#endif
