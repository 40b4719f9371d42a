/* Import: docker-archive (docker save, one or more images), oci-archive, or an OCI image layout
 * directory. An archive is unpacked into the store's tmp/ (regular files and directories only,
 * names checked), which makes it a directory like a layout. Every blob is hashed and checked
 * against its descriptor (digest and size), every layer's tar against the config's diff_id; all
 * of it is staged in one work folder of tmp/ and only then linked into blobs/ and layers/ and
 * named in the index. A failure (or a kill) leaves only the work folder, which prune removes;
 * two imports of one image store it once (the second's renames find the first's files).
 * A transport (registries, part 2) only has to produce a layout directory. */
#include "image.h"
#include "dl.h"
#include "../log.h"

#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define DOC_MAX (4u << 20) /* manifests, indexes, configs */
#define CHUNK (256u << 10)

struct imp {
  const char *home;
  const struct sbx_image_import_opts *o;
  struct sbx_layer_limits lim;
  char *store;   /* $home/images */
  int srcfd;     /* the layout (or the unpacked archive) */
  int workfd;    /* tmp/import-XXXXXX: blobs/, layers/ */
  bool src_ours; /* the source is in the work folder: link its files instead of copying */
  sbx_strv_t *names;
  struct sbx_layer_tally tally;   /* rootless: what the layers had that the store could not keep */
  struct sbx_image_budget budget; /* everything this import writes: the archive, copies, layers */
};

static bool rel_ok(const char *p)
{
  if (p == NULL || *p == '\0' || *p == '/')
    return false;
  for (const char *c = p; *c;) {
    const char *e = strchr(c, '/');
    size_t l = e ? (size_t) (e - c) : strlen(c);
    if ((l == 2 && c[0] == '.' && c[1] == '.'))
      return false;
    c += l + (e != NULL);
  }
  return true;
}

static int src_open(struct imp *im, const char *rel)
{
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  return (int) syscall(SYS_openat2, im->srcfd, rel, &how, sizeof how);
}

static int read_doc(struct imp *im, const char *rel, const char *what, char **data, size_t *len,
                    sbx_error_t *err)
{
  cleanup_close int fd = src_open(im, rel);
  char p[64];
  snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
  if (fd < 0 || sbx__read_file_at(AT_FDCWD, p, DOC_MAX, data, len) < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_INVALID,
                           "%s `%s`%s", what, rel,
                           errno == ENOENT  ? ": missing from the archive"
                           : errno == EFBIG ? ": too large"
                                            : "");
  return 0;
}

/* Hashes (and, unless the source is ours, copies) a blob into work/blobs/<hex>, checking it
 * against the descriptor when there is one. hex_out receives its digest. */
