/* libFuzzer target for the launch spec decoder (src/backends/linux/spec.c), the payload the
 * launcher (`sbx-init launch`, host root) reads from libsbx.
 *
 * Input: a TLV payload. Oracles:
 * - a decode either fails and leaves the spec zeroed, or succeeds with id, state_dir,
 *   user_data and image set and every mount's container path absolute;
 * - a decoded spec encodes and decodes again to the same spec (a fixed point);
 * - nothing leaks (LeakSanitizer).
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_launch_spec fuzz/corpus/launch_spec */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "linux.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool str_eq(const char *a, const char *b)
{
  return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static bool spec_eq(const struct sbx_launch_spec *a, const struct sbx_launch_spec *b)
{
  if (!str_eq(a->id, b->id) || !str_eq(a->state_dir, b->state_dir) ||
      !str_eq(a->user_data, b->user_data) || !str_eq(a->image, b->image) ||
      a->memory_bytes != b->memory_bytes || a->cpu_millis != b->cpu_millis || a->pids != b->pids ||
      a->net_host != b->net_host || a->tmp_bytes != b->tmp_bytes ||
      a->home_bytes != b->home_bytes || a->idle_timeout_s != b->idle_timeout_s ||
      a->cgroup_manager != b->cgroup_manager || a->cgroup_required != b->cgroup_required ||
      !str_eq(a->cgroup_slice, b->cgroup_slice) || a->n_mounts != b->n_mounts)
    return false;
  for (size_t i = 0; i < a->n_mounts; i++)
    if (!str_eq(a->mounts[i].host, b->mounts[i].host) ||
        !str_eq(a->mounts[i].container, b->mounts[i].container) ||
        a->mounts[i].read_only != b->mounts[i].read_only)
      return false;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct sbx_launch_spec s;
  if (sbx__launch_spec_decode(data, size, &s) < 0) {
    static const struct sbx_launch_spec zero;
    if (memcmp(&s, &zero, sizeof s) != 0)
      abort();
    return 0;
  }
  if (s.id == NULL || s.state_dir == NULL || s.user_data == NULL || s.image == NULL)
    abort();
  for (size_t i = 0; i < s.n_mounts; i++)
    if (s.mounts[i].container == NULL || s.mounts[i].container[0] != '/')
      abort();
  sbx_buf_t enc = {0};
  sbx__launch_spec_encode(&s, &enc);
  struct sbx_launch_spec again;
  if (sbx__launch_spec_decode(enc.data, enc.len, &again) < 0 || !spec_eq(&s, &again))
    abort();
  sbx__buf_free(&enc);
  sbx__launch_spec_free(&again);
  sbx__launch_spec_free(&s);
  return 0;
}
