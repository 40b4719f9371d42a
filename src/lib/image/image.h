/* The image store (docs/images.md): OCI images imported from docker-archive, oci-archive or an
 * OCI layout directory, kept content-addressed under $SBX_HOME/images:
 *
 *   images/blobs/sha256/<hex>   every blob (manifests, configs, compressed layers), verified
 *   images/layers/<hex>/        a layer unpacked, by its diff_id (0-based owners, overlayfs
 *                               whiteouts), shared read-only by every sandbox of its images
 *   images/index.json           name -> manifest digest, layers (diff_ids), config summary
 *   images/tmp/                 work in progress (an import writes here, verifies, renames)
 *   images/gc.lock              flock: shared by an import, exclusive by rmi and prune
 *   images/index.lock           flock: exclusive around a read-modify-write of index.json
 *
 * One file per mechanism: dl.c (libarchive and libcrypto, loaded on first use so `host`
 * sandboxes never pay for them), manifest.c (the JSON documents), layer.c (safe extraction),
 * import.c (the archive formats), store.c (index, names, list, rmi, prune, resolve). */
#ifndef SBX_IMAGE_H
#define SBX_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

#define SBX_DIGEST_HEX 64

/* ---- dl.c ---- */
struct archive;
/* Loads libarchive and libcrypto once; SBX_E_UNSUPPORTED naming the library if one is missing. */
int sbx__image_dl(sbx_error_t *err);
const struct sbx_archive_api *sbx__archive_api(void);

typedef struct sbx_sha256_ctx sbx_sha256_ctx;
sbx_sha256_ctx *sbx__sha256_new(void);
void sbx__sha256_update(sbx_sha256_ctx *c, const void *p, size_t n);
/* Writes 64 lower-case hex characters and a NUL, and frees the context. */
void sbx__sha256_final(sbx_sha256_ctx *c, char out[SBX_DIGEST_HEX + 1]);

/* ---- manifest.c: the JSON documents (pure parsers, fuzzed) ---- */
enum sbx_media {
  SBX_MEDIA_UNKNOWN,
  SBX_MEDIA_INDEX,    /* OCI image index, Docker manifest list */
  SBX_MEDIA_MANIFEST, /* OCI manifest, Docker schema 2 */
  SBX_MEDIA_CONFIG,
  SBX_MEDIA_LAYER, /* tar, tar+gzip, tar+zstd (libarchive tells them apart) */
};
int sbx__media_kind(const char *media_type);
/* "sha256:" and 64 lower-case hex digits. */
bool sbx__digest_valid(const char *d);

struct sbx_desc {
  char *media_type;
  char *digest;
  int64_t size;
  char *os, *arch, *variant; /* platform, in an index */
  char *ref_name;            /* org.opencontainers.image.ref.name */
  char *image_name;          /* io.containerd.image.name */
};
struct sbx_index {
  struct sbx_desc *v;
  size_t n;
};
struct sbx_manifest {
  struct sbx_desc config;
  struct sbx_desc *layers;
  size_t n_layers;
};
struct sbx_image_config {
  sbx_strv_t diff_ids;
  sbx_strv_t env;
  sbx_strv_t entrypoint;
  sbx_strv_t cmd;
  char *workdir;
  char *user;
  char *created;
  char *os, *arch;
};
/* docker save's manifest.json: one entry per image */
struct sbx_docker_image {
  char *config;
  sbx_strv_t tags;
  sbx_strv_t layers;
};
struct sbx_docker_manifest {
  struct sbx_docker_image *v;
  size_t n;
};

int sbx__index_parse(const char *json, size_t len, struct sbx_index *out, sbx_error_t *err);
int sbx__manifest_parse(const char *json, size_t len, struct sbx_manifest *out, sbx_error_t *err);
int sbx__image_config_parse(const char *json, size_t len, struct sbx_image_config *out,
                            sbx_error_t *err);
int sbx__docker_manifest_parse(const char *json, size_t len, struct sbx_docker_manifest *out,
                               sbx_error_t *err);
/* The index entry for platform ("os/arch[/variant]"; NULL: this host's). */
int sbx__index_pick(const struct sbx_index *ix, const char *platform, size_t *pick,
                    sbx_error_t *err);