static int stage_blob(struct imp *im, const char *rel, const char *digest, int64_t size,
                      char hex_out[SBX_DIGEST_HEX + 1], sbx_error_t *err)
{
  const char *what = digest ? digest : rel;
  /* one the store has was verified when it was stored: linked, not copied and hashed again
   * (a commit's parent layers, a re-import, the layers a pull found in the store) */
  if (digest && sbx__digest_valid(digest)) {
    cleanup_free char *have = xasprintf("%s/blobs/sha256/%s", im->store, digest + 7);
    cleanup_free char *dst = xasprintf("blobs/%s", digest + 7);
    struct stat hs;
    if (stat(have, &hs) == 0 && S_ISREG(hs.st_mode) && (size < 0 || hs.st_size == size) &&
        (linkat(AT_FDCWD, have, im->workfd, dst, 0) == 0 || errno == EEXIST)) {
      memcpy(hex_out, digest + 7, SBX_DIGEST_HEX + 1);
      return 0;
    }
  }
  cleanup_close int in = src_open(im, rel);
  if (in < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_INVALID,
                           "blob %s: %s", what,
                           errno == ENOENT ? "missing from the archive" : "cannot be opened");
  struct stat st;
  if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
    return sbx__make_error(err, errno, SBX_E_INVALID, "blob %s: not a regular file", what);
  if (size >= 0 && st.st_size != size)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "blob %s: %lld bytes, its descriptor says %lld (truncated?)", what,
                           (long long) st.st_size, (long long) size);
  if (digest && sbx__digest_valid(digest) && im->o && im->o->verified) {
    /* the caller hashed it as it wrote it (a pull while it streamed, a commit): linked */
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", in);
    cleanup_free char *dst = xasprintf("blobs/%s", digest + 7);
    if (linkat(AT_FDCWD, p, im->workfd, dst, AT_SYMLINK_FOLLOW) == 0 || errno == EEXIST) {
      memcpy(hex_out, digest + 7, SBX_DIGEST_HEX + 1);
      return 0;
    }
  }
  cleanup_close int out = -1;
  char tmpname[32] = "blobs/.partial-XXXXXXXX";
  if (!im->src_ours) {
    sbx__random_hex(tmpname + 15, 8);
    out = openat(im->workfd, tmpname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "stage blob %s", what);
  }
  sbx_sha256_ctx *sha = sbx__sha256_new();
  cleanup_free char *buf = xmalloc(CHUNK);
  for (;;) {
    ssize_t n = TEMP_FAILURE_RETRY(read(in, buf, CHUNK));
    if (n > 0 && out >= 0 &&
        sbx__image_charge(&im->budget, &im->lim, out, (uint64_t) n, what, err) < 0) {
      char d[SBX_DIGEST_HEX + 1];
      sbx__sha256_final(sha, d);
      return -1;
    }
    if (n < 0 || (n > 0 && out >= 0 && sbx__write_all(out, buf, (size_t) n) < 0)) {
      char d[SBX_DIGEST_HEX + 1];
      sbx__sha256_final(sha, d);
      return sbx__make_error(err, errno, SBX_E_IO, "blob %s: copy", what);
    }
    if (n == 0)
      break;
    sbx__sha256_update(sha, buf, (size_t) n);
  }
  sbx__sha256_final(sha, hex_out);
  if (digest && strcmp(digest + 7, hex_out) != 0)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "blob %s: digest mismatch (its content is "
                           "sha256:%s)",
                           digest, hex_out);
  cleanup_free char *dst = xasprintf("blobs/%s", hex_out);
  int r;
  if (im->src_ours) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", in);
    r = linkat(AT_FDCWD, p, im->workfd, dst, AT_SYMLINK_FOLLOW);
  } else {
    r = renameat(im->workfd, tmpname, im->workfd, dst);
  }
  if (r < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "stage blob %s", what);
  return 0;
}

