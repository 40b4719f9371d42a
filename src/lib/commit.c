/* sbx_commit: a sandbox's writable root as a new image of the store (docs/images.md,
 * "Snapshots"). The sandbox is frozen (its cgroup only) while its upper is read, so the layer is
 * one instant of it, and thawed before the slower part (the import); other sandboxes never wait
 * for it. */
#include "backend.h"
#include "registry.h"
#include "state.h"
#include "image/image.h"
#include "image/ref.h"
#include "paths.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

/* NAME[:TAG] as Docker spells one, without a digest (a commit makes the digest). */
static int name_check(const char *name, sbx_error_t *err)
{
  if (name == NULL || *name == '\0')
    return sbx__make_error(err, 0, SBX_E_INVALID, "commit needs an image name (NAME[:TAG])");
  if (strcmp(name, "host") == 0 || sbx__str_has_prefix(name, "sha256:"))
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "image name `%s` is reserved (host, sha256:...): choose another", name);
  struct sbx_ref r;
  sbx_error_t e = NULL;
  if (sbx__ref_parse(name, &r, &e) < 0) {
    sbx__make_error(err, 0, SBX_E_INVALID, "image name `%s`: %s", name, e->msg);
    sbx_error_release(&e);
    return -1;
  }
  bool digest = r.digest != NULL;
  sbx__ref_free(&r);
  if (digest)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "image name `%s`: a commit is named NAME[:TAG], not by a digest", name);
  return 0;
}

/* The layers the sandbox has mounted (its image-layers file), top first. */
static int mounted_layers(const char *dir, sbx_strv_t *out, sbx_error_t *err)
{
  cleanup_free char *p = xasprintf("%s/" SBX_IMAGE_LAYERS_FILE, dir);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, p, 1 << 20, &data, &len) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "read `%s`", p);
  char *save = NULL;
  for (char *l = strtok_r(data, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    sbx__strv_push(out, l);
  return 0;
}

/* Under the sandbox's lock: freeze, write the layer, thaw. *parent receives its image. */
static int capture(sbx_provider_t *p, const char *id, struct sbx_commit_work *cw, char **parent,
                   sbx_strv_t *layers, sbx_error_t *err)
{
  const char *home = sbx_provider_home(p);
  const struct sbx_config *cfg = sbx_provider_config(p);
  int lock = sbx__lock_take(home, id, true, false, err);
  if (lock < 0)
    return -1;
  struct sbx_instance in = {.home = home, .cfg = cfg};
  int r = sbx__meta_read(home, id, &in.meta, err);
  if (r < 0) {
    close(lock);
    if (err && *err && (*err)->kind == SBX_E_NOT_FOUND) {
      sbx_error_release(err);
      sbx__make_error(err, ENOENT, SBX_E_NOT_FOUND, "sandbox %s does not exist", id);
    }
    return -1;
  }
  in.dir = sbx__state_dir(home, id);
  in.ops = sbx__backend_find(in.meta.backend);
  cleanup_free char *upper = NULL;
  uint32_t base = 0, count = 0;
  struct sbx_layer_limits lim;
  sbx__image_limits_from_config(cfg, &lim);
  if (in.ops == NULL || in.ops->upper == NULL)
    r = sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "commit is not supported by the %s backend",
                        in.meta.backend ? in.meta.backend : "?");
  else
    r = in.ops->upper(&in, &upper, &base, &count, err);
  if (r == 0)
    r = mounted_layers(in.dir, layers, err);
  /* a paused sandbox stays as it is; a live one is frozen for the read and thawed after */
  bool freeze = r == 0 && !in.meta.paused && in.ops->pause && in.ops->alive && in.ops->alive(&in);
  if (freeze && in.ops->pause(&in, true, err) < 0)
    r = -1;
  if (r == 0)
    r = sbx__commit_layer(cw, upper, base, count, &lim, err);
  if (freeze) {
    sbx_error_t e = NULL;
    if (in.ops->pause(&in, false, &e) < 0 && r == 0) {
      r = -1;
      if (err)
        *err = e;
      else
        sbx_error_release(&e);
    } else {
      sbx_error_release(&e);
    }
  }
  if (r == 0)
    *parent = xstrdup(in.meta.image ? in.meta.image : cfg->image ? cfg->image : "host");
  sbx__meta_free(&in.meta);
  free(in.dir);
  close(lock);
  return r;
}

int sbx_commit(sbx_provider_t *p, const char *id, const char *name, char **digest, sbx_error_t *err)
{
  if (digest)
    *digest = NULL;
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id ? id : "");
  if (name_check(name, err) < 0)
    return -1;
  struct sbx_commit_work cw;
  if (sbx__commit_begin(sbx_provider_home(p), &cw, err) < 0)
    return -1;
  cleanup_free char *parent = NULL;
  sbx_strv_t layers = {0};
  int r = capture(p, id, &cw, &parent, &layers, err);
  if (r == 0) {
    cleanup_free char *by = xasprintf("sbx commit %s", id);
    r = sbx__commit_finish(sbx_provider_home(p), &cw, parent, &layers, name, by, digest, err);
  }
  sbx__strv_free(&layers);
  sbx__commit_end(&cw);
  return r;
}