void sbx__desc_free(struct sbx_desc *d);
void sbx__index_free(struct sbx_index *ix);
void sbx__manifest_free(struct sbx_manifest *m);
void sbx__image_config_free(struct sbx_image_config *c);
void sbx__docker_manifest_free(struct sbx_docker_manifest *m);

/* ---- layer.c: a layer tar (plain, gzip or zstd) unpacked into a fresh directory ---- */
struct sbx_layer_limits {
  uint64_t max_bytes;   /* sum of file sizes of one layer (or of an archive) */
  uint64_t max_entries; /* tar entries */
  /* the whole image: sum of file sizes of everything one import, pull or commit unpacks (the
   * archive and every new layer; 0: SBX_IMAGE_MAX_BYTES_DEFAULT) */
  uint64_t max_image_bytes;
  /* free space the store's file system keeps while an import writes (0: the default, 1 GiB or
   * 5% of the file system if that is less; set reserve_none for none) */
  uint64_t reserve_bytes;
  bool reserve_none;
};
#define SBX_LAYER_MAX_BYTES_DEFAULT (16ull << 30)
#define SBX_LAYER_MAX_ENTRIES_DEFAULT 1000000ull
#define SBX_IMAGE_MAX_BYTES_DEFAULT (32ull << 30)
#define SBX_IMAGE_RESERVE_DEFAULT (1024ull << 20)
struct sbx_config;
/* The limits of sandbox.image_layer_max_mib, image_layer_max_entries, image_max_mib and
 * image_min_free_mib. */
void sbx__image_limits_from_config(const struct sbx_config *cfg, struct sbx_layer_limits *l);
/* How much of the budget has been spent, shared by the layers of one import. */
struct sbx_image_budget {
  uint64_t spent;   /* bytes unpacked (file sizes, holes included) */
  uint64_t checked; /* spent at the last free space check */
};
/* Charges n bytes about to be written to fd's file system: SBX_E_TOO_LARGE past the image's
 * budget, or when the file system would keep less than the reserve free. what: the entry. */
int sbx__image_charge(struct sbx_image_budget *b, const struct sbx_layer_limits *lim, int fd,
                      uint64_t n, const char *what, sbx_error_t *err);
/* Writes n bytes at *off of fd, seeking over whole zero blocks (holes); *off advances. The file
 * is given its size by sbx__sparse_end. */
int sbx__write_sparse(int fd, const char *buf, size_t n, uint64_t *off);
int sbx__sparse_end(int fd, uint64_t off);
/* Reads the layer from fd and creates its entries under rootfd, which must be an empty
 * directory. Every entry resolves inside rootfd and never through a symlink; absolute and `..`
 * names, device nodes (other than whiteouts), links out of the layer, overlay xattrs and
 * anything over the limits are refused (the entry is named). `.wh.` files become overlay
 * whiteouts. diff_id receives the sha256 of the uncompressed tar. */
struct sbx_layer_tally {
  bool rootless;     /* in an ordinary user's store namespace (userns.c): what it cannot make */
  uint64_t squashed; /* entries whose owner the namespace does not map: made root's */
  uint64_t devices;  /* device nodes skipped */
  struct sbx_image_budget *budget; /* the whole image's; NULL: this layer's limits only */
};
/* tally: NULL (or !rootless) for root's store. */
int sbx__layer_extract(int fd, int rootfd, const struct sbx_layer_limits *lim,
                       struct sbx_layer_tally *tally, char diff_id[SBX_DIGEST_HEX + 1],
                       sbx_error_t *err);

/* ---- store.c ---- */
struct sbx_image_info {
  char *name;
  char *digest; /* the manifest's */
  uint64_t size;
  char *created;
  double imported;
  int in_use; /* sandboxes (and spares) made from it */
};
struct sbx_image_rootfs {
  sbx_strv_t layers; /* absolute layer directories, top first (overlay's lowerdir order) */
  sbx_strv_t layer_ids;
  sbx_strv_t env;
  char *workdir, *user;
  sbx_strv_t entrypoint, cmd;
  char *digest;
};
/* A name as stored: docker.io/library/ dropped, ":latest" added when there is no tag. */
char *sbx__image_normalize(const char *name);
char *sbx__image_dir(const char *home);
/* Before an import, pull or commit writes the store (docs/security.md, "Image store"): a home
 * other users may write is made go-w if it is ours and refused if it is another user's, and the
 * store folder images/ must be this user's and is made 0700 (created if create), so no file of
 * a layer (setuid-root ones included) is reachable by another user, whatever the home's mode. */
