/* The store's index, names, listing, removal, pruning and the lookup a sandbox start makes
 * (one small file read: index.json). */
#include "image.h"
#include "../log.h"
#include "../state.h"
#include <sbx/config.h>

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define INDEX_MAX (64u << 20)

char *sbx__image_dir(const char *home)
{
  char real[PATH_MAX];
  if (realpath(home, real) == NULL)
    return xasprintf("%s/images", home);
  return xasprintf("%s/images", real);
}

/* The store holds an image's files with their owners and modes: a setuid-root program of an
 * image (or one a sandbox's root made and `sbx commit` stored) is a host setuid-root file in
 * images/layers/. Only the folder's mode keeps other users from running it, so images/ is this
 * user's and 0700 whatever the home's mode, and a home others may write (where they could
 * rename images/ away and put their own folder in its place) is tightened (ours: go-w) or
 * refused (another user's). */
static const char *home_problem(const char *home, struct stat *st)
{
  memset(st, 0, sizeof *st);
  if (stat(home, st) < 0)
    return errno == ENOENT ? NULL : "cannot be read";
  if (!S_ISDIR(st->st_mode))
    return "is not a folder";
  if (st->st_uid != geteuid() && st->st_uid != 0)
    return "belongs to another user";
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by other users";
  return NULL;
}

