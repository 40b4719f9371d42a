/* An incremental multipart/form-data parser (RFC 7578): bytes go in as they arrive, parts come
 * out as begin / data... / end callbacks, so an upload of any size streams through in bounded
 * memory (a part's data is never buffered beyond the delimiter's length). Pure: no I/O. */
#ifndef SBXD_MULTIPART_H
#define SBXD_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

#define SBXD_MP_HEADER_MAX 16384 /* bytes of one part's headers */

struct sbxd_mp_part {
  char *name;     /* Content-Disposition name, NULL if absent */
  char *filename; /* Content-Disposition filename, NULL if absent */
  char *content_type;
};

/* Each returns 0 to go on, non-zero to stop (sbxd_mp_feed then returns SBXD_MP_STOP). */
struct sbxd_mp_callbacks {
  int (*begin)(void *arg, const struct sbxd_mp_part *part);
  int (*data)(void *arg, const char *data, size_t len);
  int (*end)(void *arg);
};

enum { SBXD_MP_OK = 0, SBXD_MP_BAD = -1, SBXD_MP_STOP = -2 };

struct sbxd_mp {
  int state;
  char *delim; /* "\r\n--" boundary */
  size_t dlen;
  sbx_buf_t buf; /* bytes not yet consumed */
  size_t header_bytes;
  struct sbxd_mp_part part;
  bool in_part;
  const struct sbxd_mp_callbacks *cb;
  void *arg;
  char err[160];
};

/* The boundary of a "multipart/form-data; boundary=..." Content-Type (malloc'ed), or NULL if the
 * type is not multipart/form-data or the boundary is missing or invalid (1-70 characters). */
char *sbxd_mp_boundary(const char *content_type);
void sbxd_mp_init(struct sbxd_mp *mp, const char *boundary, const struct sbxd_mp_callbacks *cb,
                  void *arg);
/* SBXD_MP_OK, SBXD_MP_BAD (mp->err says why) or SBXD_MP_STOP. After an error, stop feeding. */
int sbxd_mp_feed(struct sbxd_mp *mp, const char *data, size_t len);
/* At the end of the body: SBXD_MP_OK if the closing delimiter was seen, else SBXD_MP_BAD. */
int sbxd_mp_finish(struct sbxd_mp *mp);
void sbxd_mp_free(struct sbxd_mp *mp);

#endif
