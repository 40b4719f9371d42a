/* sbx configuration: the `sandbox:` block of a YAML file uses DeerFlow's keys and meanings
 * (docs/configuration.md); `sbxd:` holds the server's own settings. */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sbx/error.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sbx_mount {
  char *host_path;      /* absolute, must exist */
  char *container_path; /* absolute, not at or under /mnt/user-data */
  bool read_only;
};

/* sbxd's local image store: a name clients may ask for and the image it stands for. */
struct sbx_image_alias {
  char *name;   /* e.g. "python:3.11" */
  char *target; /* "host" (the only image the linux backend has) */
};

struct sbx_env_var {
  char *key;   /* ^[A-Za-z_][A-Za-z0-9_]*$ */
  char *value; /* already resolved ($VAR taken from the process environment at load) */
  bool secret; /* came from $VAR: masked by `config show` */
};

/* sandbox.registries: how to reach one registry (docs/images.md, "Pull"). */
struct sbx_registry {
  char *host;                /* "ghcr.io", "10.0.0.5:5000" */
  char *username, *password; /* NULL when not given; the password may come from $VAR */
  bool insecure;             /* plain http */
};

struct sbx_config {
  char *path; /* the file it came from, NULL for defaults */

  /* sandbox: (DeerFlow keys) */
  char *use;    /* backend: "linux" (default) or "opensandbox"; DeerFlow class paths map too */
  char *image;  /* "host" (default for linux) or a name in the local image store */
  int replicas; /* soft cap over active + warm, default 3, > 0 */
  int64_t idle_timeout;        /* seconds, default 600; 0 disables reaping */
  double bash_command_timeout; /* seconds, default 600, > 0 */
  struct sbx_env_var *environment;
  size_t n_environment;
  uint64_t memory_mib; /* default 1024; 0 = no limit */
  double cpus;         /* default 0 = no limit */
  int64_t pids;        /* default 1024; 0 = no limit */
  char *network;       /* "none" (default), "egress" (docs/network.md) or "host" */
  struct sbx_mount *mounts;
  size_t n_mounts;
  uint64_t output_max_bytes;          /* per stream kept by execute_command, default 10 MiB */
  int64_t bash_output_max_chars;      /* DeerFlow tool-layer caps, default 20000 / 50000 / 20000 */
  int64_t read_file_output_max_chars; /* (0 = no truncation) */
  int64_t ls_output_max_chars;
  uint64_t tmp_size_mib;            /* writable /tmp inside, default 1024 */
  uint64_t home_size_mib;           /* writable home inside, default 256 */
  uint64_t user_data_size_mib;      /* size cap of a thread folder (an ext4 image), 0 = none */
  uint64_t image_layer_max_mib;     /* image import: bytes of one layer (or archive), 16384 */
  uint64_t image_layer_max_entries; /* image import: entries of one layer, 1000000 */
  uint64_t image_max_mib;       /* image import, pull, commit: bytes of the whole image, 32768 */
  uint64_t image_min_free_mib;  /* ... the free space they keep on the store's, 1024 (0 none) */
  int64_t health_check_timeout; /* seconds, default 10 */
  /* BoxLite's key: a warm sandbox last used less than this many seconds ago is reclaimed with a
   * ping of its init instead of running `true` (default 0: always run it) */
  double health_check_skip_seconds;
  /* sandboxes started ahead of time, each taken by the next create (default 0: none) */
  int spares;
  /* size cap of an image sandbox's writable upper (an ext4 image in its state folder), 0 = none */
  uint64_t disk_mib;
  /* cgroups of the linux backend (docs/hosts.md): "auto" (default), "cgroupfs", "systemd" or
   * "none" (no
   * cgroups: no memory, process or CPU limits); cgroup_required (default true) refuses to start
   * a sandbox where no cgroup can be made, false runs it without one and warns */
  char *cgroup_manager;
  bool cgroup_required;
  char *cgroup_slice; /* the systemd manager's slice for sandboxes, default "sbx.slice" */
  /* linux: host root's files in an idmapped folder whose top is not root's are 65534 inside
   * and root inside may change them (default true); commands then may not take uid/gid 65534
   * or set setuid/setgid bits (docs/security.md). false: they stay unmapped, and a sandbox of
   * the folders libsbx makes has no such guard */
  bool map_host_root;
  /* image pulls: per-registry credentials and plain http, and mirrors tried first
   * ("HOST[:PORT]" for docker.io, "DOMAIN=HOST[:PORT]" for another) */
  struct sbx_registry *registries;
  size_t n_registries;
  char **registry_mirrors;
  size_t n_registry_mirrors;

  /* opensandbox backend (seed 000) */
  char *api_key;           /* from the file, or OPEN_SANDBOX_API_KEY; never printed */
  char *domain;            /* or OPEN_SANDBOX_DOMAIN; default localhost:8080 */
  char *protocol;          /* http (default) or https */
  double request_timeout;  /* 30 */
  double ready_timeout;    /* 30 */
  bool use_server_proxy;   /* false */
  int64_t sandbox_timeout; /* 14400; 0 = explicit cleanup, no renewal */

  /* sbxd: */
  char *listen;         /* default 127.0.0.1:8080 */
  char *server_api_key; /* or OPEN_SANDBOX_API_KEY */
  char **volume_roots;  /* host directories that `host` volumes may come from */
  size_t n_volume_roots;
  int64_t max_sandbox_timeout;    /* 86400 */
  struct sbx_image_alias *images; /* image names accepted besides "host" */
  size_t n_images;
  double pty_grace;         /* 60: seconds a PTY session outlives its WebSocket */
  int64_t pty_max_sessions; /* 16: PTY sessions per sandbox */
  int64_t pty_buffer;       /* 1 MiB: output kept per PTY session for replay */

  /* sandbox.network_policy (network egress): the initial policy as JSON ({defaultAction,
   * egress}); NULL: allow all but the always-denied ranges (docs/network.md) */
  char *network_policy;

  /* hard limits (docs/configuration.md, "Limits"); 0 turns one off */
  int max_sandboxes;          /* sandbox.max_sandboxes: live sandboxes in a home, default 64 */
  int max_sandboxes_per_user; /* sandbox.max_sandboxes_per_user: of one user, default 32 */
  /* sandbox.memory_overcommit: the live sandboxes' memory limits may add up to this many times
   * the host's RAM (default 4) */
  double memory_overcommit;
  /* sbxd's connections (docs/sbxd.md, "Limits") */
  int64_t max_connections;             /* sbxd.max_connections, default 1024 */
  int64_t max_connections_per_address; /* sbxd.max_connections_per_address, default 256 */
  int64_t connections_reserve;         /* sbxd.connections_reserve, default 64 */
  double head_timeout;                 /* sbxd.head_timeout: seconds, default 10 */
};

/* Defaults for everything. */
SBX_PUBLIC struct sbx_config *sbx_config_new_default(void);
/* Loads path (YAML). Unknown keys, wrong types, negative numbers, unknown backends, bad env keys
 * and missing $VARs are errors naming the file, line and key; nothing is returned then. */
SBX_PUBLIC struct sbx_config *sbx_config_load(const char *path, sbx_error_t *err);
/* Loads from a string (for tests and fuzzing); name is used in messages. */
SBX_PUBLIC struct sbx_config *sbx_config_load_string(const char *name, const char *yaml, size_t len,
                                                     sbx_error_t *err);
SBX_PUBLIC void sbx_config_free(struct sbx_config *cfg);
/* The effective values as YAML, secrets masked. Caller frees. */
SBX_PUBLIC char *sbx_config_dump(const struct sbx_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
