/* Incremental multipart/form-data parser (see multipart.h).
 *
 * The body is scanned for the delimiter "\r\n--BOUNDARY". The parser starts as if a "\r\n"
 * preceded the body, so a first boundary at offset 0 is found like every other one. Inside a part
 * everything but the last dlen-1 bytes (which may be the start of a delimiter split across two
 * reads) is handed out at once. */
#include "multipart.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { MP_PREAMBLE, MP_AFTER_DELIM, MP_HEADERS, MP_BODY, MP_EPILOGUE, MP_ERROR };

static int fail(struct sbxd_mp *mp, const char *msg)
{
  snprintf(mp->err, sizeof mp->err, "%s", msg);
  mp->state = MP_ERROR;
  return SBXD_MP_BAD;
}

static void part_clear(struct sbxd_mp_part *p)
{
  free(p->name);
  free(p->filename);
  free(p->content_type);
  memset(p, 0, sizeof *p);
}

/* Reads a parameter value (token or quoted-string) at *p; advances *p. */
static char *param_value(const char **p)
{
  const char *s = *p;
  sbx_buf_t b = {0};
  if (*s == '"') {
    s++;
    while (*s && *s != '"') {
      if (*s == '\\' && s[1])
        s++;
      sbx__buf_putc(&b, *s++);
    }
    if (*s == '"')
      s++;
  } else {
    while (*s && *s != ';' && *s != ' ' && *s != '\t')
      sbx__buf_putc(&b, *s++);
  }
  *p = s;
  return sbx__buf_steal(&b);
}

static void parse_disposition(struct sbxd_mp_part *part, const char *v)
{
  const char *p = strchr(v, ';');
  while (p && *p) {
    while (*p == ';' || *p == ' ' || *p == '\t')
      p++;
    const char *name = p;
    while (*p && *p != '=' && *p != ';')
      p++;
    size_t nlen = (size_t) (p - name);
    while (nlen && (name[nlen - 1] == ' ' || name[nlen - 1] == '\t'))
      nlen--;
    if (*p != '=')
      continue;
    p++;
    while (*p == ' ' || *p == '\t')
      p++;
    char *value = param_value(&p);
    char **slot = NULL;
    if (nlen == 4 && strncasecmp(name, "name", 4) == 0)
      slot = &part->name;
    else if (nlen == 8 && strncasecmp(name, "filename", 8) == 0)
      slot = &part->filename;
    if (slot && *slot == NULL)
      *slot = value;
    else
      free(value);
    while (*p && *p != ';')
      p++;
  }
}

/* One header line of a part (without the line end). */
static void header_line(struct sbxd_mp *mp, const char *line, size_t len)
{
  const char *colon = memchr(line, ':', len);
  if (colon == NULL)
    return;
  size_t nlen = (size_t) (colon - line);
  cleanup_free char *value = NULL;
  const char *v = colon + 1, *e = line + len;
  while (v < e && (*v == ' ' || *v == '\t'))
    v++;
  while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
    e--;
  value = xstrndup(v, (size_t) (e - v));
  if (nlen == 19 && strncasecmp(line, "Content-Disposition", 19) == 0)
    parse_disposition(&mp->part, value);
  else if (nlen == 12 && strncasecmp(line, "Content-Type", 12) == 0 && !mp->part.content_type)
    mp->part.content_type = steal_pointer(&value);
}

char *sbxd_mp_boundary(const char *content_type)
{
  if (content_type == NULL)
    return NULL;
  const char *p = content_type;
  while (*p == ' ' || *p == '\t')
    p++;
  if (strncasecmp(p, "multipart/form-data", 19) != 0)
    return NULL;
  p += 19;
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p != ';' && *p != '\0')
    return NULL;
  while (*p) {
    while (*p == ';' || *p == ' ' || *p == '\t')
      p++;
    if (strncasecmp(p, "boundary=", 9) == 0) {
      p += 9;
      char *b = param_value(&p);
      size_t n = strlen(b);
      bool ok = n >= 1 && n <= 70;
      for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char) b[i] >= 32 && (unsigned char) b[i] < 127;
      if (ok)
        return b;
      free(b);
      return NULL;
    }
    while (*p && *p != ';')
      p++;
  }
  return NULL;
}

void sbxd_mp_init(struct sbxd_mp *mp, const char *boundary, const struct sbxd_mp_callbacks *cb,
                  void *arg)
{
  memset(mp, 0, sizeof *mp);
  mp->delim = xasprintf("\r\n--%s", boundary);
  mp->dlen = strlen(mp->delim);
  mp->cb = cb;
  mp->arg = arg;
  mp->state = MP_PREAMBLE;
  sbx__buf_append(&mp->buf, "\r\n", 2);
}

