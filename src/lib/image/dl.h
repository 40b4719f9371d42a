/* libarchive's functions as loaded by dl.c (the store's users include this, not archive.h's
 * symbols: libsbx links neither library, so a `host` sandbox never maps them). */
#ifndef SBX_IMAGE_DL_H
#define SBX_IMAGE_DL_H

#include <archive.h>
#include <archive_entry.h>

#define SBX_AR_FUNCS(X)                                                                            \
  X(archive_read_new)                                                                              \
  X(archive_read_free)                                                                             \
  X(archive_read_support_format_raw)                                                               \
  X(archive_read_support_format_tar)                                                               \
  X(archive_read_support_filter_gzip)                                                              \
  X(archive_read_support_filter_zstd)                                                              \
  X(archive_read_open)                                                                             \
  X(archive_read_open_fd)                                                                          \
  X(archive_read_next_header)                                                                      \
  X(archive_read_data)                                                                             \
  X(archive_read_data_skip)                                                                        \
  X(archive_error_string)                                                                          \
  X(archive_set_error)                                                                             \
  X(archive_entry_pathname)                                                                        \
  X(archive_entry_hardlink)                                                                        \
  X(archive_entry_symlink)                                                                         \
  X(archive_entry_filetype)                                                                        \
  X(archive_entry_perm)                                                                            \
  X(archive_entry_uid)                                                                             \
  X(archive_entry_gid)                                                                             \
  X(archive_entry_size)                                                                            \
  X(archive_entry_mtime)                                                                           \
  X(archive_entry_mtime_nsec)                                                                      \
  X(archive_entry_atime)                                                                           \
  X(archive_entry_atime_nsec)                                                                      \
  X(archive_entry_atime_is_set)                                                                    \
  X(archive_entry_xattr_reset)                                                                     \
  X(archive_entry_xattr_next)                                                                      \
  X(archive_write_new)                                                                             \
  X(archive_write_free)                                                                            \
  X(archive_write_set_format_pax_restricted)                                                       \
  X(archive_write_set_bytes_in_last_block)                                                         \
  X(archive_write_open)                                                                            \
  X(archive_write_header)                                                                          \
  X(archive_write_data)                                                                            \
  X(archive_write_close)                                                                           \
  X(archive_entry_new)                                                                             \
  X(archive_entry_free)                                                                            \
  X(archive_entry_clear)                                                                           \
  X(archive_entry_set_pathname)                                                                    \
  X(archive_entry_set_filetype)                                                                    \
  X(archive_entry_set_perm)                                                                        \
  X(archive_entry_set_uid)                                                                         \
  X(archive_entry_set_gid)                                                                         \
  X(archive_entry_set_size)                                                                        \
  X(archive_entry_set_mtime)                                                                       \
  X(archive_entry_set_symlink)                                                                     \
  X(archive_entry_set_hardlink)                                                                    \
  X(archive_entry_xattr_add_entry)

struct sbx_archive_api {
#define SBX_AR_FIELD(f) __typeof__(f) *f;
  SBX_AR_FUNCS(SBX_AR_FIELD)
#undef SBX_AR_FIELD
};

#endif
