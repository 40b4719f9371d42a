/* The linux backend's mechanisms (one file each): the launch spec passed from libsbx to the
 * launcher (`sbx-init launch`), cgroups (v1/hybrid and v2), the sandbox's root filesystem and
 * mounts, and the confinement (capabilities, no_new_privs, seccomp). */
#ifndef SBX_LINUX_H
#define SBX_LINUX_H

#include <fcntl.h>
#include <sys/mount.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "error.h"
#include "util.h"

/* On-disk owner of what a sandbox writes for the host (thread folder, volumes: idmapped to
 * the sandbox's own range), and the range of a sandbox whose folders cannot be idmapped. */
#define SBX_UID_BASE 100000u
#define SBX_UID_COUNT 65536u
/* ---- ids.c: every sandbox's own host id range (see there) ---- */
#define SBX_RANGE_PARENT "/run/sbx"
#define SBX_RANGE_DIR "/run/sbx/id-ranges"
#define SBX_RANGE_FIRST 0x10000000u /* up to SBX_OWNER_BASE */
#define SBX_RANGE_SLOTS 12288u
/* Whether an /etc/subuid-style text ("name:first:count" lines) has an entry overlapping
 * [first, first + count). */
bool sbx__subids_overlap(const char *text, uint32_t first, uint32_t count);
/* Claims a free range: returns its slot's locked fd (held by the sandbox's PID 1 for its
 * life), its first id in *base. */
int sbx__ids_claim(uint32_t *base, sbx_error_t *err);
/* The id inside an idmapped folder that host root's files show as when the folder's top is not
 * root's (the foreign owner's slot, ids.c): nobody/nogroup, what the kernel shows for an
 * unmapped id anyway. No command may take it (the id guard, gen-seccomp.c). */
#define SBX_FOREIGN_ID 65534u
/* The uid_map (or gid_map) text of an idmapped mount's user namespace: on-disk owner -> base
 * (the sandbox's root), on-disk SBX_UID_BASE + j -> base + j for the other ids j inside (the
 * owner's slot, if it is one of those, swapped with SBX_UID_BASE), except that on-disk 0 (host
 * root) -> base + SBX_FOREIGN_ID when foreign and the owner is not 0 (then on-disk
 * SBX_UID_BASE + SBX_FOREIGN_ID, or SBX_UID_BASE if it was swapped there, is not mapped). Only
 * a sandbox whose commands run under the id guard may have foreign (spares do not: adopt.c).
 * Returns its length. */
int sbx__idmap_format(char *buf, size_t size, uint32_t owner, uint32_t base, bool foreign);
/* A user namespace with those maps for uid and gid (returns its fd): for idmapped mounts. The
 * helper process that made it is dying; sbx__ids_idmap_reap collects it (once, later). */
struct sbx_idmap_helper {
  pid_t pid;
  void *stack;
};
int sbx__ids_idmap_userns(uint32_t base, uid_t uid, gid_t gid, bool foreign,
                          struct sbx_idmap_helper *h, sbx_error_t *err);
/* A user namespace mapping inside.. to base.. for uid and gid (0: an image's layers, whose
 * owners are 0-based). */
int sbx__ids_userns_map(uint32_t inside, uint32_t base, struct sbx_idmap_helper *h,
                        sbx_error_t *err);
void sbx__ids_idmap_reap(struct sbx_idmap_helper *h);
/* Rootless (the launcher is not root): the user's own slice of its /etc/subuid and /etc/subgid
 * ranges when it has them and newuidmap/newgidmap are installed (fills s->uid_count, sub_uid,
 * sub_gid; returns the slot's locked fd, kept by the sandbox's PID 1, or SBX_IDS_SHARED), else
 * SBX_IDS_SINGLE
 * (uid_count 1: the user alone, as root inside). s->uid_base is the user's uid. */
#define SBX_IDS_SINGLE (-2)
#define SBX_IDS_SHARED (-3) /* every slot taken: the last one, shared (no lock) */
struct sbx_launch_spec;
int sbx__ids_rootless(struct sbx_launch_spec *s, sbx_error_t *err);
/* Writes pid's uid and gid maps for s (rootless): directly for the single mapping, through
 * newuidmap/newgidmap for a subordinate range. */
int sbx__ids_map_rootless(pid_t pid, const struct sbx_launch_spec *s, sbx_error_t *err);
/* The same for a bare range: uid_count 1 the user alone, else 0 the user and 1..65535 from
 * sub_uid/sub_gid. */