void sbxd_mp_free(struct sbxd_mp *mp)
{
  free(mp->delim);
  sbx__buf_free(&mp->buf);
  part_clear(&mp->part);
  memset(mp, 0, sizeof *mp);
}

/* Consumes what it can of buf[*off..]; returns 1 to loop again, 0 when more input is needed, or a
 * negative SBXD_MP_* code. */
static int step(struct sbxd_mp *mp, size_t *off)
{
  const char *d = mp->buf.data + *off;
  size_t n = mp->buf.len - *off;
  switch (mp->state) {
  case MP_PREAMBLE:
  case MP_BODY: {
    const char *hit = memmem(d, n, mp->delim, mp->dlen);
    size_t take = hit ? (size_t) (hit - d) : (n >= mp->dlen ? n - (mp->dlen - 1) : 0);
    if (mp->state == MP_BODY && take > 0 && mp->cb->data && mp->cb->data(mp->arg, d, take) != 0)
      return SBXD_MP_STOP;
    *off += take;
    if (!hit)
      return 0;
    *off += mp->dlen;
    if (mp->state == MP_BODY) {
      mp->in_part = false;
      if (mp->cb->end && mp->cb->end(mp->arg) != 0)
        return SBXD_MP_STOP;
      part_clear(&mp->part);
    }
    mp->state = MP_AFTER_DELIM;
    return 1;
  }
  case MP_AFTER_DELIM: {
    if (n < 2)
      return 0;
    if (d[0] == '-' && d[1] == '-') {
      *off += 2;
      mp->state = MP_EPILOGUE;
      return 1;
    }
    size_t i = 0;
    while (i < n && (d[i] == ' ' || d[i] == '\t'))
      i++;
    if (i > 256)
      return fail(mp, "malformed boundary line");
    if (i == n || (d[i] == '\r' && i + 1 == n))
      return 0;
    if (d[i] == '\r' && d[i + 1] == '\n')
      i += 2;
    else if (d[i] == '\n')
      i += 1;
    else
      return fail(mp, "malformed boundary line");
    *off += i;
    mp->state = MP_HEADERS;
    mp->header_bytes = 0;
    part_clear(&mp->part);
    return 1;
  }
  case MP_HEADERS: {
    const char *eol = memchr(d, '\n', n);
    if (eol == NULL) {
      if (mp->header_bytes + n > SBXD_MP_HEADER_MAX)
        return fail(mp, "part headers too large");
      return 0;
    }
    size_t len = (size_t) (eol - d);
    mp->header_bytes += len + 1;
    if (mp->header_bytes > SBXD_MP_HEADER_MAX)
      return fail(mp, "part headers too large");
    *off += len + 1;
    if (len && d[len - 1] == '\r')
      len--;
    if (len > 0) {
      if (d[0] == ' ' || d[0] == '\t')
        return fail(mp, "folded part headers are not supported");
      header_line(mp, d, len);
      return 1;
    }
    mp->state = MP_BODY;
    mp->in_part = true;
    if (mp->cb->begin && mp->cb->begin(mp->arg, &mp->part) != 0)
      return SBXD_MP_STOP;
    return 1;
  }
  case MP_EPILOGUE:
    *off += n;
    return 0;
  default:
    return SBXD_MP_BAD;
  }
}

int sbxd_mp_feed(struct sbxd_mp *mp, const char *data, size_t len)
{
  if (mp->state == MP_ERROR)
    return SBXD_MP_BAD;
  if (mp->state == MP_EPILOGUE)
    return SBXD_MP_OK;
  sbx__buf_append(&mp->buf, data, len);
  size_t off = 0;
  int r;
  while ((r = step(mp, &off)) == 1)
    ;
  if (r < 0) {
    if (r == SBXD_MP_STOP && mp->state != MP_ERROR)
      mp->state = MP_ERROR;
    return r;
  }
  memmove(mp->buf.data, mp->buf.data + off, mp->buf.len - off);
  mp->buf.len -= off;
  mp->buf.data[mp->buf.len] = '\0';
  return SBXD_MP_OK;
}

int sbxd_mp_finish(struct sbxd_mp *mp)
{
  if (mp->state == MP_EPILOGUE)
    return SBXD_MP_OK;
  if (mp->state != MP_ERROR)
    fail(mp, "multipart body ended before its closing boundary");
  return SBXD_MP_BAD;
}
