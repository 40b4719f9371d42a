/* The walker under list_dir, glob and grep (search.h's walk rules): a depth-first walk over
 * directory fds, each directory read whole with getdents64, filtered (ignore list, type) and
 * sorted, entered with openat(O_NOFOLLOW) relative to its parent; path strings are only built
 * for reporting. The stack's slots and buffers are reused, so a walk allocates per depth
 * level, not per directory. It stops at its limit, its deadline, or when its caller goes
 * away, and records why (the answer is then truncated). */
#ifndef SBX_WALK_H
#define SBX_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "pathmatch.h"
#include "util.h"

#define SBX_SEARCH_MAX_DEPTH 256 /* directories this deep (root = 0) are not entered */

/* How list_dir, glob and grep open their root (flags as for open(2); returns an fd or -1 with
 * errno). open(2) by default; sbx-init installs one that resolves inside the sandbox's root and
 * refuses magic links (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so a root such as
 * /proc/self/fd/N, or a symlink planted to it, never reaches a descriptor sbx-init holds. Set it
 * once, before any thread searches. */
extern int (*sbx__search_open_root)(const char *path, int flags);

/* The calling thread's searches stop, as at their deadline, once the peer of this connected
 * socket hangs up (polled every 20 ms); -1 (the default) = none. sbx-init sets its client's
 * connection, so a search whose client gave up does not run on. */
void sbx__search_set_cancel_fd(int fd);

struct sbx_grep_pattern_s;
struct sbx_grep_matches_s;

/* LIST, GLOB, GREP: list_dir's, glob's and grep's walks (search.h's rules). VISIT: every entry
 * of every type, nothing ignored, each directory's entries in strcmp order, each given to
 * visit() before the walk enters it (directories down to max_depth, the root's children being
 * at 1; no other depth bound). */
typedef enum { SBX_WALK_LIST, SBX_WALK_GLOB, SBX_WALK_GREP, SBX_WALK_VISIT } sbx_walk_mode_t;

typedef struct {
  const char *name;
  size_t len;
  unsigned char type; /* DT_DIR or DT_REG */
} sbx_walk_entry_t;

/* One open directory on the walk stack. Slots are reused (with their buffers) as the walk goes
 * up and down, so a walk allocates per depth level, not per directory. */
typedef struct {
  int fd;
  size_t depth;    /* the root is 0 */
  size_t path_len; /* length of this directory's path in the walker's path buffer */
  sbx_walk_entry_t *ents;
  size_t n, ents_cap;
  size_t next; /* cursor for the descent */
  char *names; /* NUL-separated names */
  size_t names_len, names_cap;
} sbx_walk_frame_t;

typedef struct sbx_walker_s {
  sbx_walk_mode_t mode;
  int max_depth; /* SBX_WALK_LIST, SBX_WALK_VISIT: the caller's depth */
  bool include_dirs;
  sbx_pathpat_t *pat;            /* glob pattern, or grep's file filter; NULL = every file */
  struct sbx_grep_pattern_s *gp; /* grep */
  size_t limit;                  /* max_results + 1 (saturated) */
  uint64_t deadline_ms;

  char *path; /* base + "/" + relative path of the entry at hand */
  size_t path_cap;
  size_t base_len;

  sbx_walk_frame_t *frames;
  size_t nframes, frames_cap;
  bool *states; /* anchored pattern: (pat->n + 1) states per stack level */
  bool *tmp_states;

  char *dents;
  char *fbuf; /* grep: the file being searched */
  size_t fbuf_cap;

  size_t found;
  unsigned ops;
  int cancel_fd;          /* the caller's connection (sbx__search_set_cancel_fd), or -1 */
  uint64_t next_poll_ms;  /* when cancel_fd is polled next */
  int worker_fd;          /* in a grep worker: where matches go (grep_in_worker), else -1 */
  const char *worker_buf; /* in a grep worker: the buffer record offsets are relative to */
  bool stop;
  bool timed_out;
  bool incomplete; /* something could not be searched for lack of resources or depth */

  sbx_strv_t *out_strv;
  struct sbx_grep_matches_s *out_matches;
  /* SBX_WALK_GREP: searches one regular file (name in dir_fd, reported as path) */
  void (*grep_file)(struct sbx_walker_s *w, int dir_fd, const char *name, const char *path);
  /* SBX_WALK_VISIT: one entry (its name in dir_fd, its path); < 0 stops the walk */
  int (*visit)(struct sbx_walker_s *w, int dir_fd, const sbx_walk_entry_t *e, const char *path);
  void *arg; /* the visitor's */
} sbx_walker_t;

#define SBX_WALK_POLL_MS 20 /* how often the caller's fd is polled */

/* A walker of a mode, with a deadline (sbx__now_ms clock, 0 = none); the calling thread's
 * cancel fd (sbx__search_set_cancel_fd) is taken. The caller sets limit, pat and the outputs. */
void sbx__walker_init(sbx_walker_t *w, sbx_walk_mode_t mode, uint64_t deadline_ms);
void sbx__walker_fini(sbx_walker_t *w);
/* The reporting base: root without its trailing '/'s (or its first len bytes). */
void sbx__walker_set_base(sbx_walker_t *w, const char *root);
void sbx__walker_set_base_n(sbx_walker_t *w, const char *root, size_t len);
/* Walks the tree below rootfd (taken over). */
void sbx__walk_run(sbx_walker_t *w, int rootfd);
/* True (and the walk stopped, as timed out) once the deadline has passed or the caller has
 * gone away; the caller's fd is polled at most every SBX_WALK_POLL_MS. */
bool sbx__walk_deadline_passed(sbx_walker_t *w);
/* The same, looked at every 256 calls. */
bool sbx__walk_deadline_tick(sbx_walker_t *w);
/* EMFILE, ENFILE, ENOMEM: what makes an answer incomplete rather than an entry unreadable. */
bool sbx__walk_resource_errno(int e);
/* max_results + 1, saturated. */
size_t sbx__walk_limit_plus_one(size_t max_results);
/* Opens a list/glob root (a symlink at the root is followed); errors as search.h says. */
int sbx__walk_open_root_dir(const char *root, sbx_error_t *err);
/* limit+1: drops the extra result; returns whether the answer is truncated. */
bool sbx__walk_finish_strv(sbx_walker_t *w, sbx_strv_t *out, size_t max_results);

#endif
