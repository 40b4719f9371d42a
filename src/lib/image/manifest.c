/* The JSON documents of an image: OCI image index / Docker manifest list, OCI and Docker
 * schema 2 manifests, the image config, and docker save's manifest.json. Pure parsers over
 * attacker input (fuzz/fuzz_manifest.c): every field is type-checked, every digest checked for
 * form; a document that does not fit is an error naming the field. */
#include "image.h"

#include <jansson.h>
#include <string.h>
#include <sys/utsname.h>

int sbx__media_kind(const char *t)
{
  static const struct {
    const char *type;
    int kind;
  } known[] = {
      {"application/vnd.oci.image.index.v1+json", SBX_MEDIA_INDEX},
      {"application/vnd.docker.distribution.manifest.list.v2+json", SBX_MEDIA_INDEX},
      {"application/vnd.oci.image.manifest.v1+json", SBX_MEDIA_MANIFEST},
      {"application/vnd.docker.distribution.manifest.v2+json", SBX_MEDIA_MANIFEST},
      {"application/vnd.oci.image.config.v1+json", SBX_MEDIA_CONFIG},
      {"application/vnd.docker.container.image.v1+json", SBX_MEDIA_CONFIG},
      {"application/vnd.oci.image.layer.v1.tar", SBX_MEDIA_LAYER},
      {"application/vnd.oci.image.layer.v1.tar+gzip", SBX_MEDIA_LAYER},
      {"application/vnd.oci.image.layer.v1.tar+zstd", SBX_MEDIA_LAYER},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar", SBX_MEDIA_LAYER},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", SBX_MEDIA_LAYER},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", SBX_MEDIA_LAYER},
      {"application/vnd.docker.image.rootfs.diff.tar", SBX_MEDIA_LAYER},
      {"application/vnd.docker.image.rootfs.diff.tar.gzip", SBX_MEDIA_LAYER},
      {"application/vnd.docker.image.rootfs.diff.tar.zstd", SBX_MEDIA_LAYER},
      {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", SBX_MEDIA_LAYER},
  };
  for (size_t i = 0; t && i < ARRAY_SIZE(known); i++)
    if (strcmp(t, known[i].type) == 0)
      return known[i].kind;
  return SBX_MEDIA_UNKNOWN;
}

char *sbx__image_normalize(const char *name)
{
  const char *n = name;
  if (sbx__str_has_prefix(n, "docker.io/library/"))
    n += 18;
  else if (sbx__str_has_prefix(n, "docker.io/"))
    n += 10;
  if (strncmp(n, "sha256:", 7) == 0 || strchr(n, '@'))
    return xstrdup(n);
  const char *slash = strrchr(n, '/');
  if (strchr(slash ? slash : n, ':') == NULL)
    return xasprintf("%s:latest", n);
  return xstrdup(n);
}

bool sbx__digest_valid(const char *d)
{
  if (d == NULL || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + SBX_DIGEST_HEX)
    return false;
  for (const char *p = d + 7; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return false;
  return true;
}

static json_t *load(const char *json, size_t len, const char *what, sbx_error_t *err)
{
  json_error_t je;
  json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (j == NULL) {
    sbx__make_error(err, 0, SBX_E_INVALID, "%s: not JSON (%s)", what, je.text);
    return NULL;
  }
  if (!json_is_object(j)) {
    json_decref(j);
    sbx__make_error(err, 0, SBX_E_INVALID, "%s: not a JSON object", what);
    return NULL;
  }
  return j;
}

/* An optional string field: 0 (absent or a string), -1 (present and not a string). */
static int opt_str(json_t *o, const char *key, char **out)
{
  json_t *v = json_object_get(o, key);
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_string(v))
    return -1;
  *out = xstrdup(json_string_value(v));
  return 0;
}

static int opt_strv(json_t *o, const char *key, sbx_strv_t *out)
{
  json_t *v = json_object_get(o, key);
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_array(v))
    return -1;
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e)
  {
    if (!json_is_string(e))
      return -1;
    sbx__strv_push(out, json_string_value(e));
  }
  return 0;
}

static int desc_parse(json_t *o, const char *what, struct sbx_desc *d, sbx_error_t *err)
{
  memset(d, 0, sizeof *d);
  if (!json_is_object(o))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: not an object", what);
  json_t *size = json_object_get(o, "size");
  if (opt_str(o, "mediaType", &d->media_type) < 0 || opt_str(o, "digest", &d->digest) < 0 ||
      !sbx__digest_valid(d->digest))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s: digest must be sha256:<64 hex>", what);
  if (!json_is_integer(size) || json_integer_value(size) < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s (%s): size must be a non-negative integer",
                           what, d->digest);
  d->size = json_integer_value(size);
  json_t *pl = json_object_get(o, "platform");
  if (pl && (!json_is_object(pl) || opt_str(pl, "os", &d->os) < 0 ||
             opt_str(pl, "architecture", &d->arch) < 0 || opt_str(pl, "variant", &d->variant) < 0))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s (%s): bad platform", what, d->digest);
  json_t *an = json_object_get(o, "annotations");
  if (an &&
      (!json_is_object(an) || opt_str(an, "org.opencontainers.image.ref.name", &d->ref_name) < 0 ||
       opt_str(an, "io.containerd.image.name", &d->image_name) < 0))
    return sbx__make_error(err, 0, SBX_E_INVALID, "%s (%s): bad annotations", what, d->digest);
  return 0;
}