int sbx__ids_map_sub(pid_t pid, uint32_t uid_count, uint32_t sub_uid, uint32_t sub_gid,
                     sbx_error_t *err);
/* Rootless egress: maps pid's user namespace, a child of the launch's, one to one over its
 * count ids (through a helper in the parent). */
int sbx__ids_map_nested(pid_t pid, uint32_t count, sbx_error_t *err);
/* Rootless images (docs/hosts.md): the store slice, the user's first subordinate slot, which
 * the image store's layers are extracted with and every image sandbox maps (an image sandbox's
 * sbx__ids_rootless gives it). false: no subordinate ids (the user alone). */
bool sbx__ids_store_slice(const char *user_name, uint32_t *sub_uid, uint32_t *sub_gid);
/* In an /etc/subuid-style text, the first entry for name or uid ("name:first:count" or
 * "uid:first:count") with a count of at least min: true and *first, *count. */
bool sbx__subids_find(const char *text, const char *name, uint32_t uid, uint32_t min,
                      uint32_t *first, uint32_t *count);
/* Idmaps a detached mount (recursively) with that namespace. */
int sbx__tree_idmap(int tree, int userns);
/* The host uid that owns a sandbox's user namespace: this base plus the host pid of its init,
 * so no two running sandboxes share one. The kernel charges per-user counters (inotify
 * instances and watches, mqueue bytes, pending signals) to the namespace's owner: each sandbox
 * gets its own budget, and host root's is never touched. No host account uses these ids. */
#define SBX_OWNER_BASE 0x40000000u
#define SBX_MSG_LAUNCH 200 /* libsbx -> launcher: the launch spec */
/* the sandbox's name inside (launch, and adopt.c when a spare takes a new id) */
#define SBX_HOSTNAME_FMT "sbx-%s"
#define SBX_ETC_HOSTS_FMT                                                                          \
  "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsbx-%s\n"

struct sbx_launch_mount {
  char *host;
  char *container;
  bool read_only;
};

/* What the launcher needs to make one sandbox. Travels as TLV (launch_spec_encode/decode). */
struct sbx_launch_spec {
  char *id;
  char *state_dir;       /* $SBX_HOME/sandboxes/<id>: ctl.sock, lease, root/ live here */
  char *user_data;       /* host folder bound at /mnt/user-data */
  char *image;           /* "host": the host's /usr, read-only, with a generated /etc */
  char *layers;          /* another image: its layer folders, top first, '\n'-separated */
  uint64_t memory_bytes; /* 0 = none */
  uint64_t cpu_millis;   /* 1000 = one CPU; 0 = none */
  int64_t pids;          /* 0 = none */
  bool net_host;         /* share the host network namespace */
  bool map_host_root;    /* the foreign owner's slot in idmapped folders (ids.c) */
  bool net_egress;       /* sandbox.network egress: its resolver is the enforcer's (net.c) */
  uint64_t tmp_bytes;
  uint64_t home_bytes;
  int64_t idle_timeout_s; /* sbx-init exits after this long unleased and idle; 0 = never */
  int cgroup_manager;     /* SBX_CGM_* */
  bool cgroup_required;   /* refuse to start without a cgroup (else: warn, run unlimited) */
  char *cgroup_slice;     /* the systemd manager's slice; NULL = sbx.slice */
  char *user_name;        /* the caller's login name (its /etc/subuid entry), or NULL */
  struct sbx_launch_mount *mounts;
  size_t n_mounts;
  /* the launcher's own, not on the wire: */
  uint32_t uid_base; /* the sandbox's host id range (ids.c), SBX_UID_BASE without idmapping */
  int layers_fd;     /* an image's: user namespace mapping 0.. onto the range, or -1 */
  /* launcher only: an ordinary user's sandbox (ids.c: every namespace is made at once, in a
   * user namespace mapping root inside to the user, plus uid_count - 1 subordinate ids from
   * sub_uid/sub_gid up when uid_count > 1) */
  bool rootless;
  uint32_t uid_count, sub_uid, sub_gid;
  /* launcher only: egress, the sandbox's network namespace, opened while its PID 1 could still
   * be looked into (confine.c makes it non-dumpable: an ordinary user cannot open it after);
   * it travels with the launcher's reply to the enforcer (host/net.c), or -1 */
  int netns_fd;
  /* per tree ([0] the thread folder, [1..] the mounts): its owner when the launcher looked, and
   * a user namespace idmapping it to that owner (ids.c), or -1; NULL without idmapping */
  struct sbx_tree_owner {
    uid_t uid;
    gid_t gid;
    int userns;
  } * owners;
  /* launcher only: a writable tree is idmapped to an owner other than SBX_UID_BASE, or maps
   * host root's files (the foreign owner's slot, ids.c), so commands may not make
   * setuid/setgid files or file capabilities (confine.c); guard_foreign: host root's files
   * are mapped, so no command may take the id SBX_FOREIGN_ID either */
  bool guard_setid, guard_foreign;
  /* launcher only: no mount_setattr (before 5.12), so the trees are made nosuid,nodev by a
   * remount once attached */
  bool nosuid_by_remount;
};