int sbx__image_store_private(const char *home, bool create, sbx_error_t *err)
{
  struct stat st;
  const char *why = home_problem(home, &st);
  if (why && st.st_uid == geteuid() && S_ISDIR(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH))) {
    mode_t m = st.st_mode & 07777 & ~(mode_t) (S_IWGRP | S_IWOTH);
    if (chmod(home, m) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "chmod go-w `%s`", home);
    sbx__log(SBX_LOG_WARNING,
             "home `%s` was mode %04o, writable by other users: made %04o (they could replace "
             "its image store)",
             home, (unsigned) (st.st_mode & 07777), (unsigned) m);
    why = NULL;
  }
  if (why)
    return sbx__make_error(
        err, 0, SBX_E_DENIED,
        "home `%s` %s (mode %04o, uid %u): its image store could be replaced "
        "or reached by them; use a home of yours that only you may write (`chmod go-w`), "
        "or another --home "
        "(docs/security.md, \"Image store\")",
        home, why, (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid);
  cleanup_free char *dir = sbx__image_dir(home);
  if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", dir);
  if (lstat(dir, &st) < 0)
    return errno == ENOENT && !create ? 0 : sbx__make_error(err, errno, SBX_E_IO, "`%s`", dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    return sbx__make_error(err, 0, SBX_E_DENIED,
                           "image store `%s` is not a folder of this user's (uid %u): remove it",
                           dir, (unsigned) st.st_uid);
  if ((st.st_mode & 07777) != 0700) {
    if (chmod(dir, 0700) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "chmod 0700 `%s`", dir);
    sbx__log(SBX_LOG_WARNING,
             "image store `%s` was mode %04o: made 0700 (its layers may hold setuid-root files "
             "no other user may reach)",
             dir, (unsigned) (st.st_mode & 07777));
  }
  return 0;
}

int sbx__image_store_report(const char *home, char **what)
{
  struct stat st;
  const char *why = home_problem(home, &st);
  if (why) {
    bool ours = st.st_uid == geteuid() && S_ISDIR(st.st_mode);
    *what = xasprintf("home `%s` %s (mode %04o, uid %u): %s", home, why,
                      (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid,
                      ours ? "the next import, pull or commit makes it go-w"
                           : "image imports, pulls and commits are refused");
    return 2;
  }
  cleanup_free char *dir = sbx__image_dir(home);
  if (lstat(dir, &st) < 0) {
    *what = xasprintf("`%s`: none yet (made 0700 at the first import)", dir);
    return 0;
  }
  if (S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0) {
    *what = xasprintf("`%s` is private (mode %04o)", dir, (unsigned) (st.st_mode & 07777));
    return 0;
  }
  *what = xasprintf("`%s` is mode %04o, uid %u: other users may reach its layers (setuid-root "
                    "files included); the next import, pull or commit makes it 0700",
                    dir, (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid);
  return 1;
}

void sbx__image_limits_from_config(const struct sbx_config *cfg, struct sbx_layer_limits *l)
{
  l->max_bytes = cfg->image_layer_max_mib << 20;
  l->max_entries = cfg->image_layer_max_entries;
  l->max_image_bytes = cfg->image_max_mib << 20;
  /* the default (1024) is the automatic reserve: 1 GiB, or 5% of a smaller file system */
  l->reserve_bytes = cfg->image_min_free_mib == SBX_IMAGE_RESERVE_DEFAULT >> 20
                         ? 0
                         : cfg->image_min_free_mib << 20;
  l->reserve_none = cfg->image_min_free_mib == 0;
}

int sbx__image_lock(const char *home, const char *name, int how, sbx_error_t *err)
{
  return sbx__lock_take(home, name, how == LOCK_EX, false, err);
}

static json_t *index_load(const char *home, sbx_error_t *err)
{
  cleanup_free char *dir = sbx__image_dir(home);
  cleanup_free char *path = xasprintf("%s/index.json", dir);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, path, INDEX_MAX, &data, &len) < 0) {
    if (errno == ENOENT)
      return json_pack("{s:{}}", "images");
    sbx__make_error(err, errno, SBX_E_IO, "read `%s`", path);
    return NULL;
  }
  json_error_t je;
  json_t *j = json_loadb(data, len, 0, &je);
  if (!json_is_object(j) || !json_is_object(json_object_get(j, "images"))) {
    json_decref(j);
    sbx__make_error(err, 0, SBX_E_INTERNAL, "`%s` is damaged (%s)", path, je.text);
    return NULL;
  }
  return j;
}

static int index_save(const char *home, json_t *j, sbx_error_t *err)
{
  cleanup_free char *dir = sbx__image_dir(home);
  cleanup_free char *path = xasprintf("%s/index.json", dir);
  cleanup_free char *s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
  if (s == NULL || sbx__write_file_at(AT_FDCWD, path, s, strlen(s), 0644, true) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write `%s`", path);
  return 0;
}

int sbx__image_index_put(const char *home, const char *const *names, size_t n_names, json_t *entry,
                         sbx_error_t *err)
{
  cleanup_close int lk = sbx__image_lock(home, "image-index", LOCK_EX, err);
  if (lk < 0)
    return -1;
  json_t *j = index_load(home, err);
  if (j == NULL)
    return -1;
  json_t *images = json_object_get(j, "images");
  for (size_t i = 0; i < n_names; i++)
    json_object_set(images, names[i], entry);
  int r = index_save(home, j, err);
  json_decref(j);
  return r;
}

/* Sandboxes (and spares) whose meta names the image. */
static int count_users(const char *home, const char *name)
{
  int n = 0;
  for (int pool = 0; pool < 2; pool++) {
    cleanup_free char *h = pool ? xasprintf("%s/spare", home) : xstrdup(home);
    sbx_strv_t ids = {0};
    if (sbx__state_list_ids(h, &ids, NULL) < 0)
      continue;
    for (size_t i = 0; i < ids.n; i++) {
      struct sbx_meta m = {0};
      if (sbx__meta_read(h, ids.v[i], &m, NULL) == 0 && m.image && strcmp(m.image, name) == 0)
        n++;
      sbx__meta_free(&m);
    }
    sbx__strv_free(&ids);
  }
  return n;
}

static uint64_t entry_size(json_t *e)
{
  return (uint64_t) json_integer_value(json_object_get(e, "size"));
}

int sbx__image_list(const char *home, struct sbx_image_info **out, size_t *n, sbx_error_t *err)
{
  *out = NULL;
  *n = 0;
  json_t *j = index_load(home, err);
  if (j == NULL)
    return -1;
  json_t *images = json_object_get(j, "images");
  struct sbx_image_info *v = xzalloc((json_object_size(images) + 1) * sizeof *v);
  const char *k;
  json_t *e;
  json_object_foreach(images, k, e)
  {
    struct sbx_image_info *i = &v[(*n)++];
    i->name = xstrdup(k);
    i->digest = xstrdup(json_string_value(json_object_get(e, "digest")) ?: "");
    i->created = xstrdup(json_string_value(json_object_get(e, "created")) ?: "");
    i->size = entry_size(e);
    i->imported = json_number_value(json_object_get(e, "imported"));
    i->in_use = count_users(home, k);
  }
  json_decref(j);
  *out = v;
  return 0;
}

void sbx__image_info_free(struct sbx_image_info *v, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    free(v[i].name);
    free(v[i].digest);
    free(v[i].created);
  }
  free(v);
}

static void push_strs(json_t *a, sbx_strv_t *out)
{
  size_t i;
  json_t *e;
  json_array_foreach(a, i, e) if (json_is_string(e)) sbx__strv_push(out, json_string_value(e));
}

/* The entry for name: by name, else by digest (or a prefix of at least 12 hex digits). */
static json_t *find(json_t *images, const char *name, const char **key)
{
  cleanup_free char *norm = sbx__image_normalize(name);
  json_t *e = json_object_get(images, norm);
  if (e) {
    *key = json_object_iter_key(json_object_iter_at(images, norm));
    return e;
  }
  const char *hex = strncmp(name, "sha256:", 7) == 0 ? name + 7 : name;
  if (strlen(hex) < 12)
    return NULL;
  const char *k;
  json_object_foreach(images, k, e)
  {
    const char *d = json_string_value(json_object_get(e, "digest"));
    if (d && strncmp(d + 7, hex, strlen(hex)) == 0) {
      *key = k;
      return e;
    }
  }
  return NULL;
}

int sbx__image_resolve(const char *home, const char *name, struct sbx_image_rootfs *r,
                       sbx_error_t *err)
{
  memset(r, 0, sizeof *r);
  json_t *j = index_load(home, err);
  if (j == NULL)
    return -1;
  const char *key = NULL;
  json_t *e = find(json_object_get(j, "images"), name, &key);
  if (e == NULL) {
    json_decref(j);
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND,
                           "image `%s` is not in the store (sbx images lists it; sbx image import "
                           "adds one)",
                           name);
  }
  /* a store made before it was kept private (or opened since) is tightened at a sandbox's
   * start too; a home that is too open only refuses writes to the store */
  (void) sbx__image_store_private(home, false, NULL);
  cleanup_free char *dir = sbx__image_dir(home);
  json_t *layers = json_object_get(e, "layers");
  for (size_t i = json_array_size(layers); i-- > 0;) {
    const char *id = json_string_value(json_array_get(layers, i));
    if (id == NULL)
      continue;
    sbx__strv_push_owned(&r->layers, xasprintf("%s/layers/%s", dir, id));
    sbx__strv_push(&r->layer_ids, id);
  }
  push_strs(json_object_get(e, "env"), &r->env);
  push_strs(json_object_get(e, "entrypoint"), &r->entrypoint);
  push_strs(json_object_get(e, "cmd"), &r->cmd);
  const char *s;
  if ((s = json_string_value(json_object_get(e, "workdir"))))
    r->workdir = xstrdup(s);
  if ((s = json_string_value(json_object_get(e, "user"))))
    r->user = xstrdup(s);
  if ((s = json_string_value(json_object_get(e, "digest"))))
    r->digest = xstrdup(s);
  json_decref(j);
  return 0;
}