void sbx__desc_free(struct sbx_desc *d)
{
  free(d->media_type);
  free(d->digest);
  free(d->os);
  free(d->arch);
  free(d->variant);
  free(d->ref_name);
  free(d->image_name);
  memset(d, 0, sizeof *d);
}

int sbx__index_parse(const char *json, size_t len, struct sbx_index *out, sbx_error_t *err)
{
  memset(out, 0, sizeof *out);
  json_t *j = load(json, len, "image index", err);
  if (j == NULL)
    return -1;
  json_t *ms = json_object_get(j, "manifests");
  int r = 0;
  if (!json_is_array(ms)) {
    r = sbx__make_error(err, 0, SBX_E_INVALID, "image index: manifests must be an array");
  } else {
    out->v = xzalloc((json_array_size(ms) + 1) * sizeof *out->v);
    size_t i;
    json_t *e;
    json_array_foreach(ms, i, e)
    {
      char what[64];
      snprintf(what, sizeof what, "image index: manifests[%zu]", i);
      if ((r = desc_parse(e, what, &out->v[out->n++], err)) < 0)
        break;
    }
  }
  json_decref(j);
  if (r < 0)
    sbx__index_free(out);
  return r;
}

void sbx__index_free(struct sbx_index *ix)
{
  for (size_t i = 0; i < ix->n; i++)
    sbx__desc_free(&ix->v[i]);
  free(ix->v);
  memset(ix, 0, sizeof *ix);
}

int sbx__manifest_parse(const char *json, size_t len, struct sbx_manifest *out, sbx_error_t *err)
{
  memset(out, 0, sizeof *out);
  json_t *j = load(json, len, "manifest", err);
  if (j == NULL)
    return -1;
  int r = 0;
  json_t *ls = json_object_get(j, "layers");
  json_t *sv = json_object_get(j, "schemaVersion");
  if (!json_is_integer(sv) || json_integer_value(sv) != 2)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "manifest: schemaVersion must be 2");
  else if (desc_parse(json_object_get(j, "config"), "manifest: config", &out->config, err) < 0)
    r = -1;
  else if (!json_is_array(ls))
    r = sbx__make_error(err, 0, SBX_E_INVALID, "manifest: layers must be an array");
  if (r == 0) {
    out->layers = xzalloc((json_array_size(ls) + 1) * sizeof *out->layers);
    size_t i;
    json_t *e;
    json_array_foreach(ls, i, e)
    {
      char what[64];
      snprintf(what, sizeof what, "manifest: layers[%zu]", i);
      if ((r = desc_parse(e, what, &out->layers[out->n_layers++], err)) < 0)
        break;
    }
  }
  json_decref(j);
  if (r < 0)
    sbx__manifest_free(out);
  return r;
}

void sbx__manifest_free(struct sbx_manifest *m)
{
  sbx__desc_free(&m->config);
  for (size_t i = 0; i < m->n_layers; i++)
    sbx__desc_free(&m->layers[i]);
  free(m->layers);
  memset(m, 0, sizeof *m);
}

int sbx__image_config_parse(const char *json, size_t len, struct sbx_image_config *out,
                            sbx_error_t *err)
{
  memset(out, 0, sizeof *out);
  json_t *j = load(json, len, "image config", err);
  if (j == NULL)
    return -1;
  int r = 0;
  json_t *rootfs = json_object_get(j, "rootfs");
  json_t *cfg = json_object_get(j, "config");
  if (!json_is_object(rootfs) || opt_strv(rootfs, "diff_ids", &out->diff_ids) < 0 ||
      json_object_get(rootfs, "diff_ids") == NULL)
    r = sbx__make_error(err, 0, SBX_E_INVALID, "image config: rootfs.diff_ids must be an array");
  for (size_t i = 0; r == 0 && i < out->diff_ids.n; i++)
    if (!sbx__digest_valid(out->diff_ids.v[i]))
      r = sbx__make_error(err, 0, SBX_E_INVALID,
                          "image config: rootfs.diff_ids[%zu] must be sha256:<64 hex>", i);
  if (r == 0 && (opt_str(j, "created", &out->created) < 0 || opt_str(j, "os", &out->os) < 0 ||
                 opt_str(j, "architecture", &out->arch) < 0))
    r = sbx__make_error(err, 0, SBX_E_INVALID,
                        "image config: created, os and architecture must "
                        "be strings");
  if (r == 0 && cfg && !json_is_null(cfg) &&
      (!json_is_object(cfg) || opt_strv(cfg, "Env", &out->env) < 0 ||
       opt_strv(cfg, "Entrypoint", &out->entrypoint) < 0 || opt_strv(cfg, "Cmd", &out->cmd) < 0 ||
       opt_str(cfg, "WorkingDir", &out->workdir) < 0 || opt_str(cfg, "User", &out->user) < 0))
    r = sbx__make_error(err, 0, SBX_E_INVALID,
                        "image config: config.Env/Entrypoint/Cmd must be string arrays, "
                        "WorkingDir/User strings");
  for (size_t i = 0; r == 0 && i < out->env.n; i++) {
    const char *e = out->env.v[i], *eq = strchr(e, '=');
    if (eq == NULL || eq == e)
      r = sbx__make_error(err, 0, SBX_E_INVALID, "image config: config.Env[%zu] is not KEY=VALUE",
                          i);
  }
  json_decref(j);
  if (r < 0)
    sbx__image_config_free(out);
  return r;
}

