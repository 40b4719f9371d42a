/* The fd-relative walker under list_dir, glob and grep: see walk.h. */
#include "walk.h"
#include "ignore.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DENTS_BUF_SIZE (64 * 1024)
#define DEADLINE_EVERY 256

size_t sbx__walk_limit_plus_one(size_t max_results)
{
  return max_results == SIZE_MAX ? SIZE_MAX : max_results + 1;
}

static _Thread_local int search_cancel_fd = -1;

void sbx__search_set_cancel_fd(int fd)
{
  search_cancel_fd = fd;
}

void sbx__walker_init(sbx_walker_t *w, sbx_walk_mode_t mode, uint64_t deadline_ms)
{
  memset(w, 0, sizeof *w);
  w->mode = mode;
  w->deadline_ms = deadline_ms;
  w->cancel_fd = search_cancel_fd;
  w->worker_fd = -1;
}

/* True once the peer of a connected socket has closed it (or the fd is bad). POLLHUP, not
 * POLLRDHUP: a client that only shut down its writing side still reads the answer. */
static bool peer_gone(int fd)
{
  struct pollfd pfd = {.fd = fd, .events = 0};
  return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* True (and the walk stopped, as timed out) once the deadline has passed or the caller has gone
 * away; the caller's fd is polled at most every SBX_WALK_POLL_MS. */
bool sbx__walk_deadline_passed(sbx_walker_t *w)
{
  if (w->deadline_ms == 0 && w->cancel_fd < 0)
    return false;
  uint64_t now = sbx__now_ms();
  bool over = w->deadline_ms != 0 && now >= w->deadline_ms;
  if (!over && w->cancel_fd >= 0 && now >= w->next_poll_ms) {
    w->next_poll_ms = now + SBX_WALK_POLL_MS;
    over = peer_gone(w->cancel_fd);
  }
  if (over) {
    w->timed_out = true;
    w->stop = true;
  }
  return over;
}

bool sbx__walk_deadline_tick(sbx_walker_t *w)
{
  if (++w->ops % DEADLINE_EVERY != 0)
    return false;
  return sbx__walk_deadline_passed(w);
}

bool sbx__walk_resource_errno(int e)
{
  return e == EMFILE || e == ENFILE || e == ENOMEM;
}

static void path_reserve(sbx_walker_t *w, size_t need)
{
  if (need + 1 <= w->path_cap)
    return;
  size_t cap = w->path_cap ? w->path_cap : 256;
  while (cap < need + 1)
    cap *= 2;
  w->path = xrealloc(w->path, cap);
  w->path_cap = cap;
}

/* Puts dir's path + "/" + name in w->path and returns its length. */
static size_t path_set_entry(sbx_walker_t *w, const sbx_walk_frame_t *dir,
                             const sbx_walk_entry_t *e)
{
  size_t len = dir->path_len + 1 + e->len;
  path_reserve(w, len + 1);
  w->path[dir->path_len] = '/';
  memcpy(w->path + dir->path_len + 1, e->name, e->len);
  w->path[len] = '\0';
  return len;
}

static bool *frame_states(sbx_walker_t *w, size_t level)
{
  return w->states + level * (w->pat->n + 1);
}

static int cmp_entry_name(const void *a, const void *b)
{
  return strcmp(((const sbx_walk_entry_t *) a)->name, ((const sbx_walk_entry_t *) b)->name);
}

/* Orders entries as their final list_dir strings sort: a directory compares as "name/". Then
 * a pre-order walk emits entries already in strcmp order of the reported paths. */
static int cmp_entry_listkey(const void *a, const void *b)
{
  const sbx_walk_entry_t *x = a, *y = b;
  for (size_t i = 0;; i++) {
    int cx =
        i < x->len ? (unsigned char) x->name[i] : (i == x->len && x->type == DT_DIR ? '/' : -1);
    int cy =
        i < y->len ? (unsigned char) y->name[i] : (i == y->len && y->type == DT_DIR ? '/' : -1);
    if (cx != cy)
      return cx < cy ? -1 : 1;
    if (cx == -1)
      return 0;
  }
}

/* Reads, filters (ignore list, type) and sorts a directory's entries into f. */
static void frame_read(sbx_walker_t *w, sbx_walk_frame_t *f)
{
  f->n = 0;
  f->next = 0;
  f->names_len = 0;
  for (;;) {
    ssize_t r = getdents64(f->fd, w->dents, DENTS_BUF_SIZE);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (sbx__walk_resource_errno(errno))
        w->incomplete = true;
      break; /* unreadable: keep what was read */
    }
    if (r == 0)
      break;
    for (size_t off = 0; off < (size_t) r;) {
      const struct dirent64 *d = (const void *) (w->dents + off);
      off += d->d_reclen;
      const char *name = d->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
        continue;
      size_t len = strlen(name);
      bool every = w->mode == SBX_WALK_VISIT; /* every name, of every type */
      if (!every && sbx__search_ignored_segment(name, len))
        continue;
      unsigned char type = d->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (fstatat(f->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
          continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      if (!every && type != DT_DIR && type != DT_REG)
        continue; /* symlinks, devices, fifos, sockets */
      if (f->names_len + len + 1 > f->names_cap) {
        size_t cap = f->names_cap ? f->names_cap : 4096;
        while (cap < f->names_len + len + 1)
          cap *= 2;
        f->names = xrealloc(f->names, cap);
        f->names_cap = cap;
      }
      if (f->n == f->ents_cap) {
        f->ents_cap = f->ents_cap ? f->ents_cap * 2 : 64;
        f->ents = xreallocarray(f->ents, f->ents_cap, sizeof *f->ents);
      }
      memcpy(f->names + f->names_len, name, len + 1);
      /* an offset for now: names may still move */
      f->ents[f->n].name = (const char *) (uintptr_t) f->names_len;
      f->ents[f->n].len = len;
      f->ents[f->n].type = type;
      f->n++;
      f->names_len += len + 1;
    }
  }
  for (size_t i = 0; i < f->n; i++)
    f->ents[i].name = f->names + (uintptr_t) f->ents[i].name;
  if (f->n > 1)
    qsort(f->ents, f->n, sizeof *f->ents,
          w->mode == SBX_WALK_LIST ? cmp_entry_listkey : cmp_entry_name);
}

/* Pushes an open directory fd (taken over) as a new stack level. */
static sbx_walk_frame_t *frame_push(sbx_walker_t *w, int fd, size_t depth, size_t path_len)
{
  if (w->nframes == w->frames_cap) {
    size_t old = w->frames_cap;
    w->frames_cap = old ? old * 2 : 16;
    w->frames = xreallocarray(w->frames, w->frames_cap, sizeof *w->frames);
    memset(w->frames + old, 0, (w->frames_cap - old) * sizeof *w->frames);
  }
  sbx_walk_frame_t *f = &w->frames[w->nframes++];
  f->fd = fd;
  f->depth = depth;
  f->path_len = path_len;
  frame_read(w, f);
  return f;
}

static void frame_pop(sbx_walker_t *w)
{
  sbx_walk_frame_t *f = &w->frames[--w->nframes];
  if (f->fd >= 0)
    close(f->fd);
  f->fd = -1;
  f->n = 0;
  /* Keep the slot's buffers for the next directory at this depth unless they grew large. */
  if (f->names_cap > 1024 * 1024) {
    free(f->names);
    f->names = NULL;
    f->names_cap = 0;
    free(f->ents);
    f->ents = NULL;
    f->ents_cap = 0;
  }
}

void sbx__walker_fini(sbx_walker_t *w)
{
  while (w->nframes > 0)
    frame_pop(w);
  for (size_t i = 0; i < w->frames_cap; i++) {
    free(w->frames[i].names);
    free(w->frames[i].ents);
  }
  free(w->frames);
  free(w->states);
  free(w->tmp_states);
  free(w->path);
  free(w->dents);
  free(w->fbuf);
}

/* Records one result; stops the walk at limit (max_results + 1). */
static void emit_path(sbx_walker_t *w, size_t len, bool slash)
{
  char *s = xmalloc(len + 2);
  memcpy(s, w->path, len);
  if (slash)
    s[len++] = '/';
  s[len] = '\0';
  sbx__strv_push_owned(w->out_strv, s);
  if (++w->found >= w->limit)
    w->stop = true;
}

/* Does entry e of the directory at stack level match the glob pattern / grep filter? */
static bool entry_matches(sbx_walker_t *w, size_t level, const sbx_walk_entry_t *e)
{
  if (w->pat == NULL)
    return true;
  if (!w->pat->anchored)
    return sbx__pathpat_match_basename(w->pat, e->name);
  return sbx__pathpat_step(w->pat, frame_states(w, level), e->name, w->tmp_states) &&
         w->tmp_states[w->pat->n];
}

/* --- the walk ------------------------------------------------------------------------------- */

/* glob / grep: what a directory contributes before its subdirectories are entered. */
static void dir_visit(sbx_walker_t *w, size_t level)
{
  if (w->mode == SBX_WALK_GLOB && w->include_dirs) {
    for (size_t i = 0; i < w->frames[level].n && !w->stop; i++) {
      const sbx_walk_frame_t *f = &w->frames[level];
      const sbx_walk_entry_t *e = &f->ents[i];
      if (e->type != DT_DIR || sbx__walk_deadline_tick(w))
        continue;
      if (entry_matches(w, level, e))
        emit_path(w, path_set_entry(w, f, e), false);
    }
  }
  for (size_t i = 0; i < w->frames[level].n && !w->stop; i++) {
    const sbx_walk_frame_t *f = &w->frames[level];
    const sbx_walk_entry_t *e = &f->ents[i];
    if (e->type != DT_REG)
      continue;
    if (w->mode == SBX_WALK_GREP ? sbx__walk_deadline_passed(w) : sbx__walk_deadline_tick(w))
      break;
    if (!entry_matches(w, level, e))
      continue;
    size_t len = path_set_entry(w, f, e);
    if (w->mode == SBX_WALK_GLOB)
      emit_path(w, len, false);
    else
      w->grep_file(w, f->fd, e->name, w->path);
  }
}

/* Opens subdirectory e of the top frame and pushes it. */
static void descend(sbx_walker_t *w, size_t level, const sbx_walk_entry_t *e)
{
  const sbx_walk_frame_t *f = &w->frames[level];
  if (f->depth + 1 >= SBX_SEARCH_MAX_DEPTH && w->mode != SBX_WALK_VISIT) {
    w->incomplete = true;
    return;
  }
  if (sbx__walk_deadline_passed(w))
    return;
  int fd = openat(f->fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (sbx__walk_resource_errno(errno))
      w->incomplete = true;
    return;
  }
  size_t path_len = path_set_entry(w, f, e);
  size_t depth = f->depth + 1;
  frame_push(w, fd, depth, path_len);
  if (w->mode != SBX_WALK_LIST && w->mode != SBX_WALK_VISIT)
    dir_visit(w, w->nframes - 1);
}

void sbx__walk_run(sbx_walker_t *w, int rootfd)
{
  w->dents = xmalloc(DENTS_BUF_SIZE);
  if (w->pat && w->pat->anchored && !w->pat->never) {
    w->states = xmalloc((size_t) (SBX_SEARCH_MAX_DEPTH + 1) * (w->pat->n + 1));
    w->tmp_states = xmalloc(w->pat->n + 1);
    sbx__pathpat_start(w->pat, frame_states(w, 0));
  }
  frame_push(w, rootfd, 0, w->base_len);
  if (w->mode != SBX_WALK_LIST && w->mode != SBX_WALK_VISIT)
    dir_visit(w, 0);
  while (w->nframes > 0 && !w->stop) {
    size_t level = w->nframes - 1;
    sbx_walk_frame_t *f = &w->frames[level];
    if (f->next >= f->n) {
      frame_pop(w);
      continue;
    }
    const sbx_walk_entry_t *e = &f->ents[f->next++];
    if (w->mode == SBX_WALK_VISIT) {
      size_t len = path_set_entry(w, f, e);
      (void) len;
      if (w->visit(w, f->fd, e, w->path) < 0) {
        w->stop = true;
        break;
      }
      if (!w->stop && e->type == DT_DIR && f->depth + 1 < (size_t) w->max_depth)
        descend(w, level, e);
      continue;
    }
    if (w->mode == SBX_WALK_LIST) {
      if (sbx__walk_deadline_tick(w))
        break;
      emit_path(w, path_set_entry(w, f, e), e->type == DT_DIR);
      if (!w->stop && e->type == DT_DIR && f->depth + 1 < (size_t) w->max_depth)
        descend(w, level, e);
      continue;
    }
    if (e->type != DT_DIR)
      continue;
    if (w->states) {
      /* the states after this directory, in the next level's slot; prune dead branches */
      if (!sbx__pathpat_step(w->pat, frame_states(w, level), e->name, frame_states(w, level + 1)))
        continue;
    }
    descend(w, level, e);
  }
}

static int open_root_default(const char *path, int flags)
{
  return open(path, flags);
}

int (*sbx__search_open_root)(const char *path, int flags) = open_root_default;

/* Opens a list/glob root: following a symlink at the root is fine. */
int sbx__walk_open_root_dir(const char *root, sbx_error_t *err)
{
  if (root == NULL || root[0] == '\0')
    return sbx__error_setf(err, ENOENT, SBX_E_NOT_FOUND, "directory not found: %s",
                           root ? root : "");
  int fd = sbx__search_open_root(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    return fd;
  int e = errno;
  if (e == ENOENT)
    return sbx__error_setf(err, e, SBX_E_NOT_FOUND, "directory not found: %s", root);
  if (e == ENOTDIR) {
    struct stat st;
    if (stat(root, &st) == 0 && !S_ISDIR(st.st_mode))
      return sbx__error_setf(err, e, SBX_E_NOT_DIR, "not a directory: %s", root);
    return sbx__error_setf(err, ENOENT, SBX_E_NOT_FOUND, "directory not found: %s", root);
  }
  return sbx__make_error(err, e, sbx__errno_kind(e), "cannot open directory %s", root);
}

/* The reporting prefix: root without trailing '/' ("/" itself becomes "", so that joining with
 * "/" + name gives "/name"). */
void sbx__walker_set_base(sbx_walker_t *w, const char *root)
{
  size_t len = strlen(root);
  while (len > 0 && root[len - 1] == '/')
    len--;
  sbx__walker_set_base_n(w, root, len);
}

void sbx__walker_set_base_n(sbx_walker_t *w, const char *root, size_t len)
{
  path_reserve(w, len + 1);
  memcpy(w->path, root, len);
  w->path[len] = '\0';
  w->base_len = len;
}

/* limit+1: drop the extra result, and report truncation. */
bool sbx__walk_finish_strv(sbx_walker_t *w, sbx_strv_t *out, size_t max_results)
{
  bool truncated = w->timed_out || w->incomplete;
  if (w->found > max_results) {
    truncated = true;
    while (w->found > max_results) {
      free(out->v[--out->n]);
      out->v[out->n] = NULL;
      w->found--;
    }
  }
  return truncated;
}