/* A detached mount (open_tree) made nosuid and nodev, recursively, before it is attached in a
 * sandbox: files a sandbox writes in its thread folder or a volume are owned by its host ids
 * and must never gain those ids or a device for anyone (nor exec is refused: the workspace
 * runs programs, by contract). */
static inline int sbx_tree_nosuid_nodev(int tree)
{
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
  return (int) syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                       sizeof attr);
}

/* ---- quota.c: size-capped folders as sparse ext4 images, loop-mounted (see there) ---- */
/* library side: the thread folder, loop-mounted on the host at the folder itself (once) */
int sbx__user_data_image(const char *dir, uint64_t bytes, sbx_error_t *err);
/* img made (sparse, bytes) if missing, grown if smaller */
int sbx__disk_image(const char *img, uint64_t bytes, sbx_error_t *err);
/* img attached to a loop device (autoclear) and mounted nosuid,nodev at the directory at */
int sbx__disk_mount(const char *img, const char *at, sbx_error_t *err);
/* in an image sandbox's state folder: the upper's image (sandbox.disk_mib), its mount point */
#define SBX_DISK_IMAGE_FILE "disk.img"
#define SBX_DISK_DIR "disk"

/* ---- host/net.c: sandbox.network egress, the host side (docs/network.md) ---- */
/* the sandbox's resolv.conf names the enforcer's resolver (src/net/resolver.h) */
#define SBX_EGRESS_RESOLVER "127.0.0.53"
struct sbx_config;
bool sbx__linux_egress(const struct sbx_config *c);
struct sbx_instance;
/* Starts the sandbox's enforcer (sbx-net) once its init runs, handing it netns_fd (the
 * sandbox's network namespace, the launcher's); a sandbox with a policy to start with (not a
 * spare's) gets net/policy.json first. */
int sbx__linux_net_start(struct sbx_instance *in, int netns_fd, sbx_error_t *err);
/* A spare taken: the new sandbox's policy (in force within milliseconds; until then the
 * spare's deny-all). */
int sbx__linux_net_adopt(struct sbx_instance *in, sbx_error_t *err);
/* Kills the enforcer a state folder records (if it still runs). */
void sbx__linux_net_stop(const char *dir);

/* ---- adopt.c (library side): a spare becomes the sandbox in->meta describes ---- */
struct sbx_instance;
int sbx__linux_adopt(struct sbx_instance *in, const char *user_data, sbx_error_t *err);

void sbx__launch_spec_encode(const struct sbx_launch_spec *s, sbx_buf_t *out);
int sbx__launch_spec_decode(const void *p, size_t len, struct sbx_launch_spec *s);
void sbx__launch_spec_free(struct sbx_launch_spec *s);

/* ---- cgroup.c (the facade, v1 and hybrid), cgroup-v2.c (cgroupfs on a unified hierarchy) ---- */
enum { SBX_CG_MEMORY, SBX_CG_PIDS, SBX_CG_CPU, SBX_CG_FREEZER, SBX_CG_MAX };
/* sandbox.cgroup_manager: auto (systemd where systemd runs the host and our cgroup is not
 * delegated to us, else cgroupfs), cgroupfs (below the caller's cgroup), systemd (a transient
 * scope per sandbox in a slice), none (no cgroups, no limits). */
enum { SBX_CGM_AUTO, SBX_CGM_CGROUPFS, SBX_CGM_SYSTEMD, SBX_CGM_NONE };
#define SBX_CG_ROOT "/sys/fs/cgroup"
/* v2: where the processes of the caller's cgroup go so that it may delegate controllers */
#define SBX_CG_LEAF "sbx-leaf"

/* One sandbox's cgroup: on v1/hybrid hosts one directory per controller, on v2 one directory
 * (stored in every slot). Paths are absolute under /sys/fs/cgroup. none: the sandbox has no
 * cgroup, and why (cgroups unavailable and not required, or cgroup_manager none). */
struct sbx_cgroup {
  bool unified;
  char *path[SBX_CG_MAX];
  char *none;
};