void sbx__image_rootfs_free(struct sbx_image_rootfs *r)
{
  sbx__strv_free(&r->layers);
  sbx__strv_free(&r->layer_ids);
  sbx__strv_free(&r->env);
  sbx__strv_free(&r->entrypoint);
  sbx__strv_free(&r->cmd);
  free(r->workdir);
  free(r->user);
  free(r->digest);
  memset(r, 0, sizeof *r);
}

int sbx__image_remove(const char *home, const char *name, bool force, sbx_error_t *err)
{
  cleanup_close int lk = sbx__image_lock(home, "image-index", LOCK_EX, err);
  if (lk < 0)
    return -1;
  json_t *j = index_load(home, err);
  if (j == NULL)
    return -1;
  json_t *images = json_object_get(j, "images");
  const char *key = NULL;
  int r = 0;
  if (find(images, name, &key) == NULL) {
    r = sbx__make_error(err, 0, SBX_E_NOT_FOUND, "image `%s` is not in the store", name);
  } else {
    cleanup_free char *k = xstrdup(key);
    int users = count_users(home, k);
    if (users > 0 && !force)
      r = sbx__make_error(err, 0, SBX_E_BUSY,
                          "image `%s` is used by %d sandbox%s (sbx rm them first, or --force)", k,
                          users, users == 1 ? "" : "es");
    else {
      json_object_del(images, k);
      r = index_save(home, j, err);
    }
  }
  json_decref(j);
  return r;
}

