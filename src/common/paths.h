/* Path and identity rules of the contract: absolute, traversal-free paths; downloads confined
 * to /mnt/user-data; DeerFlow's thread and user id formats; the stable sandbox id. */
#ifndef SBX_PATHS_H
#define SBX_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SBX_USER_DATA "/mnt/user-data"
#define SBX_WORKSPACE "/mnt/user-data/workspace"
#define SBX_PATH_MAX 4096
#define SBX_ID_LEN 16

/* Non-empty, absolute, at most SBX_PATH_MAX bytes, and no ".." segment (after '\' -> '/'). */
int sbx__path_check(const char *path, sbx_error_t *err);
/* sbx__path_check plus the /mnt/user-data prefix rule of download_file. */
int sbx__download_path_check(const char *path, sbx_error_t *err);
/* True if path (absolute, normalised) is /mnt/user-data or below it. */
bool sbx__path_under_user_data(const char *path);

/* ^[A-Za-z0-9_-]{1,64}$ */
bool sbx__thread_id_valid(const char *thread);
/* ^[A-Za-z0-9_-]{1,128}$ */
bool sbx__user_id_valid(const char *user);
int sbx__scope_check(const char *user, const char *thread, sbx_error_t *err);

/* First 16 lower-case hex of sha256("user:thread"); out has room for 17 bytes. */
void sbx__scope_id(const char *user, const char *thread, char out[SBX_ID_LEN + 1]);
/* 16 lower-case hex characters and nothing else. */
bool sbx__id_valid(const char *id);

#endif