/* What a sandbox may hold in TCP buffers on cgroup v1 (where they are not part of the memory
 * limit): a quarter of its memory limit, at least 16 MiB. */
static inline uint64_t sbx_cgroup_tcp_bytes(uint64_t memory_bytes)
{
  return memory_bytes / 4 > (16u << 20) ? memory_bytes / 4 : 16u << 20;
}

/* Creates the sandbox's cgroup below the caller's own cgroup (".../sbx/<id>-<random>") and
 * writes s's limits. A host that cannot give one fails with SBX_E_UNSUPPORTED and a message
 * that says why and what to do, unless s->cgroup_required is false: then cg->none says why. */
int sbx__cgroup_create(const struct sbx_launch_spec *s, pid_t pid, struct sbx_cgroup *cg,
                       sbx_error_t *err);
/* The manager auto stands for on this host, for this caller (SBX_CGM_CGROUPFS or _SYSTEMD). */
int sbx__cgroup_auto_manager(void);
/* Is dir delegated to us by systemd (its trusted.delegate or user.delegate xattr)? */
bool sbx__cgroup_delegated(const char *dir);
int sbx__cgroup_enter(const struct sbx_cgroup *cg, pid_t pid, sbx_error_t *err);
/* Moves the calling (single-threaded) process into cg, cheaply on v1 (see cgroup.c). */
int sbx__cgroup_join_self(const struct sbx_cgroup *cg, sbx_error_t *err);
/* Removes the directories, waiting up to timeout_ms for the last tasks to leave. */
int sbx__cgroup_destroy(const struct sbx_cgroup *cg, int timeout_ms, sbx_error_t *err);
/* Current memory charge in bytes, or -1. */
int64_t sbx__cgroup_memory(const struct sbx_cgroup *cg);
struct sbx_metrics;
/* CPU count (quota or online CPUs), CPU time used, memory limit and use. */
int sbx__cgroup_metrics(const struct sbx_cgroup *cg, struct sbx_metrics *m);
int sbx__cgroup_freeze(const struct sbx_cgroup *cg, bool frozen, sbx_error_t *err);
bool sbx__cgroup_is_frozen(const struct sbx_cgroup *cg);
int sbx__cgroup_set_limits(const struct sbx_cgroup *cg, uint64_t memory_bytes, uint64_t cpu_millis,
                           sbx_error_t *err);
int sbx__cgroup_sweep(int min_age_s);
/* v2 (cgroup-v2.c): our cgroup as /proc/self/cgroup's "0::" line says, or NULL */
char *sbx__cgroup_v2_own(void);
/* the directory sandboxes go below: the mount plus our cgroup, without our leaf */
char *sbx__cgroup_v2_base(sbx_error_t *err);
/* Makes <base>/sbx with memory, pids and cpu enabled for its children (those the base has),
 * moving the base's processes to SBX_CG_LEAF first if the base must delegate. */
int sbx__cgroup_v2_prepare(char **parent_out, sbx_error_t *err);
/* Which of memory, pids, cpu dir cannot give its children ("" = none missing). */
char *sbx__cgroup_v2_missing(const char *dir);
/* cgroup-systemd.c: has systemd start the transient scope sbx-<name>.scope in s's slice with
 * pid in it, Delegate=yes and s's limits; *path_out is its cgroup directory. */
int sbx__cgroup_systemd_scope(const struct sbx_launch_spec *s, const char *name, pid_t pid,
                              char **path_out, sbx_error_t *err);
/* The systemd manager's private socket for this caller (root's, or the user's own). */
char *sbx__systemd_socket(void);
/* The memory and CPU limits of a running sandbox's scope, as unit properties (they survive
 * systemctl daemon-reload; 0 = none). */
int sbx__cgroup_systemd_set_limits(const char *unit, uint64_t memory_bytes, uint64_t cpu_millis,
                                   sbx_error_t *err);
/* D-Bus reply decoding (fuzzed): the size of the message at p (header and body; 0 if p does not
 * start one), and, for a complete message, 0 if it answers serial (*error set, caller frees, if
 * it is an error), 1 if it is some other message, -1 if malformed. */
#define SBX_DBUS_MAX (1u << 20)
size_t sbx__dbus_message_size(const void *p, size_t len);
int sbx__dbus_parse_reply(const void *p, size_t len, uint32_t serial, char **error);
/* Serialised as "name=path" lines for the state dir (or one "none=reason" line). */
char *sbx__cgroup_format(const struct sbx_cgroup *cg);
int sbx__cgroup_parse(const char *s, struct sbx_cgroup *cg);
void sbx__cgroup_free(struct sbx_cgroup *cg);