/* A blob we made (docker-archive's synthesised manifest). */
static int stage_bytes(struct imp *im, const char *data, char hex_out[SBX_DIGEST_HEX + 1],
                       sbx_error_t *err)
{
  sbx_sha256_ctx *sha = sbx__sha256_new();
  sbx__sha256_update(sha, data, strlen(data));
  sbx__sha256_final(sha, hex_out);
  cleanup_free char *dst = xasprintf("blobs/%s", hex_out);
  if (sbx__write_file_at(im->workfd, dst, data, strlen(data), 0644, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stage the manifest");
  return 0;
}

/* Unpacks a staged layer blob into work/layers/<diff_id> unless the store has it already. */
static int stage_layer(struct imp *im, const char *blob_hex, const char *diff_id, sbx_error_t *err)
{
  cleanup_free char *have = xasprintf("%s/layers/%s", im->store, diff_id + 7);
  struct stat st;
  if (stat(have, &st) == 0)
    return 0;
  cleanup_free char *final = xasprintf("layers/%s", diff_id + 7);
  if (fstatat(im->workfd, final, &st, 0) == 0)
    return 0; /* twice in one import */
  char tmp[32] = "layers/.partial-XXXXXXXX";
  sbx__random_hex(tmp + 16, 8);
  if (mkdirat(im->workfd, tmp, 0755) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stage layer %s", diff_id);
  cleanup_close int root = openat(im->workfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cleanup_free char *bpath = xasprintf("blobs/%s", blob_hex);
  cleanup_close int fd = openat(im->workfd, bpath, O_RDONLY | O_CLOEXEC);
  if (root < 0 || fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stage layer %s", diff_id);
  char got[SBX_DIGEST_HEX + 1];
  sbx_error_t e = NULL;
  if (sbx__layer_extract(fd, root, &im->lim, &im->tally, got, &e) < 0) {
    sbx__make_error(err, e->status, e->kind, "layer sha256:%s: %s", blob_hex, e->msg);
    sbx_error_release(&e);
    return -1;
  }
  if (strcmp(got, diff_id + 7) != 0)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "layer sha256:%s: its tar is sha256:%s, the config says %s", blob_hex,
                           got, diff_id);
  if (renameat(im->workfd, tmp, im->workfd, final) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stage layer %s", diff_id);
  return 0;
}

static json_t *strv_json(const sbx_strv_t *v)
{
  json_t *a = json_array();
  for (size_t i = 0; i < v->n; i++)
    json_array_append_new(a, json_string(v->v[i]));
  return a;
}

/* Links the staged files into the store, then names the image. */
static int commit(struct imp *im, json_t *entry, sbx_strv_t *names, sbx_error_t *err)
{
  static const char *const kinds[] = {"blobs", "layers"};
  for (size_t k = 0; k < 2; k++) {
    cleanup_close int fd = openat(im->workfd, kinds[k], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(dup(fd)) : NULL;
    if (d == NULL)
      return sbx__make_error(err, errno, SBX_E_IO, "read the staged %s", kinds[k]);
    cleanup_free char *dst = xasprintf("%s/%s%s", im->store, kinds[k], k ? "" : "/sha256");
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
      if (de->d_name[0] == '.')
        continue;
      cleanup_free char *to = xasprintf("%s/%s", dst, de->d_name);
      /* blobs are hard-linked (the work folder keeps its copy until it is removed), layers
       * renamed; either way one that is there already is the same content */
      int x =
          k == 0 ? linkat(fd, de->d_name, AT_FDCWD, to, 0) : renameat(fd, de->d_name, AT_FDCWD, to);
      if (x < 0 && errno != EEXIST && errno != ENOTEMPTY)
        r = sbx__make_error(err, errno, SBX_E_IO, "store `%s`", to);
    }
    closedir(d);
    if (r < 0)
      return -1;
  }
  if (sbx__image_index_put(im->home, (const char *const *) names->v, names->n, entry, err) < 0)
    return -1;
  for (size_t i = 0; i < names->n; i++)
    sbx__strv_push(im->names, names->v[i]);
  return 0;
}

/* --platform is a requirement, not only a choice among an index's entries: a single image
 * (no index to pick from) for another platform is refused, by what its config says. */
static int platform_check(struct imp *im, const char *config_hex,
                          const struct sbx_image_config *cfg, sbx_error_t *err)
{
  if (im->o == NULL || im->o->platform == NULL || (cfg->os == NULL && cfg->arch == NULL))
    return 0;
  cleanup_free char *want = xstrdup(im->o->platform);
  char *arch = strchr(want, '/');
  if (arch == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "platform `%s`: expected OS/ARCH[/VARIANT]",
                           im->o->platform);
  *arch++ = '\0';
  char *variant = strchr(arch, '/');
  if (variant)
    *variant = '\0';
  if ((cfg->os && strcmp(cfg->os, want) != 0) || (cfg->arch && strcmp(cfg->arch, arch) != 0))
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "image config sha256:%s is for %s/%s, not the platform asked for (%s)",
                           config_hex, cfg->os ? cfg->os : "?", cfg->arch ? cfg->arch : "?",
                           im->o->platform);
  return 0;
}

/* The part common to both formats, once the config (staged) and the layers are known. */
static int finish(struct imp *im, const char *manifest_hex, const char *config_hex,
                  const char *config_json, size_t config_len, const sbx_strv_t *layer_hex,
                  uint64_t size, sbx_strv_t *names, sbx_error_t *err)
{
  struct sbx_image_config cfg;
  if (sbx__image_config_parse(config_json, config_len, &cfg, err) < 0)
    return -1;
  int r = platform_check(im, config_hex, &cfg, err);
  if (r == 0 && cfg.diff_ids.n != layer_hex->n)
    r = sbx__make_error(err, 0, SBX_E_INVALID,
                        "image config sha256:%s: %zu diff_ids for %zu layers", config_hex,
                        cfg.diff_ids.n, layer_hex->n);
  for (size_t i = 0; r == 0 && i < layer_hex->n; i++)
    r = stage_layer(im, layer_hex->v[i], cfg.diff_ids.v[i], err);
  if (r == 0) {
    json_t *blobs = json_array(), *layers = json_array();
    json_array_append_new(blobs, json_string(manifest_hex));
    json_array_append_new(blobs, json_string(config_hex));
    for (size_t i = 0; i < layer_hex->n; i++) {
      json_array_append_new(blobs, json_string(layer_hex->v[i]));
      json_array_append_new(layers, json_string(cfg.diff_ids.v[i] + 7));
    }
    cleanup_free char *digest = xasprintf("sha256:%s", manifest_hex);
    cleanup_free char *config = xasprintf("sha256:%s", config_hex);
    json_t *entry = json_pack("{s:s, s:s, s:o, s:o, s:I, s:s, s:f, s:o, s:o, s:o, s:s?, s:s?}",
                              "digest", digest, "config", config, "blobs", blobs, "layers", layers,
                              "size", (json_int_t) size, "created", cfg.created ? cfg.created : "",
                              "imported", sbx__realtime_sec(), "env", strv_json(&cfg.env),
                              "entrypoint", strv_json(&cfg.entrypoint), "cmd", strv_json(&cfg.cmd),
                              "workdir", cfg.workdir, "user", cfg.user);
    if (names->n == 0)
      sbx__strv_push_owned(names, xasprintf("sha256:%s", manifest_hex));
    r = commit(im, entry, names, err);
    json_decref(entry);
  }
  sbx__image_config_free(&cfg);
  return r;
}

static void add_name(struct imp *im, sbx_strv_t *names, const char *n)
{
  if (n == NULL || *n == '\0')
    return;
  char *norm = sbx__image_normalize(im->o && im->o->name ? im->o->name : n);
  for (size_t i = 0; i < names->n; i++)
    if (strcmp(names->v[i], norm) == 0) {
      free(norm);
      return;
    }
  sbx__strv_push_owned(names, norm);
}

/* One OCI manifest (descriptor d, already checked to be a manifest). */
static int oci_manifest(struct imp *im, const struct sbx_desc *d, sbx_strv_t *names,
                        sbx_error_t *err)
{
  char mhex[SBX_DIGEST_HEX + 1], chex[SBX_DIGEST_HEX + 1];
  cleanup_free char *rel = xasprintf("blobs/sha256/%s", d->digest + 7);
  if (stage_blob(im, rel, d->digest, d->size, mhex, err) < 0)
    return -1;
  cleanup_free char *mjson = NULL, *cjson = NULL;
  size_t mlen, clen;
  if (read_doc(im, rel, "manifest", &mjson, &mlen, err) < 0)
    return -1;
  struct sbx_manifest m;
  if (sbx__manifest_parse(mjson, mlen, &m, err) < 0)
    return -1;
  int r = 0;
  sbx_strv_t layers = {0};
  uint64_t size = 0;
  cleanup_free char *crel = xasprintf("blobs/sha256/%s", m.config.digest + 7);
  if (sbx__media_kind(m.config.media_type) != SBX_MEDIA_CONFIG)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "manifest %s: config %s has unknown media type `%s`",
                        d->digest, m.config.digest, m.config.media_type ?: "");
  else if (stage_blob(im, crel, m.config.digest, m.config.size, chex, err) < 0 ||
           read_doc(im, crel, "config", &cjson, &clen, err) < 0)
    r = -1;
  for (size_t i = 0; r == 0 && i < m.n_layers; i++) {
    const struct sbx_desc *l = &m.layers[i];
    char lhex[SBX_DIGEST_HEX + 1];
    cleanup_free char *lrel = xasprintf("blobs/sha256/%s", l->digest + 7);
    if (sbx__media_kind(l->media_type) != SBX_MEDIA_LAYER)
      r = sbx__make_error(err, 0, SBX_E_INVALID, "layer %s: unknown media type `%s`", l->digest,
                          l->media_type ?: "");
    else if ((r = stage_blob(im, lrel, l->digest, l->size, lhex, err)) == 0) {
      sbx__strv_push(&layers, lhex);
      size += (uint64_t) l->size;
    }
  }
  if (r == 0)
    r = finish(im, mhex, chex, cjson, clen, &layers, size, names, err);
  sbx__strv_free(&layers);
  sbx__manifest_free(&m);
  return r;
}

/* An index: a platform's manifest of a manifest list, or every image of a layout. */
static int oci_index(struct imp *im, const char *json, size_t len, int depth, sbx_strv_t *names,
                     sbx_error_t *err)
{
  struct sbx_index ix;
  if (depth > 4)
    return sbx__make_error(err, 0, SBX_E_INVALID, "image index nested too deep");
  if (sbx__index_parse(json, len, &ix, err) < 0)
    return -1;
  int r = 0;
  bool platforms = false;
  for (size_t i = 0; i < ix.n; i++)
    platforms |= ix.v[i].os != NULL || ix.v[i].arch != NULL;
  if (ix.n == 0)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "image index: no manifests");
  for (size_t i = 0; r == 0 && i < ix.n; i++) {
    const struct sbx_desc *d = &ix.v[i];
    size_t pick = i;
    if (platforms) {
      if ((r = sbx__index_pick(&ix, im->o ? im->o->platform : NULL, &pick, err)) < 0)
        break;
      d = &ix.v[pick];
    }
    sbx_strv_t here = {0};
    for (size_t k = 0; k < names->n; k++)
      sbx__strv_push(&here, names->v[k]);
    add_name(im, &here, d->image_name ? d->image_name : d->ref_name);
    int kind = sbx__media_kind(d->media_type);
    if (kind == SBX_MEDIA_MANIFEST) {
      r = oci_manifest(im, d, &here, err);
    } else if (kind == SBX_MEDIA_INDEX) {
      char hex[SBX_DIGEST_HEX + 1];
      cleanup_free char *rel = xasprintf("blobs/sha256/%s", d->digest + 7);
      cleanup_free char *sub = NULL;
      size_t slen;
      if ((r = stage_blob(im, rel, d->digest, d->size, hex, err)) == 0 &&
          (r = read_doc(im, rel, "image index", &sub, &slen, err)) == 0)
        r = oci_index(im, sub, slen, depth + 1, &here, err);
    } else {
      r = sbx__make_error(err, 0, SBX_E_INVALID, "index entry %s: unknown media type `%s`",
                          d->digest, d->media_type ? d->media_type : "");
    }
    sbx__strv_free(&here);
    if (platforms)
      break;
  }
  sbx__index_free(&ix);
  return r;
}

/* docker save: manifest.json names each image's config and layer files. */
static int docker_archive(struct imp *im, const char *json, size_t len, sbx_error_t *err)
{
  struct sbx_docker_manifest dm;
  if (sbx__docker_manifest_parse(json, len, &dm, err) < 0)
    return -1;
  int r = 0;
  if (im->o && im->o->name && dm.n > 1)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "--name: the archive has %zu images", dm.n);
  for (size_t i = 0; r == 0 && i < dm.n; i++) {
    struct sbx_docker_image *d = &dm.v[i];
    char chex[SBX_DIGEST_HEX + 1], mhex[SBX_DIGEST_HEX + 1];
    cleanup_free char *cjson = NULL;
    size_t clen;
    /* the config's file name is its digest ("<hex>.json" or "blobs/sha256/<hex>") */
    const char *base = strrchr(d->config, '/') ? strrchr(d->config, '/') + 1 : d->config;
    cleanup_free char *cdigest = xasprintf("sha256:%.*s", SBX_DIGEST_HEX, base);
    if (!rel_ok(d->config)) {
      r = sbx__make_error(err, 0, SBX_E_INVALID,
                          "manifest.json: Config `%s` is outside the archive", d->config);
      break;
    }
    if ((r = stage_blob(im, d->config, sbx__digest_valid(cdigest) ? cdigest : NULL, -1, chex,
                        err)) < 0 ||
        (r = read_doc(im, d->config, "config", &cjson, &clen, err)) < 0)
      break;
    sbx_strv_t layers = {0};
    uint64_t size = 0;
    json_t *mlayers = json_array();
    for (size_t k = 0; r == 0 && k < d->layers.n; k++) {
      char lhex[SBX_DIGEST_HEX + 1];
      if (!rel_ok(d->layers.v[k])) {
        r = sbx__make_error(err, 0, SBX_E_INVALID,
                            "manifest.json: layer `%s` is outside the archive", d->layers.v[k]);
        break;
      }
      if ((r = stage_blob(im, d->layers.v[k], NULL, -1, lhex, err)) < 0)
        break;
      cleanup_free char *bpath = xasprintf("blobs/%s", lhex);
      struct stat st;
      fstatat(im->workfd, bpath, &st, 0);
      size += (uint64_t) st.st_size;
      sbx__strv_push(&layers, lhex);
      json_array_append_new(mlayers, json_pack("{s:s, s:s+, s:I}", "mediaType",
                                               "application/vnd.oci.image.layer.v1.tar", "digest",
                                               "sha256:", lhex, "size", (json_int_t) st.st_size));
    }
    if (r == 0) {
      /* an OCI manifest for it, so that every image in the store has one */
      json_t *m = json_pack("{s:i, s:s, s:{s:s, s:s+, s:I}, s:o}", "schemaVersion", 2, "mediaType",
                            "application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
                            "application/vnd.oci.image.config.v1+json", "digest", "sha256:", chex,
                            "size", (json_int_t) clen, "layers", mlayers);
      mlayers = NULL;
      cleanup_free char *ms = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
      json_decref(m);
      sbx_strv_t names = {0};
      for (size_t k = 0; k < d->tags.n; k++)
        add_name(im, &names, d->tags.v[k]);
      if (names.n == 0 && im->o && im->o->name)
        add_name(im, &names, im->o->name);
      if ((r = stage_bytes(im, ms, mhex, err)) == 0)
        r = finish(im, mhex, chex, cjson, clen, &layers, size, &names, err);
      sbx__strv_free(&names);
    }
    json_decref(mlayers);
    sbx__strv_free(&layers);
  }
  sbx__docker_manifest_free(&dm);
  return r;
}

/* Unpacks the outer archive into work/src: regular files and directories only. */
static int unpack_archive(struct imp *im, const char *path, sbx_error_t *err)
{
  if (sbx__image_dl(err) < 0)
    return -1;
  const struct sbx_archive_api *ar = sbx__archive_api();
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO, "open `%s`",
                           path);
  if (mkdirat(im->workfd, "src", 0700) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create the work folder");
  im->srcfd = openat(im->workfd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct archive *a = ar->archive_read_new();
  ar->archive_read_support_filter_gzip(a);
  ar->archive_read_support_filter_zstd(a);
  ar->archive_read_support_format_tar(a);
  int r = 0;
  uint64_t total = 0, entries = 0;
  cleanup_free char *buf = xmalloc(CHUNK);
  struct archive_entry *e;
  if (ar->archive_read_open_fd(a, fd, CHUNK) != ARCHIVE_OK)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: %s", path, ar->archive_error_string(a));
  while (r == 0) {
    int h = ar->archive_read_next_header(a, &e);
    if (h == ARCHIVE_EOF)
      break;
    if (h < ARCHIVE_WARN) {
      r = sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: %s (truncated, or not a tar archive?)",
                          path, ar->archive_error_string(a));
      break;
    }
    const char *name = ar->archive_entry_pathname(e);
    while (name && name[0] == '.' && name[1] == '/')
      name += 2;
    mode_t type = ar->archive_entry_filetype(e);
    if (++entries > 100000 || (name && *name && !rel_ok(name))) {
      r = sbx__make_error(err, 0, SBX_E_INVALID,
                          "`%s`: entry `%s` refused (outside the archive, "
                          "or too many entries)",
                          path, name ? name : "");
      break;
    }
    if (name == NULL || *name == '\0' || (type != AE_IFREG && type != AE_IFDIR))
      continue; /* docker's duplicate-layer symlinks are not followed: see docs/images.md */
    /* parents: created one by one, never through a symlink (none is ever made here) */
    cleanup_free char *p = xstrdup(name);
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == '/')
      p[--n] = '\0';
    cleanup_close int dir = dup(im->srcfd);
    char *save = NULL, *c = strtok_r(p, "/", &save), *next;
    for (; c && (next = strtok_r(NULL, "/", &save)); c = next) {
      mkdirat(dir, c, 0700);
      int d2 = openat(dir, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (d2 < 0) {
        r = sbx__make_error(err, errno, SBX_E_INVALID, "`%s`: entry `%s`", path, name);
        break;
      }
      close(dir);
      dir = d2;
    }
    if (r < 0 || c == NULL)
      break;
    if (type == AE_IFDIR) {
      if (mkdirat(dir, c, 0700) < 0 && errno != EEXIST)
        r = sbx__make_error(err, errno, SBX_E_IO, "`%s`: entry `%s`", path, name);
      continue;
    }
    cleanup_close int out =
        openat(dir, c, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
      r = sbx__make_error(err, errno, SBX_E_INVALID, "`%s`: entry `%s`", path, name);
      break;
    }
    uint64_t off = 0;
    cleanup_free char *what = xasprintf("`%s`: entry `%s`", path, name);
    for (;;) {
      la_ssize_t got = ar->archive_read_data(a, buf, CHUNK);
      if (got < 0) {
        r = sbx__make_error(err, 0, SBX_E_INVALID, "`%s`: entry `%s`: %s (truncated?)", path, name,
                            ar->archive_error_string(a));
        break;
      }
      if (got == 0)
        break;
      total += (uint64_t) got;
      if (total > im->lim.max_bytes) {
        r = sbx__make_error(err, 0, SBX_E_TOO_LARGE, "`%s`: more than %llu bytes", path,
                            (unsigned long long) im->lim.max_bytes);
        break;
      }
      if (sbx__image_charge(&im->budget, &im->lim, out, (uint64_t) got, what, err) < 0) {
        r = -1;
        break;
      }
      if (sbx__write_sparse(out, buf, (size_t) got, &off) < 0) {
        r = sbx__make_error(err, errno, SBX_E_IO, "`%s`: entry `%s`: write", path, name);
        break;
      }
    }
    if (r == 0 && sbx__sparse_end(out, off) < 0)
      r = sbx__make_error(err, errno, SBX_E_IO, "`%s`: entry `%s`: write", path, name);
  }
  ar->archive_read_free(a);
  return r;
}

static int mkdirs(const char *store, bool rootless, sbx_error_t *err)
{
  /* made 0700 by sbx__image_store_private before (root's and an ordinary user's store alike:
   * either holds setuid files of ids that mean something on the host); again here for a
   * rootless store, whose namespace's root is the user */
  if (rootless && ((mkdir(store, 0700) < 0 && errno != EEXIST) || chmod(store, 0700) < 0))
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", store);
  static const char *const subs[] = {"blobs/sha256", "layers", "tmp"};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
    cleanup_free char *d = xasprintf("%s/%s", store, subs[i]);
    if (sbx__mkdir_p(d, 0755) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", d);
  }
  return 0;
}

/* The import proper, in the work folder wpath. */
static int import_in(struct imp *im, const char *wpath, const char *path, sbx_error_t *err)
{
  struct stat st;
  if (mkdir(wpath, 0700) < 0 ||
      (im->workfd = open(wpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
      mkdirat(im->workfd, "blobs", 0755) < 0 || mkdirat(im->workfd, "layers", 0755) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", wpath);
  if (stat(path, &st) < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO, "`%s`", path);
  if (S_ISDIR(st.st_mode)) {
    im->srcfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (im->srcfd < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", path);
  } else {
    if (unpack_archive(im, path, err) < 0)
      return -1;
    im->src_ours = true;
  }
  cleanup_free char *json = NULL;
  size_t len = 0;
  cleanup_close int probe = src_open(im, "manifest.json");
  if (probe >= 0) {
    if (read_doc(im, "manifest.json", "docker manifest", &json, &len, err) < 0)
      return -1;
    return docker_archive(im, json, len, err);
  }
  cleanup_close int layout = src_open(im, "oci-layout");
  if (layout < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "`%s` is neither a docker-archive (manifest.json), an oci-archive nor "
                           "an OCI layout (oci-layout, index.json)",
                           path);
  sbx_strv_t none = {0};
  if (im->o && im->o->name)
    add_name(im, &none, im->o->name);
  int r = read_doc(im, "index.json", "image index", &json, &len, err);
  if (r == 0)
    r = oci_index(im, json, len, 0, &none, err);
  sbx__strv_free(&none);
  return r;
}

static int import_run(const char *home, const char *path, const struct sbx_image_import_opts *o,
                      sbx_strv_t *names, struct sbx_layer_tally *tally, sbx_error_t *err)
{
  struct imp im = {.home = home, .o = o, .srcfd = -1, .workfd = -1, .names = names};
  im.tally.rootless = tally->rootless; /* in the store's namespace we are its root */
  im.tally.budget = &im.budget;
  if (o)
    im.lim = o->limits; /* the image's budget and the reserve: 0 is the default there */
  im.lim.max_bytes = o && o->limits.max_bytes ? o->limits.max_bytes : SBX_LAYER_MAX_BYTES_DEFAULT;
  im.lim.max_entries =
      o && o->limits.max_entries ? o->limits.max_entries : SBX_LAYER_MAX_ENTRIES_DEFAULT;
  im.store = sbx__image_dir(home);
  if (mkdirs(im.store, im.tally.rootless, err) < 0) {
    free(im.store);
    return -1;
  }
  /* shared: prune (exclusive) waits for every import in flight, and no import starts during it */
  cleanup_close int gc = sbx__image_lock(home, "image-gc", LOCK_SH, err);
  if (gc < 0) {
    free(im.store);
    return -1;
  }
  char work[] = "import-XXXXXXXX";
  sbx__random_hex(work + 7, 8);
  cleanup_free char *wpath = xasprintf("%s/tmp/%s", im.store, work);
  int r = import_in(&im, wpath, path, err);
  if (im.srcfd >= 0)
    close(im.srcfd);
  if (im.workfd >= 0)
    close(im.workfd);
  cleanup_free char *tmp = xasprintf("%s/tmp", im.store);
  cleanup_close int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tfd >= 0)
    sbx__rm_rf_at(tfd, work);
  free(im.store);
  *tally = im.tally;
  tally->budget = NULL;
  return r;
}

struct import_args {
  const char *home, *path;
  const struct sbx_image_import_opts *o;
  bool rootless;
};

/* In the store's namespace: "squashed devices\n" and the names, one a line. */
static int import_child(void *arg, sbx_buf_t *out, sbx_error_t *err)
{
  const struct import_args *a = arg;
  sbx_strv_t names = {0};
  struct sbx_layer_tally t = {.rootless = a->rootless};
  int r = import_run(a->home, a->path, a->o, &names, &t, err);
  sbx__buf_printf(out, "%llu %llu\n", (unsigned long long) t.squashed,
                  (unsigned long long) t.devices);
  for (size_t i = 0; i < names.n; i++)
    sbx__buf_printf(out, "%s\n", names.v[i]);
  sbx__strv_free(&names);
  return r;
}

int sbx__image_import(const char *home, const char *path, const struct sbx_image_import_opts *o,
                      sbx_strv_t *names, sbx_error_t *err)
{
  /* loaded before the store's child is forked (no dlopen in a fork of a threaded caller) */
  if (sbx__image_dl(err) < 0 || sbx__image_store_private(home, true, err) < 0)
    return -1;
  struct import_args a = {home, path, o, geteuid() != 0};
  sbx_buf_t out = {0};
  if (sbx__store_run(import_child, &a, &out, err) < 0) {
    sbx__buf_free(&out);
    return -1;
  }
  unsigned long long squashed = 0, devices = 0;
  char *save = NULL;
  char *line = strtok_r(out.data ? out.data : (char *) "", "\n", &save);
  if (line)
    (void) !sscanf(line, "%llu %llu", &squashed, &devices);
  while ((line = strtok_r(NULL, "\n", &save)))
    sbx__strv_push(names, line);
  sbx__buf_free(&out);
  const char *what = names->n ? names->v[names->n - 1] : path;
  if (squashed)
    sbx__log(SBX_LOG_WARNING,
             "image `%s`: stored %llu layer entr%s as root's, their owners being ids this user "
             "cannot map (no subordinate ids in /etc/subuid and /etc/subgid, or no newuidmap): "
             "a chown inside to other ids fails (run `sbx doctor`)",
             what, squashed, squashed == 1 ? "y" : "ies");
  if (devices)
    sbx__log(SBX_LOG_WARNING,
             "image `%s`: %llu device node%s of its layers skipped (an ordinary user cannot make "
             "them)",
             what, devices, devices == 1 ? "" : "s");
  return 0;
}
