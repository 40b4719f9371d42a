/* The opensandbox backend: sbx sandboxes on a remote OpenSandbox deployment (seed 000).
 * api.c speaks the lifecycle and execd HTTP APIs, backend.c maps them onto the contract,
 * search.c answers list_dir/glob/grep exactly as the linux backend does, sync.c copies
 * /mnt/user-data/outputs home on release. */
#ifndef SBX_OSB_H
#define SBX_OSB_H

#include <jansson.h>
#include <sbx/sbx.h>

#include "../../lib/backend.h"
#include "../../lib/log.h"
#include "http.h"

/* One remote sandbox as a client sees it. */
struct osb_remote {
  const struct sbx_config *cfg;
  char *id;        /* the server's sandbox id */
  char *execd;     /* execd base URL, scheme included, no trailing '/' */
  sbx_strv_t hdrs; /* headers for execd calls ("Name: value") */
};

void osb_remote_free(struct osb_remote *r);
/* Rebuilds the remote of an instance from its metadata. */
int osb_remote_load(struct sbx_instance *in, struct osb_remote *r, sbx_error_t *err);
/* Records r in the instance's metadata (remote_id, backend_json). */
void osb_remote_store(struct sbx_instance *in, const struct osb_remote *r);

/* Lifecycle API */
int osb_create(const struct sbx_config *cfg, const char *user, const char *thread, char **id,
               sbx_error_t *err);
int osb_endpoint(struct osb_remote *r, int port, sbx_error_t *err);
int osb_delete(const struct sbx_config *cfg, const char *id, sbx_error_t *err);
/* Extends the remote's expiry to now + seconds (no-op when sandbox_timeout is 0). A 404/410 is
 * terminal (SBX_E_BACKEND). */
int osb_renew(const struct osb_remote *r, double seconds, sbx_error_t *err);
int osb_pause(const struct osb_remote *r, bool paused, sbx_error_t *err);

/* execd API */
int osb_ping(const struct osb_remote *r, double timeout_s, sbx_error_t *err);

struct osb_cmd {
  const char *command;
  const char *cwd;
  const char *const *env; /* "KEY=VALUE" */
  size_t n_env;
  uint64_t timeout_ms; /* 0 = none */
  bool background;
  /* output */
  int (*on_output)(void *arg, int stream, const char *data, size_t len);
  void *arg;
  uint64_t cap; /* bytes kept per stream */
};

struct osb_cmd_result {
  char *id;
  sbx_buf_t out, err;
  uint64_t out_total, err_total;
  bool has_code;
  int exit_code;
  bool timed_out;   /* `context deadline exceeded` without a numeric code */
  char *error_text; /* an error event that carried no exit code: "Name: value" */
};
void osb_cmd_result_free(struct osb_cmd_result *res);
/* Runs a command and collects its event stream. Command-path 404/410 and a broken stream are
 * SBX_E_BACKEND (the remote is gone). */
int osb_command(const struct osb_remote *r, const struct osb_cmd *c, struct osb_cmd_result *res,
                sbx_error_t *err);
int osb_interrupt(const struct osb_remote *r, const char *cmd_id, sbx_error_t *err);

/* Files. A 404 here is an ordinary SBX_E_NOT_FOUND. */
int osb_upload(const struct osb_remote *r, const char *path, const void *data, size_t len, int fd,
               unsigned mode, sbx_error_t *err);
/* Streams path to sink; more than max bytes (0 = no cap) is SBX_E_TOO_LARGE. */
int osb_download(const struct osb_remote *r, const char *path, uint64_t max,
                 int (*sink)(void *, const char *, size_t), void *arg, int (*progress)(void *),
                 double timeout_s, sbx_error_t *err);
/* How deep a listing goes (execd servers cap the depth; 64 is what every one accepts). */
#define OSB_LIST_DEPTH 64

/* GET /directories/list: the FileInfo array (body capped at max_body bytes: SBX_E_TOO_LARGE). */
int osb_list(const struct osb_remote *r, const char *path, int depth, size_t max_body,
             json_t **infos, sbx_error_t *err);

/* search.c */
int osb_list_dir(struct osb_remote *r, const char *path, int depth, sbx_strv_t *out,
                 sbx_error_t *err);
int osb_glob(struct osb_remote *r, const char *path, const char *pattern, bool include_dirs,
             size_t max, sbx_strv_t *out, bool *truncated, sbx_error_t *err);
int osb_grep(struct osb_remote *r, const char *path, const char *pattern,
             const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n, bool *truncated,
             sbx_error_t *err);

/* sync.c */
struct osb_sync_limits {
  size_t max_files;   /* 2000 */
  size_t max_listing; /* 512 KiB */
  uint64_t max_total; /* 512 MiB */
  uint64_t max_file;  /* 100 MiB */
  double deadline_s;  /* 120 */
};
struct osb_sync_report {
  size_t synced, skipped, downloaded_files;
  uint64_t downloaded_bytes;
  char *truncated_reason; /* NULL if the pass was complete */
};
/* Copies regular files of /mnt/user-data/outputs into <user_data>/outputs (seed 000's rules). */
int osb_sync_outputs(struct osb_remote *r, const char *user_data, const struct osb_sync_limits *lim,
                     struct osb_sync_report *rep, sbx_error_t *err);
void osb_sync_report_free(struct osb_sync_report *rep);

/* Shared with the tests and the fuzzers: is one output path component portable and safe? */
bool osb_sync_component_ok(const char *c, size_t len);
bool osb_sync_unicode_available(void);

#endif
