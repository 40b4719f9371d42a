/* The launch spec's wire form (TLV), shared by libsbx (encode) and the launcher (decode). */
#include "linux.h"
#include "proto.h"

#include <string.h>

enum {
  L_ID = 1,
  L_STATE_DIR,
  L_USER_DATA,
  L_IMAGE,
  L_MEMORY,
  L_CPU,
  L_PIDS,
  L_NET_HOST,
  L_TMP,
  L_HOME,
  L_IDLE,
  L_MOUNT_HOST,
  L_MOUNT_CONTAINER,
  L_MOUNT_RO,
  L_LAYERS,
  L_CG_MANAGER,
  L_CG_REQUIRED,
  L_CG_SLICE,
  L_USER_NAME,
  L_MAP_HOST_ROOT,
};

void sbx__launch_spec_encode(const struct sbx_launch_spec *s, sbx_buf_t *out)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, L_ID, s->id);
  sbx__tlv_put_str(&w, L_STATE_DIR, s->state_dir);
  sbx__tlv_put_str(&w, L_USER_DATA, s->user_data);
  sbx__tlv_put_str(&w, L_IMAGE, s->image);
  sbx__tlv_put_u64(&w, L_MEMORY, s->memory_bytes);
  sbx__tlv_put_u64(&w, L_CPU, s->cpu_millis);
  sbx__tlv_put_i64(&w, L_PIDS, s->pids);
  /* 0 none, 1 host, 2 egress */
  sbx__tlv_put_u64(&w, L_NET_HOST, s->net_host ? 1 : s->net_egress ? 2 : 0);
  sbx__tlv_put_u64(&w, L_TMP, s->tmp_bytes);
  sbx__tlv_put_u64(&w, L_HOME, s->home_bytes);
  sbx__tlv_put_i64(&w, L_IDLE, s->idle_timeout_s);
  if (s->layers)
    sbx__tlv_put_str(&w, L_LAYERS, s->layers);
  sbx__tlv_put_u64(&w, L_CG_MANAGER, (uint64_t) s->cgroup_manager);
  sbx__tlv_put_u64(&w, L_CG_REQUIRED, s->cgroup_required);
  sbx__tlv_put_u64(&w, L_MAP_HOST_ROOT, s->map_host_root);
  if (s->cgroup_slice)
    sbx__tlv_put_str(&w, L_CG_SLICE, s->cgroup_slice);
  if (s->user_name)
    sbx__tlv_put_str(&w, L_USER_NAME, s->user_name);
  for (size_t i = 0; i < s->n_mounts; i++) {
    sbx__tlv_put_str(&w, L_MOUNT_HOST, s->mounts[i].host);
    sbx__tlv_put_str(&w, L_MOUNT_CONTAINER, s->mounts[i].container);
    sbx__tlv_put_u64(&w, L_MOUNT_RO, s->mounts[i].read_only);
  }
  *out = w.buf;
}

int sbx__launch_spec_decode(const void *p, size_t len, struct sbx_launch_spec *s)
{
  memset(s, 0, sizeof *s);
  uint64_t v;
  if (sbx__tlv_get_str(p, len, L_ID, &s->id) <= 0 ||
      sbx__tlv_get_str(p, len, L_STATE_DIR, &s->state_dir) <= 0 ||
      sbx__tlv_get_str(p, len, L_USER_DATA, &s->user_data) <= 0 ||
      sbx__tlv_get_str(p, len, L_IMAGE, &s->image) <= 0 ||
      sbx__tlv_get_u64(p, len, L_MEMORY, 0, &s->memory_bytes) < 0 ||
      sbx__tlv_get_u64(p, len, L_CPU, 0, &s->cpu_millis) < 0 ||
      sbx__tlv_get_i64(p, len, L_PIDS, 0, &s->pids) < 0 ||
      sbx__tlv_get_u64(p, len, L_NET_HOST, 0, &v) < 0 ||
      sbx__tlv_get_u64(p, len, L_TMP, 64u << 20, &s->tmp_bytes) < 0 ||
      sbx__tlv_get_u64(p, len, L_HOME, 64u << 20, &s->home_bytes) < 0 ||
      sbx__tlv_get_i64(p, len, L_IDLE, 0, &s->idle_timeout_s) < 0 ||
      sbx__tlv_get_str(p, len, L_LAYERS, &s->layers) < 0)
    goto bad;
  s->net_host = v == 1;
  s->net_egress = v == 2;
  uint64_t mgr, req, map_root;
  if (sbx__tlv_get_u64(p, len, L_CG_MANAGER, SBX_CGM_AUTO, &mgr) < 0 || mgr > SBX_CGM_NONE ||
      sbx__tlv_get_u64(p, len, L_CG_REQUIRED, 1, &req) < 0 ||
      sbx__tlv_get_u64(p, len, L_MAP_HOST_ROOT, 1, &map_root) < 0 ||
      sbx__tlv_get_str(p, len, L_CG_SLICE, &s->cgroup_slice) < 0 ||
      sbx__tlv_get_str(p, len, L_USER_NAME, &s->user_name) < 0)
    goto bad;
  s->cgroup_manager = (int) mgr;
  s->cgroup_required = req != 0;
  s->map_host_root = map_root != 0;
  sbx_tlv_reader_t r;
  sbx_tlv_t f;
  int ret;
  sbx__tlv_reader_init(&r, p, len);
  while ((ret = sbx__tlv_next(&r, &f)) > 0) {
    if (f.tag == L_MOUNT_HOST) {
      s->mounts = xreallocarray(s->mounts, s->n_mounts + 1, sizeof *s->mounts);
      memset(&s->mounts[s->n_mounts], 0, sizeof *s->mounts);
      s->mounts[s->n_mounts++].host = xstrndup((const char *) f.data, f.len);
    } else if (f.tag == L_MOUNT_CONTAINER && s->n_mounts > 0) {
      free(s->mounts[s->n_mounts - 1].container);
      s->mounts[s->n_mounts - 1].container = xstrndup((const char *) f.data, f.len);
    } else if (f.tag == L_MOUNT_RO && s->n_mounts > 0 && f.len == 8) {
      s->mounts[s->n_mounts - 1].read_only = f.data[0] != 0;
    }
  }
  if (ret < 0)
    goto bad;
  for (size_t i = 0; i < s->n_mounts; i++)
    if (s->mounts[i].container == NULL || s->mounts[i].container[0] != '/')
      goto bad;
  return 0;
bad:
  sbx__launch_spec_free(s);
  return -1;
}

void sbx__launch_spec_free(struct sbx_launch_spec *s)
{
  free(s->id);
  free(s->state_dir);
  free(s->user_data);
  free(s->image);
  free(s->layers);
  free(s->cgroup_slice);
  free(s->user_name);
  for (size_t i = 0; i < s->n_mounts; i++) {
    free(s->mounts[i].host);
    free(s->mounts[i].container);
  }
  free(s->mounts);
  memset(s, 0, sizeof *s);
}