/* Pseudo-terminals a sandbox may hold open at once (its devpts's max=). */
#define SBX_PTY_MAX 128

/* ---- kernel.c: the kernel's features, probed once (docs/hosts.md) ---- */
/* The oldest kernel with every required feature below. */
#define SBX_KERNEL_FLOOR "5.9"
enum {
  SBX_KF_OPEN_TREE,
  SBX_KF_MOVE_MOUNT,
  SBX_KF_PIDFD_OPEN,
  SBX_KF_OPENAT2,
  SBX_KF_CLOSE_RANGE,
  SBX_KF_MOUNT_SETATTR,
  SBX_KF_MAX
};
struct sbx_kfeature {
  const char *name;  /* the system call */
  const char *since; /* the Linux version that added it */
  bool required;     /* no sandbox without it; else some features are refused */
  const char *why;
};
extern const struct sbx_kfeature sbx__kfeatures[SBX_KF_MAX];
bool sbx__kernel_has(int feature);
char *sbx__kernel_release(void);
bool sbx__kernel_at_least(int major, int minor);
/* An image's root: overlayfs over idmapped lower layers (Linux 5.19+), else a clear error. */
bool sbx__kernel_ovl_idmap(void);
/* Root's image roots need overlayfs over idmapped layers (5.19), an ordinary user's overlayfs in
 * a user namespace (5.11): SBX_E_UNSUPPORTED naming the image and the kernel otherwise. */
int sbx__kernel_require_ovl(const char *image, bool rootless, sbx_error_t *err);
/* SBX_E_UNSUPPORTED naming the first required feature missing, or 0. */
int sbx__kernel_check(sbx_error_t *err);
/* SBX_E_UNSUPPORTED "WHAT needs FEATURE (Linux x.y) ..." if the feature is missing. */
int sbx__kernel_require(int feature, const char *what, sbx_error_t *err);

/* ---- rootfs.c (runs in the child, as host root in its new mount namespace) ---- */
/* Builds the new root under <state_dir>/root; the host stays visible until sbx__rootfs_enter. */
/* Falls back to s->uid_base = SBX_UID_BASE (no idmapping) when the thread folder or a writable
 * mount is on a file system that cannot be idmapped. */
int sbx__rootfs_setup(struct sbx_launch_spec *s, sbx_error_t *err);
/* pivot_root into it, detach the host's tree, make / read-only. */
int sbx__rootfs_enter(const struct sbx_launch_spec *s, sbx_error_t *err);
int sbx__net_setup_loopback(sbx_error_t *err);

/* ---- confine.c ---- */
/* Drops capabilities to Docker's default set, sets no_new_privs, makes the process
 * non-dumpable and installs the default seccomp filter. */
int sbx__confine(sbx_error_t *err);
/* The setid guard of commands (see confine.c); 0 or -1. */
int sbx__confine_setid_guard(void);
/* The same plus the id guard, when host root's files are mapped (confine.c); 0 or -1. */
int sbx__confine_foreign_guard(void);
/* The sandbox's resource limits, every one of them the same whoever launches it (the CLI,
 * sbxd, a program linking libsbx): RLIMIT_NOFILE hard sbx__nofile_max() (commands get
 * SBX_NOFILE_CMD soft), no core dumps, an 8 MiB stack and locked-memory limit, Linux's
 * defaults for the per-user kernel resources, and no limit where a cgroup is the bound.
 * Needs host privilege (raising a hard limit): called before the user namespace is entered. */
#define SBX_NOFILE_MAX 524288
#define SBX_NOFILE_CMD 1024
/* One process of a sandbox may hold at most 1/SBX_NOFILE_SHARE of the host's file table
 * (fs.file-max, shared by every process on the host), never fewer than SBX_NOFILE_MIN. */
#define SBX_NOFILE_SHARE 64
#define SBX_NOFILE_MIN 4096
rlim_t sbx__nofile_max(void);
#define SBX_SIGPENDING 16384
int sbx__confine_rlimits(sbx_error_t *err);

/* ---- launch.c ---- */
/* The file in a sandbox's state folder where the launcher records its init (pid, start time)
 * and cgroups before reporting them: found by a destroy whose metadata never got them. */
#define SBX_LAUNCH_RECORD "launched"
/* `sbx-init launch`: reads a spec from fd, makes the sandbox, answers OK{PID} or ERR. */
int sbx__launch_main(int fd);

#endif