int sbx__image_store_private(const char *home, bool create, sbx_error_t *err);
/* For sbx doctor: 0 ok, 1 the store folder is open (tightened at the next write), 2 the home
 * is (tightened, or imports refused); *what receives the line. */
int sbx__image_store_report(const char *home, char **what);
int sbx__image_list(const char *home, struct sbx_image_info **v, size_t *n, sbx_error_t *err);
void sbx__image_info_free(struct sbx_image_info *v, size_t n);
/* SBX_E_NOT_FOUND if no image has that name. */
int sbx__image_resolve(const char *home, const char *name, struct sbx_image_rootfs *r,
                       sbx_error_t *err);
void sbx__image_rootfs_free(struct sbx_image_rootfs *r);
/* Refused (SBX_E_BUSY) while a sandbox uses it, unless force. */
int sbx__image_remove(const char *home, const char *name, bool force, sbx_error_t *err);
/* Drops blobs and layers no image (and no sandbox) refers to, and stale work files. */
int sbx__image_prune(const char *home, uint64_t *freed, int *removed, sbx_error_t *err);
/* store.c for import.c */
int sbx__image_lock(const char *home, const char *name, int how, sbx_error_t *err);
/* Adds or replaces name -> entry (a JSON object) in the index, under the index lock. */
struct json_t;
int sbx__image_index_put(const char *home, const char *const *names, size_t n_names,
                         struct json_t *entry, sbx_error_t *err);
/* The file in a sandbox's state folder listing the layers it has mounted (prune keeps them). */
#define SBX_IMAGE_LAYERS_FILE "image-layers"

/* ---- userns.c: where an ordinary user's store is written ---- */
/* Runs fn (which appends what it returns to out) as root of the store's user namespace, in a
 * forked child, when the caller is not root (else here). fn must not log: the caller does. */
typedef int (*sbx_store_fn)(void *arg, sbx_buf_t *out, sbx_error_t *err);
int sbx__store_run(sbx_store_fn fn, void *arg, sbx_buf_t *out, sbx_error_t *err);

/* ---- import.c ---- */
struct sbx_image_import_opts {
  const char *name;     /* store under this name (one image only); NULL: the archive's names */
  const char *platform; /* "os/arch[/variant]" for an index; NULL: this host's */
  struct sbx_layer_limits limits;
  /* the layout's blobs were checked against their digests by the caller, which wrote them (a
   * pull while it streamed them, a commit): linked into the store, not hashed again */
  bool verified;
};
/* Imports every image of the archive or layout at path. names receives what was stored. */
int sbx__image_import(const char *home, const char *path, const struct sbx_image_import_opts *o,
                      sbx_strv_t *names, sbx_error_t *err);

/* ---- commit.c: a sandbox's upper as a new image on top of its own ---- */
struct sbx_commit_work {
  char *dir; /* images/tmp/commit-*: an OCI layout being built */
  char layer_hex[SBX_DIGEST_HEX + 1];
  uint64_t layer_size;
  struct sbx_layer_limits lim; /* the import's, as the layer was written with */
};
int sbx__commit_begin(const char *home, struct sbx_commit_work *cw, sbx_error_t *err);
/* Writes the upper as the layout's new layer (the part that needs the sandbox frozen): whiteouts
 * (0/0 character devices, overlay's opaque xattr) become `.wh.` entries, host ids of the range
 * [uid_base, uid_base + uid_count) the image's 0-based ones. lim (NULL: the defaults): the
 * import's bounds, applied while it is written. */
int sbx__commit_layer(struct sbx_commit_work *cw, const char *upper, uint32_t uid_base,
                      uint32_t uid_count, const struct sbx_layer_limits *lim, sbx_error_t *err);
/* The new image: parent's manifest and config (parent must still have parent_layers, the
 * sandbox's image-layers, top first) plus the layer, imported under name. */
int sbx__commit_finish(const char *home, struct sbx_commit_work *cw, const char *parent,
                       const sbx_strv_t *parent_layers, const char *name, const char *created_by,
                       char **digest_out, sbx_error_t *err);
/* Removes the work folder. */
void sbx__commit_end(struct sbx_commit_work *cw);

#endif
