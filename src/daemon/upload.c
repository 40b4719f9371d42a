/* execd's POST /files/upload: multipart/form-data of metadata and file parts, streamed.
 *
 * The multipart parser hands each file part's bytes to a socketpair read by a worker thread
 * that runs sbx_write_file_mode (an atomic replace inside the sandbox), so a file of any size
 * passes through in bounded memory. If the upload is cut short (client gone, malformed body)
 * the partial file must not be committed: the library commits on EOF and discards on a read
 * error, so the stream is aborted by closing our end with unread data queued on it, which makes
 * the worker's next read fail with ECONNRESET instead of returning EOF. A file part that comes
 * before its metadata is spooled to an unnamed file in sbxd's home until the metadata arrives. */
#include "upload.h"
#include "ctx.h"
#include "multipart.h"
#include "registry.h"
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#define META_MAX (64u << 10)

struct writer {
  pthread_t thread;
  int rd, wr;
  struct box *b;
  char *path;
  unsigned mode;
  char *owner, *group;
  int rc;
  sbx_error_t err;
  bool broken; /* our writes failed: the worker stopped reading */
};

static void *writer_main(void *arg)
{
  struct writer *w = arg;
  w->rc = sbx_write_file_mode(w->b->sb, w->path, NULL, 0, w->rd, w->mode, &w->err);
  if (w->rc == 0 && (w->owner || w->group))
    w->rc = sbx_chmod(w->b->sb, w->path, 0, w->owner, w->group, &w->err);
  /* unblock a feeder still writing: its sends now fail instead of waiting for room */
  shutdown(w->rd, SHUT_RD);
  return NULL;
}

struct meta {
  char *path;
  unsigned mode;
  char *owner, *group;
};

struct upload {
  struct box *b;
  struct sbxd_mp mp;
  int part; /* 0 ignored, 1 metadata, 2 file */
  sbx_buf_t meta_buf;
  struct meta *metas;
  size_t n_metas, n_files;
  int *spool; /* a file part that came before its metadata, by file index (-1: none) */
  size_t n_spool;
  int spool_fd;
  struct writer *w;
  bool failed;
  unsigned status;
  char *code, *msg;
};

static void up_fail(struct upload *u, unsigned status, const char *code, char *msg)
{
  if (u->failed) {
    free(msg);
    return;
  }
  u->failed = true;
  u->status = status;
  u->code = xstrdup(code);
  u->msg = msg;
}

static void up_fail_lib(struct upload *u, sbx_error_t *err, const char *path)
{
  int kind = (*err)->kind;
  unsigned status = kind == SBX_E_NOT_FOUND ? 404 : sbxd_kind_status(kind);
  if (status < 400)
    status = 500;
  up_fail(u, status, status < 500 ? "INVALID_FILE" : "RUNTIME_ERROR",
          xasprintf("error writing %s: %s", path, (*err)->msg));
  sbx_error_release(err);
}

static void writer_free(struct writer *w)
{
  if (w->rd >= 0)
    close(w->rd);
  if (w->wr >= 0)
    close(w->wr);
  box_put(w->b);
  sbx_error_release(&w->err);
  free(w->path);
  free(w->owner);
  free(w->group);
  free(w);
}

static struct writer *writer_start(struct upload *u, const struct meta *m)
{
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return NULL;
  struct writer *w = xzalloc(sizeof *w);
  w->rd = sv[0];
  w->wr = sv[1];
  w->b = box_ref(u->b);
  w->path = xstrdup(m->path);
  w->mode = m->mode;
  w->owner = m->owner ? xstrdup(m->owner) : NULL;
  w->group = m->group ? xstrdup(m->group) : NULL;
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    writer_free(w);
    return NULL;
  }
  return w;
}