void sbx__image_config_free(struct sbx_image_config *c)
{
  sbx__strv_free(&c->diff_ids);
  sbx__strv_free(&c->env);
  sbx__strv_free(&c->entrypoint);
  sbx__strv_free(&c->cmd);
  free(c->workdir);
  free(c->user);
  free(c->created);
  free(c->os);
  free(c->arch);
  memset(c, 0, sizeof *c);
}

int sbx__docker_manifest_parse(const char *json, size_t len, struct sbx_docker_manifest *out,
                               sbx_error_t *err)
{
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (j == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "manifest.json: not JSON (%s)", je.text);
  int r = 0;
  if (!json_is_array(j) || json_array_size(j) == 0) {
    r = sbx__make_error(err, 0, SBX_E_INVALID, "manifest.json: must be a non-empty array");
  } else {
    out->v = xzalloc((json_array_size(j) + 1) * sizeof *out->v);
    size_t i;
    json_t *e;
    json_array_foreach(j, i, e)
    {
      struct sbx_docker_image *d = &out->v[out->n++];
      json_t *ls = json_is_object(e) ? json_object_get(e, "Layers") : NULL;
      if (!json_is_object(e) || opt_str(e, "Config", &d->config) < 0 || d->config == NULL ||
          opt_strv(e, "RepoTags", &d->tags) < 0 || !json_is_array(ls) ||
          opt_strv(e, "Layers", &d->layers) < 0) {
        r = sbx__make_error(err, 0, SBX_E_INVALID,
                            "manifest.json[%zu]: needs Config (a string), Layers (strings) and "
                            "RepoTags (strings or null)",
                            i);
        break;
      }
    }
  }
  json_decref(j);
  if (r < 0)
    sbx__docker_manifest_free(out);
  return r;
}

void sbx__docker_manifest_free(struct sbx_docker_manifest *m)
{
  for (size_t i = 0; i < m->n; i++) {
    free(m->v[i].config);
    sbx__strv_free(&m->v[i].tags);
    sbx__strv_free(&m->v[i].layers);
  }
  free(m->v);
  memset(m, 0, sizeof *m);
}

/* Go's names for this machine (the index's platform.architecture). */
static const char *host_arch(void)
{
  struct utsname u;
  if (uname(&u) < 0)
    return "amd64";
  static const struct {
    const char *uname, *go;
  } map[] = {{"x86_64", "amd64"},    {"aarch64", "arm64"}, {"i686", "386"},       {"armv7l", "arm"},
             {"ppc64le", "ppc64le"}, {"s390x", "s390x"},   {"riscv64", "riscv64"}};
  for (size_t i = 0; i < ARRAY_SIZE(map); i++)
    if (strcmp(u.machine, map[i].uname) == 0)
      return map[i].go;
  return "amd64";
}

int sbx__index_pick(const struct sbx_index *ix, const char *platform, size_t *pick,
                    sbx_error_t *err)
{
  cleanup_free char *want = xstrdup(platform ? platform : "");
  const char *os = "linux", *arch = host_arch(), *variant = NULL;
  if (platform) {
    char *a = strchr(want, '/');
    if (a == NULL || a == want || a[1] == '\0')
      return sbx__make_error(err, 0, SBX_E_INVALID, "platform `%s`: expected OS/ARCH[/VARIANT]",
                             platform);
    *a++ = '\0';
    char *v = strchr(a, '/');
    if (v)
      *v++ = '\0';
    os = want, arch = a, variant = v;
  }
  for (size_t i = 0; i < ix->n; i++) {
    const struct sbx_desc *d = &ix->v[i];
    int kind = sbx__media_kind(d->media_type);
    if (kind != SBX_MEDIA_MANIFEST && kind != SBX_MEDIA_INDEX)
      continue;
    /* an entry without a platform (a single-image layout) fits any */
    if (d->os == NULL && d->arch == NULL) {
      *pick = i;
      return 0;
    }
    if (d->os && strcmp(d->os, os) == 0 && d->arch && strcmp(d->arch, arch) == 0 &&
        (variant == NULL || (d->variant && strcmp(d->variant, variant) == 0))) {
      *pick = i;
      return 0;
    }
  }
  return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no image for platform %s/%s%s%s in the index",
                         os, arch, variant ? "/" : "", variant ? variant : "");
}
