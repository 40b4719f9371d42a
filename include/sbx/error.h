/* sbx error model (crun's): a function that can fail takes `sbx_error_t *err` last, returns
 * >= 0 (or non-NULL) on success and leaves *err alone; on failure it returns a negative value
 * and sets *err to an allocated error that says what failed and where. */
#ifndef SBX_ERROR_H
#define SBX_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef SBX_PUBLIC
#define SBX_PUBLIC __attribute__((visibility("default")))
#endif

/* What kind of failure; front-ends map it (HTTP status, exit code). Values are stable: they
 * travel in sbx-init's protocol. */
enum sbx_error_kind {
  SBX_E_INTERNAL = 1, /* a bug or an unexpected system failure */
  SBX_E_INVALID,      /* bad input from the caller: nothing was changed */
  SBX_E_NOT_FOUND,    /* a path, sandbox or scope that does not exist */
  SBX_E_DENIED,       /* a path outside what the contract allows (traversal, prefix) */
  SBX_E_TOO_LARGE,    /* a size cap was hit (download 100 MiB, frame, body) */
  SBX_E_NOT_DIR,      /* a directory was required */
  SBX_E_IS_DIR,       /* a file was required */
  SBX_E_NOT_TEXT,     /* a file that is not UTF-8 text */
  SBX_E_TIMEOUT,      /* a deadline passed */
  SBX_E_IO,           /* an ordinary I/O failure inside the sandbox (disk full, EACCES...) */
  SBX_E_BACKEND,      /* the sandbox itself is broken (dead init, broken channel): evict it */
  SBX_E_CONFIG,       /* bad configuration */
  SBX_E_UNSUPPORTED,  /* not available on this backend or host */
  SBX_E_SHUTDOWN,     /* the provider was shut down */
  SBX_E_EXISTS,       /* something already exists */
  SBX_E_CONFLICT,     /* wrong state for the request (e.g. not paused) */
  SBX_E_BUSY,         /* a resource is in use */
  SBX_E_LIMIT,        /* a configured limit (sandboxes, memory) would be passed: try later */
  SBX_E_KIND_MAX
};

struct sbx_error_s {
  int status; /* errno-style detail, 0 if none */
  int kind;   /* enum sbx_error_kind */
  char *msg;  /* one line: what failed and where */
};
typedef struct sbx_error_s *sbx_error_t;

SBX_PUBLIC void sbx_error_release(sbx_error_t *err);
SBX_PUBLIC const char *sbx_error_kind_name(int kind);

#ifdef __cplusplus
}
#endif
#endif