/* Ends the current file: commit (EOF) or abort (a read error in the worker). */
static int writer_finish(struct writer *w, bool commit)
{
  if (!commit)
    (void) !send(w->rd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(w->wr);
  w->wr = -1;
  pthread_join(w->thread, NULL);
  return commit ? w->rc : -1;
}

static void meta_free(struct meta *m)
{
  free(m->path);
  free(m->owner);
  free(m->group);
}

/* Writes a spooled file now that its metadata is known. */
static void write_spooled(struct upload *u, size_t idx)
{
  int fd = u->spool[idx];
  u->spool[idx] = -1;
  const struct meta *m = &u->metas[idx];
  sbx_error_t err = NULL;
  if (u->failed) {
    close(fd);
    return;
  }
  if (lseek(fd, 0, SEEK_SET) < 0 ||
      sbx_write_file_mode(u->b->sb, m->path, NULL, 0, fd, m->mode, &err) < 0 ||
      ((m->owner || m->group) && sbx_chmod(u->b->sb, m->path, 0, m->owner, m->group, &err) < 0)) {
    if (err)
      up_fail_lib(u, &err, m->path);
    else
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("spool: %s", strerror(errno)));
  }
  close(fd);
}

static int on_part_begin(void *arg, const struct sbxd_mp_part *p)
{
  struct upload *u = arg;
  u->part = 0;
  if (u->failed || p->name == NULL)
    return 0;
  if (strcmp(p->name, "metadata") == 0) {
    u->part = 1;
    u->meta_buf.len = 0;
    return 0;
  }
  if (strcmp(p->name, "file") != 0)
    return 0;
  u->part = 2;
  size_t idx = u->n_files++;
  if (idx < u->n_metas) {
    u->w = writer_start(u, &u->metas[idx]);
    if (u->w == NULL)
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot start a writer: %s", strerror(errno)));
    return 0;
  }
  /* the file came before its metadata: keep it aside until the metadata arrives */
  u->spool_fd = open(srv.home, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (u->spool_fd < 0)
    up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot spool the upload: %s", strerror(errno)));
  return 0;
}

static int on_part_data(void *arg, const char *data, size_t len)
{
  struct upload *u = arg;
  if (u->failed)
    return 0;
  if (u->part == 1) {
    if (u->meta_buf.len + len > META_MAX) {
      up_fail(u, 400, "INVALID_FILE_METADATA",
              xasprintf("metadata is larger than %u bytes", META_MAX));
      return 0;
    }
    sbx__buf_append(&u->meta_buf, data, len);
  } else if (u->part == 2 && u->w && !u->w->broken) {
    if (sbxd_send_all(u->w->wr, data, len, -1) < 0)
      u->w->broken = true; /* the writer failed; its error is reported at the part's end */
  } else if (u->part == 2 && u->spool_fd >= 0) {
    if (sbx__write_all(u->spool_fd, data, len) < 0)
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot spool the upload: %s", strerror(errno)));
  }
  return 0;
}

static int parse_meta(struct upload *u, struct meta *m)
{
  memset(m, 0, sizeof *m);
  json_error_t je;
  json_auto_t *j = json_loadb(u->meta_buf.data ? u->meta_buf.data : "", u->meta_buf.len, 0, &je);
  const char *path = json_string_value(json_object_get(j, "path"));
  json_t *mode = json_object_get(j, "mode"), *o = json_object_get(j, "owner"),
         *gr = json_object_get(j, "group");
  const char *bad = NULL;
  if (!json_is_object(j))
    bad = "metadata must be a JSON object";
  else if (path == NULL || *path == '\0')
    bad = "metadata path is empty";
  else if (mode && !json_is_null(mode) &&
           (!json_is_integer(mode) ||
            sbxd_mode_from_decimal(json_integer_value(mode), &m->mode) < 0))
    bad = "metadata mode must be octal digits written in decimal, e.g. 644";
  else if ((o && !json_is_null(o) && !json_is_string(o)) ||
           (gr && !json_is_null(gr) && !json_is_string(gr)))
    bad = "metadata owner and group must be strings";
  if (bad) {
    up_fail(u, 400, "INVALID_FILE_METADATA",
            j == NULL ? xasprintf("invalid metadata: %s", je.text) : xstrdup(bad));
    return -1;
  }
  m->path = sbxd_path_clean(path);
  if (json_string_value(o) && *json_string_value(o))
    m->owner = xstrdup(json_string_value(o));
  if (json_string_value(gr) && *json_string_value(gr))
    m->group = xstrdup(json_string_value(gr));
  return 0;
}

static int on_part_end(void *arg)
{
  struct upload *u = arg;
  if (u->part == 1 && !u->failed) {
    struct meta m;
    if (parse_meta(u, &m) == 0) {
      u->metas = xreallocarray(u->metas, u->n_metas + 1, sizeof *u->metas);
      size_t idx = u->n_metas++;
      u->metas[idx] = m;
      if (idx < u->n_spool && u->spool[idx] >= 0)
        write_spooled(u, idx);
    }
  } else if (u->part == 2 && u->w) {
    struct writer *w = u->w;
    u->w = NULL;
    if (writer_finish(w, !u->failed) < 0 && !u->failed) {
      if (w->err)
        up_fail_lib(u, &w->err, w->path);
      else
        up_fail(u, 500, "RUNTIME_ERROR", xasprintf("error writing %s", w->path));
    }
    writer_free(w);
  } else if (u->part == 2 && u->spool_fd >= 0) {
    size_t idx = u->n_files - 1;
    if (idx >= u->n_spool) {
      u->spool = xreallocarray(u->spool, idx + 1, sizeof *u->spool);
      for (size_t i = u->n_spool; i <= idx; i++)
        u->spool[i] = -1;
      u->n_spool = idx + 1;
    }
    u->spool[idx] = u->spool_fd;
    u->spool_fd = -1;
  }
  u->part = 0;
  return 0;
}

static const struct sbxd_mp_callbacks up_cb = {on_part_begin, on_part_data, on_part_end};

static int up_body(struct req *r, const char *data, size_t len)
{
  struct upload *u = r->ctx;
  int rc = sbxd_mp_feed(&u->mp, data, len);
  if (rc == SBXD_MP_BAD)
    up_fail(u, 400, "INVALID_FILE", xasprintf("malformed multipart body: %s", u->mp.err));
  return 0;
}

static void up_cleanup(struct upload *u)
{
  if (u->w) {
    writer_finish(u->w, false);
    writer_free(u->w);
    u->w = NULL;
  }
  if (u->spool_fd >= 0)
    close(u->spool_fd);
  for (size_t i = 0; i < u->n_spool; i++)
    if (u->spool[i] >= 0)
      close(u->spool[i]);
  free(u->spool);
  for (size_t i = 0; i < u->n_metas; i++)
    meta_free(&u->metas[i]);
  free(u->metas);
  sbx__buf_free(&u->meta_buf);
  sbxd_mp_free(&u->mp);
  free(u->code);
  free(u->msg);
  free(u);
}

static void up_close(struct req *r, bool completed)
{
  (void) completed;
  if (r->ctx)
    up_cleanup(r->ctx);
  r->ctx = NULL;
}

static enum MHD_Result up_done(struct req *r)
{
  struct upload *u = r->ctx;
  if (!u->failed && sbxd_mp_finish(&u->mp) != SBXD_MP_OK)
    up_fail(u, 400, "INVALID_FILE", xasprintf("malformed multipart body: %s", u->mp.err));
  if (u->w) { /* the body ended inside a file part */
    writer_finish(u->w, false);
    writer_free(u->w);
    u->w = NULL;
  }
  if (!u->failed) {
    if (u->n_metas == 0)
      up_fail(u, 400, "INVALID_FILE_METADATA", xstrdup("metadata file is missing"));
    else if (u->n_files == 0)
      up_fail(u, 400, "INVALID_FILE_CONTENT", xstrdup("file is missing"));
    else if (u->n_metas != u->n_files)
      up_fail(u, 400, "INVALID_FILE",
              xasprintf("metadata and file parts do not pair up (%zu metadata, %zu files)",
                        u->n_metas, u->n_files));
  }
  if (u->failed)
    return sbxd_error(r, u->status, u->code, "%s", u->msg);
  return sbxd_empty(r, 200);
}

enum MHD_Result h_files_upload(struct req *r)
{
  cleanup_free char *boundary = sbxd_mp_boundary(sbxd_header(r, "Content-Type"));
  if (boundary == NULL)
    return sbxd_error(r, 400, "INVALID_FILE",
                      "the upload must be multipart/form-data with a boundary");
  struct upload *u = xzalloc(sizeof *u);
  u->b = r->box;
  u->spool_fd = -1;
  sbxd_mp_init(&u->mp, boundary, &up_cb, u);
  r->ctx = u;
  r->on_body = up_body;
  r->on_close = up_close;
  r->done = up_done; /* (the route table gives the cap) */
  return MHD_YES;
}