static void keep_strs(json_t *a, json_t *set)
{
  size_t i;
  json_t *e;
  json_array_foreach(a, i, e) if (json_is_string(e))
      json_object_set_new(set, json_string_value(e), json_true());
}

/* Layers mounted by sandboxes (their image-layers file): kept even after rmi --force. */
static void keep_mounted(const char *home, json_t *layers)
{
  for (int pool = 0; pool < 2; pool++) {
    cleanup_free char *h = pool ? xasprintf("%s/spare", home) : xstrdup(home);
    sbx_strv_t ids = {0};
    if (sbx__state_list_ids(h, &ids, NULL) < 0)
      continue;
    for (size_t i = 0; i < ids.n; i++) {
      cleanup_free char *path = xasprintf("%s/sandboxes/%s/" SBX_IMAGE_LAYERS_FILE, h, ids.v[i]);
      cleanup_free char *data = NULL;
      size_t len;
      if (sbx__read_file_at(AT_FDCWD, path, 1 << 20, &data, &len) < 0)
        continue;
      char *save = NULL;
      for (char *t = strtok_r(data, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
        json_object_set_new(layers, t, json_true());
    }
    sbx__strv_free(&ids);
  }
}

/* A file of a tree with more than one name: its blocks are freed only if every name goes. */
struct linked {
  dev_t dev;
  ino_t ino;
  nlink_t nlink;
  uint64_t bytes;
};

struct links {
  struct linked *v;
  size_t n, cap;
};

static uint64_t tree_walk(int dirfd, const char *name, struct links *l)
{
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return 0;
  uint64_t n = (uint64_t) st.st_blocks * 512;
  if (!S_ISDIR(st.st_mode)) {
    if (st.st_nlink <= 1)
      return n;
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 64;
      l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (struct linked){st.st_dev, st.st_ino, st.st_nlink, n};
    return 0;
  }
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return n;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    close(fd);
    return n;
  }
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      n += tree_walk(fd, de->d_name, l);
  closedir(d);
  return n;
}

static int linked_cmp(const void *a, const void *b)
{
  const struct linked *x = a, *y = b;
  if (x->dev != y->dev)
    return x->dev < y->dev ? -1 : 1;
  return x->ino < y->ino ? -1 : x->ino > y->ino ? 1 : 0;
}

/* The bytes removing the tree frees: blocks counted once an inode (du's rule), and a file with
 * names outside the tree not at all. Layers of one image share files by hard links, so counting
 * a name's blocks made prune report many times the store's size. Called before the removal. */
static uint64_t tree_size(int dirfd, const char *name)
{
  struct links l = {0};
  uint64_t n = tree_walk(dirfd, name, &l);
  if (l.n > 1)
    qsort(l.v, l.n, sizeof *l.v, linked_cmp);
  for (size_t i = 0, j; i < l.n; i = j) {
    for (j = i + 1; j < l.n && linked_cmp(&l.v[i], &l.v[j]) == 0;)
      j++;
    if (j - i >= l.v[i].nlink) /* every name of it is in the tree */
      n += l.v[i].bytes;
  }
  free(l.v);
  return n;
}

/* Removes the entries of dir not in keep (NULL: all of them). */
static void sweep(const char *dir, json_t *keep, uint64_t *freed, int *removed)
{
  cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  DIR *d = fdopendir(dup(fd));
  if (d == NULL)
    return;
  struct dirent *de;
  sbx_strv_t gone = {0};
  while ((de = readdir(d)))
    if (de->d_name[0] != '.' ||
        (keep == NULL && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0))
      if (keep == NULL || json_object_get(keep, de->d_name) == NULL)
        sbx__strv_push(&gone, de->d_name);
  closedir(d);
  for (size_t i = 0; i < gone.n; i++) {
    *freed += tree_size(fd, gone.v[i]);
    if (sbx__rm_rf_at(fd, gone.v[i]) == 0)
      (*removed)++;
  }
  sbx__strv_free(&gone);
}

static int prune_run(const char *home, uint64_t *freed, int *removed, sbx_error_t *err)
{
  *freed = 0;
  *removed = 0;
  /* no import is running while this is held: nothing half-made is in tmp/, and no blob or layer
   * just renamed into place is waiting for its index entry */
  cleanup_close int gc = sbx__image_lock(home, "image-gc", LOCK_EX, err);
  if (gc < 0)
    return -1;
  cleanup_close int lk = sbx__image_lock(home, "image-index", LOCK_EX, err);
  if (lk < 0)
    return -1;
  json_t *j = index_load(home, err);
  if (j == NULL)
    return -1;
  json_t *blobs = json_object(), *layers = json_object();
  const char *k;
  json_t *e;
  json_object_foreach(json_object_get(j, "images"), k, e)
  {
    keep_strs(json_object_get(e, "blobs"), blobs);
    keep_strs(json_object_get(e, "layers"), layers);
  }
  keep_mounted(home, layers);
  cleanup_free char *dir = sbx__image_dir(home);
  cleanup_free char *bdir = xasprintf("%s/blobs/sha256", dir);
  cleanup_free char *ldir = xasprintf("%s/layers", dir);
  cleanup_free char *tdir = xasprintf("%s/tmp", dir);
  sweep(bdir, blobs, freed, removed);
  sweep(ldir, layers, freed, removed);
  sweep(tdir, NULL, freed, removed);
  json_decref(blobs);
  json_decref(layers);
  json_decref(j);
  return 0;
}

struct prune_args {
  const char *home;
  uint64_t freed;
  int removed;
};

static int prune_child(void *arg, sbx_buf_t *out, sbx_error_t *err)
{
  struct prune_args *a = arg;
  int r = prune_run(a->home, &a->freed, &a->removed, err);
  sbx__buf_printf(out, "%llu %d", (unsigned long long) a->freed, a->removed);
  return r;
}

int sbx__image_prune(const char *home, uint64_t *freed, int *removed, sbx_error_t *err)
{
  /* rootless: the layers hold files of the store's subordinate ids, which only its namespace's
   * root can remove */
  struct prune_args a = {.home = home};
  sbx_buf_t out = {0};
  int r = sbx__store_run(prune_child, &a, &out, err);
  unsigned long long f = 0;
  int n = 0;
  if (r == 0 && out.data && sscanf(out.data, "%llu %d", &f, &n) == 2) {
    *freed = f;
    *removed = n;
  } else {
    *freed = 0;
    *removed = 0;
  }
  sbx__buf_free(&out);
  return r;
}
