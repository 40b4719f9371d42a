/* list_dir and glob (contract §1.6, §1.7) over the walker (walk.h). See search.h. */
#include "search.h"
#include "walk.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int sbx__search_list_dir(const char *path, int max_depth, size_t max_entries, uint64_t deadline_ms,
                         sbx_strv_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  if (max_depth < 0)
    return sbx__error_setf(err, EINVAL, SBX_E_INVALID, "max_depth must be non-negative");
  int fd = sbx__walk_open_root_dir(path, err);
  if (fd < 0)
    return -1;
  if (max_depth == 0) {
    close(fd);
    return 0;
  }
  sbx_walker_t w;
  sbx__walker_init(&w, SBX_WALK_LIST, deadline_ms);
  w.max_depth = max_depth;
  w.limit = sbx__walk_limit_plus_one(max_entries);
  w.out_strv = out;
  sbx__walker_set_base(&w, path);
  sbx__walk_run(&w, fd);
  bool t = sbx__walk_finish_strv(&w, out, max_entries);
  sbx__walker_fini(&w);
  if (truncated)
    *truncated = t;
  return 0;
}

int sbx__search_glob(const char *root, const char *pattern, bool include_dirs, size_t max_results,
                     uint64_t deadline_ms, sbx_strv_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  int fd = sbx__walk_open_root_dir(root, err);
  if (fd < 0)
    return -1;
  sbx_pathpat_t pp;
  sbx__pathpat_init(&pp, pattern);
  if (pp.never) {
    close(fd);
    sbx__pathpat_fini(&pp);
    return 0;
  }
  sbx_walker_t w;
  sbx__walker_init(&w, SBX_WALK_GLOB, deadline_ms);
  w.include_dirs = include_dirs;
  w.pat = &pp;
  w.limit = sbx__walk_limit_plus_one(max_results);
  w.out_strv = out;
  sbx__walker_set_base(&w, root);
  sbx__walk_run(&w, fd);
  bool t = sbx__walk_finish_strv(&w, out, max_results);
  sbx__walker_fini(&w);
  sbx__pathpat_fini(&pp);
  if (truncated)
    *truncated = t;
  return 0;
}
