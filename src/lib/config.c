/* YAML configuration (docs/configuration.md). The file is read with libyaml's event API into a
 * small tree of our own, so that anchors, aliases, nesting depth and duplicate keys are checked
 * before anything is interpreted; the `sandbox:` and `sbxd:` blocks are then typed explicitly
 * (libyaml's scalars are untyped) and every other top-level key is ignored. */
#include <sbx/config.h>

#include "error.h"
#include "../net/policy.h"
#include "text.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#define CONFIG_MAX_BYTES ((size_t) 1 << 20)
#define CONFIG_MAX_DEPTH 32
#define SHOW_MAX 64
#define SECONDS_MAX ((int64_t) INT32_MAX)
#define SBX_SPARES_MAX 64 /* each spare is a running sandbox (~1 MiB idle) */
#define MIB_MAX (INT64_MAX >> 20)
#define CPUS_MAX 1000000
#define USER_DATA "/mnt/user-data"
#define DEFAULT_DOMAIN "localhost:8080"
#define DEFAULT_LISTEN "127.0.0.1:8080"
#define MASK "\"***\""
#define BOOL_EXPECTED "a boolean (true/false, yes/no, on/off)"

enum node_type { NODE_SCALAR, NODE_SEQ, NODE_MAP };

struct node {
  enum node_type type;
  size_t line; /* 1-based */
  char *text;  /* scalars: NUL-terminated copy; may contain NULs (len is authoritative) */
  size_t len;
  bool quoted;        /* any non-plain style, or an explicit !!str tag */
  bool null;          /* plain "", "~", "null", "Null" or "NULL" */
  struct node **kids; /* sequences: items; mappings: key, value, key, value... */
  size_t n;
  size_t cap;
};

static void node_free(struct node *n)
{
  if (n == NULL)
    return;
  for (size_t i = 0; i < n->n; i++)
    node_free(n->kids[i]);
  free(n->kids);
  free(n->text);
  free(n);
}

static void node_push(struct node *parent, struct node *kid)
{
  if (parent->n == parent->cap) {
    parent->cap = parent->cap ? parent->cap * 2 : 4;
    parent->kids = xreallocarray(parent->kids, parent->cap, sizeof *parent->kids);
  }
  parent->kids[parent->n++] = kid;
}

/* Printable, one-line, bounded rendering of user text for error messages. */
static char *show(const char *s, size_t len)
{
  sbx_buf_t b = {0};
  size_t lim = len;
  if (len > SHOW_MAX) {
    lim = SHOW_MAX;
    while (lim > 0 && ((unsigned char) s[lim] & 0xC0) == 0x80)
      lim--;
  }
  for (size_t i = 0; i < lim; i++) {
    unsigned char ch = (unsigned char) s[i];
    if (ch < 0x20 || ch == 0x7f)
      sbx__buf_printf(&b, "\\x%02x", ch);
    else
      sbx__buf_putc(&b, (char) ch);
  }
  if (lim < len)
    sbx__buf_puts(&b, "...");
  return sbx__buf_steal(&b);
}

static char *show_str(const char *s)
{
  return show(s, strlen(s));
}

static bool text_is(const struct node *n, const char *s)
{
  size_t l = strlen(s);
  return n->type == NODE_SCALAR && n->len == l && memcmp(n->text, s, l) == 0;
}

/* ---- Building the tree from libyaml events ---- */

struct builder {
  const char *name;
  sbx_error_t *err;
  struct node *stack[CONFIG_MAX_DEPTH];
  size_t depth;
  struct node *root;
  int docs;
};

static void path_append_key(sbx_buf_t *p, const struct node *key)
{
  if (p->len > 0)
    sbx__buf_putc(p, '.');
  if (key->type != NODE_SCALAR) {
    sbx__buf_putc(p, '?');
    return;
  }
  cleanup_free char *k = show(key->text, key->len);
  sbx__buf_puts(p, k);
}

/* The dotted path of the node being built at the top of the stack. */
static char *builder_path(const struct builder *b)
{
  sbx_buf_t p = {0};
  for (size_t i = 0; i < b->depth; i++) {
    const struct node *c = b->stack[i];
    if (c->type == NODE_SEQ)
      sbx__buf_printf(&p, "[%zu]", c->n);
    else if (c->n % 2 == 1)
      path_append_key(&p, c->kids[c->n - 1]);
    else
      break; /* a complex key is being built */
  }
  return sbx__buf_steal(&p);
}

static int builder_error(struct builder *b, size_t line, const char *path, const char *msg)
{
  if (path != NULL && *path != '\0')
    sbx__make_error(b->err, 0, SBX_E_CONFIG, "%s:%zu: %s: %s", b->name, line, path, msg);
  else
    sbx__make_error(b->err, 0, SBX_E_CONFIG, "%s:%zu: %s", b->name, line, msg);
  return -1;
}

static int builder_error_here(struct builder *b, const yaml_mark_t *mark, const char *msg)
{
  cleanup_free char *path = builder_path(b);
  return builder_error(b, mark->line + 1, path, msg);
}

static void builder_attach(struct builder *b, struct node *n)
{
  if (b->depth == 0) {
    node_free(b->root);
    b->root = n;
  } else {
    node_push(b->stack[b->depth - 1], n);
  }
}

struct key_ref {
  const struct node *key;
  size_t idx;
};

static int key_ref_cmp(const void *a, const void *b)
{
  const struct key_ref *x = a, *y = b;
  if (x->key->len != y->key->len)
    return x->key->len < y->key->len ? -1 : 1;
  int c = memcmp(x->key->text, y->key->text, x->key->len);
  if (c != 0)
    return c;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Duplicate scalar keys in the mapping at the top of the stack; reports the first repeated key
 * in document order. O(n log n) so that a large mapping cannot stall the loader. */
static int builder_check_duplicates(struct builder *b)
{
  const struct node *m = b->stack[b->depth - 1];
  size_t nk = 0;
  cleanup_free struct key_ref *refs = xreallocarray(NULL, m->n / 2 + 1, sizeof *refs);
  for (size_t i = 0; i + 1 < m->n; i += 2)
    if (m->kids[i]->type == NODE_SCALAR)
      refs[nk++] = (struct key_ref){m->kids[i], i};
  if (nk < 2)
    return 0;
  qsort(refs, nk, sizeof *refs, key_ref_cmp);
  const struct node *dup = NULL;
  size_t dup_idx = SIZE_MAX;
  for (size_t i = 1; i < nk; i++) {
    const struct node *a = refs[i - 1].key, *k = refs[i].key;
    if (a->len == k->len && memcmp(a->text, k->text, k->len) == 0 && refs[i].idx < dup_idx) {
      dup = refs[i].key;
      dup_idx = refs[i].idx;
    }
  }
  if (dup == NULL)
    return 0;
  sbx_buf_t p = {0};
  cleanup_free char *base = builder_path(b);
  sbx__buf_puts(&p, base);
  path_append_key(&p, dup);
  cleanup_free char *path = sbx__buf_steal(&p);
  return builder_error(b, dup->line, path, "duplicate key");
}

static int builder_event(struct builder *b, const yaml_event_t *ev, bool *done)
{
  switch (ev->type) {
  case YAML_STREAM_END_EVENT:
    *done = true;
    return 0;
  case YAML_DOCUMENT_START_EVENT:
    if (b->docs++ > 0)
      return builder_error(b, ev->start_mark.line + 1, NULL,
                           "multiple YAML documents are not supported");
    return 0;
  case YAML_ALIAS_EVENT:
    return builder_error_here(b, &ev->start_mark, "aliases are not supported");
  case YAML_SCALAR_EVENT: {
    if (ev->data.scalar.anchor != NULL)
      return builder_error_here(b, &ev->start_mark, "aliases are not supported");
    struct node *n = xzalloc(sizeof *n);
    n->type = NODE_SCALAR;
    n->line = ev->start_mark.line + 1;
    n->len = ev->data.scalar.length;
    n->text = xmalloc(n->len + 1);
    memcpy(n->text, ev->data.scalar.value, n->len);
    n->text[n->len] = '\0';
    const char *tag = (const char *) ev->data.scalar.tag;
    bool str_tag = tag != NULL && strcmp(tag, YAML_STR_TAG) == 0;
    n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || str_tag;
    n->null = !n->quoted && (n->len == 0 || text_is(n, "~") || text_is(n, "null") ||
                             text_is(n, "Null") || text_is(n, "NULL"));
    builder_attach(b, n);
    return 0;
  }
  case YAML_SEQUENCE_START_EVENT:
  case YAML_MAPPING_START_EVENT: {
    bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
    const yaml_char_t *anchor =
        seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
    if (anchor != NULL)
      return builder_error_here(b, &ev->start_mark, "aliases are not supported");
    if (b->depth == CONFIG_MAX_DEPTH)
      return builder_error_here(b, &ev->start_mark, "nesting too deep (max 32 levels)");
    struct node *n = xzalloc(sizeof *n);
    n->type = seq ? NODE_SEQ : NODE_MAP;
    n->line = ev->start_mark.line + 1;
    b->stack[b->depth++] = n;
    return 0;
  }
  case YAML_SEQUENCE_END_EVENT:
  case YAML_MAPPING_END_EVENT: {
    if (b->depth == 0)
      return builder_error(b, ev->start_mark.line + 1, NULL, "unbalanced YAML events");
    if (ev->type == YAML_MAPPING_END_EVENT && builder_check_duplicates(b) < 0)
      return -1;
    struct node *n = b->stack[--b->depth];
    b->stack[b->depth] = NULL;
    builder_attach(b, n);
    return 0;
  }
  case YAML_NO_EVENT:
  case YAML_STREAM_START_EVENT:
  case YAML_DOCUMENT_END_EVENT:
  default:
    return 0;
  }
}

static int syntax_error(const char *name, const yaml_parser_t *p, const char *yaml, size_t len,
                        sbx_error_t *err)
{
  if (p->error == YAML_MEMORY_ERROR)
    return sbx__make_error(err, ENOMEM, SBX_E_INTERNAL, "%s: YAML parser", name);
  size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
  if (p->error == YAML_READER_ERROR) {
    /* Reader errors carry a byte offset instead of a mark. */
    size_t off = p->problem_offset < len ? p->problem_offset : len;
    line = 1;
    col = 1;
    for (size_t i = 0; i < off; i++) {
      if (yaml[i] == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
  }
  return sbx__make_error(err, 0, SBX_E_CONFIG, "%s:%zu:%zu: YAML syntax error: %s", name, line, col,
                         p->problem ? p->problem : "unknown error");
}

static int build_tree(const char *name, const char *yaml, size_t len, struct node **out,
                      sbx_error_t *err)
{
  yaml_parser_t parser;
  struct builder b = {.name = name, .err = err};
  int ret = -1;
  bool done = false;

  if (!yaml_parser_initialize(&parser))
    return sbx__make_error(err, ENOMEM, SBX_E_INTERNAL, "%s: YAML parser", name);
  yaml_parser_set_input_string(&parser, (const unsigned char *) yaml, len);
  while (!done) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) {
      syntax_error(name, &parser, yaml, len, err);
      goto out;
    }
    int r = builder_event(&b, &ev, &done);
    yaml_event_delete(&ev);
    if (r < 0)
      goto out;
  }
  *out = steal_pointer(&b.root);
  ret = 0;
out:
  /* Containers still open are not attached to their parents yet: each is freed on its own. */
  for (size_t i = 0; i < b.depth; i++)
    node_free(b.stack[i]);
  node_free(b.root);
  yaml_parser_delete(&parser);
  return ret;
}

/* ---- Typing ---- */

struct vctx {
  const char *name;
  sbx_error_t *err;
};

static int verr(const struct vctx *v, const struct node *n, const char *key, int status,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int verr(const struct vctx *v, const struct node *n, const char *key, int status,
                const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  size_t line = n ? n->line : 1;
  if (key != NULL && *key != '\0')
    sbx__make_error(v->err, status, SBX_E_CONFIG, "%s:%zu: %s: %s", v->name, line, key, msg);
  else
    sbx__make_error(v->err, status, SBX_E_CONFIG, "%s:%zu: %s", v->name, line, msg);
  return -1;
}

static char *describe(const struct node *n)
{
  switch (n->type) {
  case NODE_SEQ:
    return xstrdup("a list");
  case NODE_MAP:
    return xstrdup("a mapping");
  case NODE_SCALAR:
  default:
    if (n->null)
      return xstrdup("null");
    cleanup_free char *s = show(n->text, n->len);
    return xasprintf("%s'%s'", n->quoted ? "a quoted string " : "", s);
  }
}

static int type_error(const struct vctx *v, const struct node *n, const char *key,
                      const char *expected)
{
  cleanup_free char *got = describe(n);
  return verr(v, n, key, 0, "expected %s, got %s", expected, got);
}

/* $VAR resolution (DeerFlow AppConfig layer 1): a string that starts with '$' is replaced by
 * the environment variable named by the rest of it; the result is never resolved again. */
static int resolve(const struct vctx *v, const struct node *n, const char *key, char **out,
                   bool *from_var)
{
  if (memchr(n->text, '\0', n->len) != NULL)
    return verr(v, n, key, 0, "must not contain NUL characters");
  if (from_var)
    *from_var = false;
  if (n->len == 0 || n->text[0] != '$') {
    *out = xstrdup(n->text);
    return 0;
  }
  const char *val = getenv(n->text + 1);
  if (val == NULL) {
    cleanup_free char *var = show(n->text + 1, n->len - 1);
    cleanup_free char *whole = show(n->text, n->len);
    return verr(v, n, key, 0, "Environment variable %s not found for config value %s", var, whole);
  }
  if (from_var)
    *from_var = true;
  *out = xstrdup(val);
  return 0;
}

static int get_string(const struct vctx *v, const struct node *n, const char *key, char **out,
                      bool *from_var)
{
  if (n->type != NODE_SCALAR || n->null)
    return type_error(v, n, key, "a string");
  return resolve(v, n, key, out, from_var);
}

/* The text of a scalar that must be a number or a boolean: plain style only ("3" is a string). */
static int get_plain(const struct vctx *v, const struct node *n, const char *key,
                     const char *expected, char **out, bool *from_var)
{
  if (n->type != NODE_SCALAR || n->null || n->quoted)
    return type_error(v, n, key, expected);
  return resolve(v, n, key, out, from_var);
}

static int value_error(const struct vctx *v, const struct node *n, const char *key,
                       const char *what, const char *text, bool from_var)
{
  cleanup_free char *s = show_str(text);
  if (from_var) {
    cleanup_free char *src = show(n->text, n->len);
    return verr(v, n, key, 0, "%s, got '%s' (from %s)", what, s, src);
  }
  return verr(v, n, key, 0, "%s, got '%s'", what, s);
}

/* Decimal only: optional sign, digits, nothing else. 1 on syntax error, 2 on overflow. */
static int parse_int(const char *s, int64_t *out)
{
  bool neg = false;
  uint64_t acc = 0, lim;
  if (*s == '+' || *s == '-')
    neg = *s++ == '-';
  if (*s == '\0')
    return 1;
  lim = neg ? (uint64_t) INT64_MAX + 1 : (uint64_t) INT64_MAX;
  bool overflow = false;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return 1;
    unsigned d = (unsigned) (*s - '0');
    if (acc > (lim - d) / 10)
      overflow = true;
    else
      acc = acc * 10 + d;
  }
  if (overflow)
    return 2;
  if (neg)
    *out = acc == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) acc;
  else
    *out = (int64_t) acc;
  return 0;
}

/* strtod in the C locale, whatever the process locale is. */
static double strtod_c(const char *s, char **end)
{
  locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t) 0);
  if (c == (locale_t) 0)
    return strtod(s, end);
  double d = strtod_l(s, end, c);
  freelocale(c);
  return d;
}

/* 1 on syntax error (including nan, inf and hex floats), 2 on overflow. */
static int parse_num(const char *s, double *out)
{
  if (!((*s >= '0' && *s <= '9') || *s == '+' || *s == '-' || *s == '.'))
    return 1;
  if (strpbrk(s, "xXnNiI") != NULL)
    return 1;
  char *end = NULL;
  errno = 0;
  double d = strtod_c(s, &end);
  if (end == s || *end != '\0')
    return 1;
  if (!isfinite(d))
    return 2;
  *out = d;
  return 0;
}

static int parse_bool(const char *s, bool *out)
{
  static const char *const yes[] = {"true", "yes", "on"};
  static const char *const no[] = {"false", "no", "off"};
  for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return 1;
}

static int get_int(const struct vctx *v, const struct node *n, const char *key, bool positive,
                   int64_t max, const char *neg_msg, int64_t *out)
{
  cleanup_free char *text = NULL;
  bool from_var = false;
  if (get_plain(v, n, key, "an integer", &text, &from_var) < 0)
    return -1;
  int64_t x = 0;
  int r = parse_int(text, &x);
  if (r == 1)
    return value_error(v, n, key, "expected an integer", text, from_var);
  bool negative = r == 2 ? text[0] == '-' : x < 0;
  if (negative && neg_msg != NULL)
    return verr(v, n, key, 0, "%s", neg_msg);
  if (negative || (positive && r == 0 && x == 0))
    return value_error(v, n, key, positive ? "must be positive" : "must be non-negative", text,
                       from_var);
  if (r == 2 || x > max) {
    cleanup_free char *what = xasprintf("must be at most %" PRId64, max);
    return value_error(v, n, key, what, text, from_var);
  }
  *out = x;
  return 0;
}

static int get_num(const struct vctx *v, const struct node *n, const char *key, bool positive,
                   int64_t max, double *out)
{
  cleanup_free char *text = NULL;
  bool from_var = false;
  if (get_plain(v, n, key, "a number", &text, &from_var) < 0)
    return -1;
  double x = 0;
  int r = parse_num(text, &x);
  if (r == 1)
    return value_error(v, n, key, "expected a number", text, from_var);
  if (r == 0 && (positive ? !(x > 0) : x < 0))
    return value_error(v, n, key, positive ? "must be positive" : "must be non-negative", text,
                       from_var);
  if (r == 2 || x > (double) max) {
    cleanup_free char *what = xasprintf("must be at most %" PRId64, max);
    return value_error(v, n, key, what, text, from_var);
  }
  *out = x == 0 ? 0 : x; /* no -0 */
  return 0;
}

static int get_bool(const struct vctx *v, const struct node *n, const char *key, bool *out)
{
  cleanup_free char *text = NULL;
  bool from_var = false;
  if (get_plain(v, n, key, BOOL_EXPECTED, &text, &from_var) < 0)
    return -1;
  if (parse_bool(text, out) != 0)
    return value_error(v, n, key, "expected " BOOL_EXPECTED, text, from_var);
  return 0;
}

/* ---- Paths ---- */

/* Lexically cleaned absolute path: no empty or "." segments, no trailing slash. */
static char *clean_path(const char *p, bool *dotdot)
{
  sbx_buf_t b = {0};
  *dotdot = false;
  while (*p) {
    while (*p == '/')
      p++;
    const char *seg = p;
    while (*p && *p != '/')
      p++;
    size_t l = (size_t) (p - seg);
    if (l == 0 || (l == 1 && seg[0] == '.'))
      continue;
    if (l == 2 && seg[0] == '.' && seg[1] == '.')
      *dotdot = true;
    sbx__buf_putc(&b, '/');
    sbx__buf_append(&b, seg, l);
  }
  if (b.len == 0)
    sbx__buf_putc(&b, '/');
  return sbx__buf_steal(&b);
}

static int check_abs(const struct vctx *v, const struct node *n, const char *key, const char *p,
                     char **cleaned)
{
  if (p[0] != '/')
    return value_error(v, n, key, "must be an absolute path", p, false);
  bool dotdot = false;
  char *c = clean_path(p, &dotdot);
  if (dotdot) {
    free(c);
    return value_error(v, n, key, "must not contain '..' segments", p, false);
  }
  *cleaned = c;
  return 0;
}

/* ---- The blocks ---- */

enum ftype {
  F_STR,      /* non-empty string */
  F_OPTSTR,   /* string; empty = unset */
  F_USE,      /* backend name */
  F_NETWORK,  /* none | egress | host */
  F_PROTOCOL, /* http | https */
  F_LISTEN,   /* host:port */
  F_INT,      /* int */
  F_I64,      /* int64_t */
  F_U64,      /* uint64_t */
  F_DBL,      /* double */
  F_BOOL,
  F_IGNORED_BOOL,
  F_ENV,
  F_NETPOL, /* an egress policy (src/net/policy.h), kept as its JSON text */
  F_MOUNTS,
  F_ROOTS,
  F_IMAGES,
  F_CGMANAGER, /* auto | cgroupfs | systemd | none */
  F_SLICE,     /* a systemd slice name */
  F_REGISTRIES,
  F_MIRRORS,
};

struct field {
  const char *name;
  enum ftype type;
  size_t off;
  bool positive;
  int64_t max;
  const char *neg_msg;
};

#define OFF(f) offsetof(struct sbx_config, f)

static const struct field sandbox_fields[] = {
    {"use", F_USE, OFF(use), false, 0, NULL},
    {"image", F_STR, OFF(image), false, 0, NULL},
    {"replicas", F_INT, OFF(replicas), true, INT_MAX, NULL},
    {"idle_timeout", F_I64, OFF(idle_timeout), false, SECONDS_MAX, NULL},
    {"bash_command_timeout", F_DBL, OFF(bash_command_timeout), true, SECONDS_MAX, NULL},
    {"environment", F_ENV, 0, false, 0, NULL},
    {"memory_mib", F_U64, OFF(memory_mib), false, MIB_MAX, NULL},
    {"cpus", F_DBL, OFF(cpus), false, CPUS_MAX, NULL},
    {"pids", F_I64, OFF(pids), false, INT32_MAX, NULL},
    {"network", F_NETWORK, OFF(network), false, 0, NULL},
    {"network_policy", F_NETPOL, OFF(network_policy), false, 0, NULL},
    {"mounts", F_MOUNTS, 0, false, 0, NULL},
    {"output_max_bytes", F_U64, OFF(output_max_bytes), true, INT64_MAX, NULL},
    {"bash_output_max_chars", F_I64, OFF(bash_output_max_chars), false, INT64_MAX, NULL},
    {"read_file_output_max_chars", F_I64, OFF(read_file_output_max_chars), false, INT64_MAX, NULL},
    {"ls_output_max_chars", F_I64, OFF(ls_output_max_chars), false, INT64_MAX, NULL},
    {"tmp_size_mib", F_U64, OFF(tmp_size_mib), true, MIB_MAX, NULL},
    {"home_size_mib", F_U64, OFF(home_size_mib), true, MIB_MAX, NULL},
    {"user_data_size_mib", F_U64, OFF(user_data_size_mib), false, MIB_MAX, NULL},
    {"disk_mib", F_U64, OFF(disk_mib), false, MIB_MAX, NULL},
    {"image_layer_max_mib", F_U64, OFF(image_layer_max_mib), true, MIB_MAX, NULL},
    {"image_layer_max_entries", F_U64, OFF(image_layer_max_entries), true, MIB_MAX, NULL},
    {"image_max_mib", F_U64, OFF(image_max_mib), true, MIB_MAX, NULL},
    {"image_min_free_mib", F_U64, OFF(image_min_free_mib), false, MIB_MAX, NULL},
    {"health_check_timeout", F_I64, OFF(health_check_timeout), true, SECONDS_MAX, NULL},
    {"health_check_skip_seconds", F_DBL, OFF(health_check_skip_seconds), false, SECONDS_MAX, NULL},
    {"spares", F_INT, OFF(spares), false, SBX_SPARES_MAX, NULL},
    {"max_sandboxes", F_INT, OFF(max_sandboxes), false, INT_MAX, NULL},
    {"max_sandboxes_per_user", F_INT, OFF(max_sandboxes_per_user), false, INT_MAX, NULL},
    {"memory_overcommit", F_DBL, OFF(memory_overcommit), false, 1000, NULL},
    {"cgroup_manager", F_CGMANAGER, OFF(cgroup_manager), false, 0, NULL},
    {"cgroup_required", F_BOOL, OFF(cgroup_required), false, 0, NULL},
    {"cgroup_slice", F_SLICE, OFF(cgroup_slice), false, 0, NULL},
    {"map_host_root", F_BOOL, OFF(map_host_root), false, 0, NULL},
    {"registries", F_REGISTRIES, 0, false, 0, NULL},
    {"registry_mirrors", F_MIRRORS, 0, false, 0, NULL},
    {"allow_host_bash", F_IGNORED_BOOL, 0, false, 0, NULL},
    {"api_key", F_OPTSTR, OFF(api_key), false, 0, NULL},
    {"domain", F_OPTSTR, OFF(domain), false, 0, NULL},
    {"protocol", F_PROTOCOL, OFF(protocol), false, 0, NULL},
    {"request_timeout", F_DBL, OFF(request_timeout), true, SECONDS_MAX, NULL},
    {"ready_timeout", F_DBL, OFF(ready_timeout), true, SECONDS_MAX, NULL},
    {"use_server_proxy", F_BOOL, OFF(use_server_proxy), false, 0, NULL},
    {"sandbox_timeout", F_I64, OFF(sandbox_timeout), false, SECONDS_MAX,
     "sandbox.sandbox_timeout must be non-negative"},
};

static const struct field sbxd_fields[] = {
    {"listen", F_LISTEN, OFF(listen), false, 0, NULL},
    {"api_key", F_OPTSTR, OFF(server_api_key), false, 0, NULL},
    {"volume_roots", F_ROOTS, 0, false, 0, NULL},
    {"max_sandbox_timeout", F_I64, OFF(max_sandbox_timeout), true, SECONDS_MAX, NULL},
    {"images", F_IMAGES, 0, false, 0, NULL},
    {"pty_grace", F_DBL, OFF(pty_grace), false, SECONDS_MAX, NULL},
    {"pty_max_sessions", F_I64, OFF(pty_max_sessions), true, 4096, NULL},
    {"pty_buffer", F_I64, OFF(pty_buffer), true, (int64_t) 1 << 30, NULL},
    {"max_connections", F_I64, OFF(max_connections), true, 65536, NULL},
    {"max_connections_per_address", F_I64, OFF(max_connections_per_address), false, 65536, NULL},
    {"connections_reserve", F_I64, OFF(connections_reserve), false, 65535, NULL},
    {"head_timeout", F_DBL, OFF(head_timeout), false, 3600, NULL},
};

#define FIELD(cfg, f, type) ((type *) (void *) ((char *) (cfg) + (f)->off))

static void set_str(struct sbx_config *cfg, const struct field *f, char *s)
{
  char **slot = FIELD(cfg, f, char *);
  free(*slot);
  *slot = s;
}

static bool valid_env_name(const char *k, size_t len)
{
  if (len == 0 || !((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_'))
    return false;
  for (size_t i = 1; i < len; i++) {
    char c = k[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

static bool valid_slice(const char *s)
{
  size_t n = strlen(s);
  if (n <= 6 || n > 200 || strcmp(s + n - 6, ".slice") != 0)
    return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          strchr(":_.-", *c)))
      return false;
  return true;
}

static bool valid_listen(const char *s)
{
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s)
    return false;
  const char *port = colon + 1;
  size_t pl = strlen(port);
  if (pl == 0 || pl > 5 || strspn(port, "0123456789") != pl)
    return false;
  unsigned num = 0;
  for (size_t i = 0; i < pl; i++)
    num = num * 10 + (unsigned) (port[i] - '0');
  if (num > 65535)
    return false;
  if (s[0] == '[')
    return colon - s >= 3 && colon[-1] == ']';
  return true;
}

/* A YAML tree as JSON: mappings, lists, and scalars as strings (the policy has no numbers). */
static json_t *node_json(const struct node *n)
{
  if (n->type == NODE_MAP) {
    json_t *o = json_object();
    for (size_t i = 0; i + 1 < n->n; i += 2)
      if (n->kids[i]->type == NODE_SCALAR)
        json_object_set_new(o, n->kids[i]->text, node_json(n->kids[i + 1]));
    return o;
  }
  if (n->type == NODE_SEQ) {
    json_t *a = json_array();
    for (size_t i = 0; i < n->n; i++)
      json_array_append_new(a, node_json(n->kids[i]));
    return a;
  }
  return n->null ? json_null() : json_stringn(n->text, n->len);
}

static int parse_netpol(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                        const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_MAP)
    return type_error(v, n, key, "a mapping ({defaultAction, egress} or {mode, allowlist})");
  if (cfg->network_policy != NULL)
    return verr(v, n, key, 0,
                "sandbox.network (a mapping) sets the egress policy already: keep one");
  json_t *j = node_json(n);
  sbx_error_t perr = NULL;
  sbx_net_policy_t *p = sbx__net_policy_from_json(j, key, &perr);
  json_decref(j);
  if (p == NULL) {
    int r = verr(v, n, NULL, 0, "%s", perr->msg);
    sbx_error_release(&perr);
    return r;
  }
  free(cfg->network_policy);
  cfg->network_policy = sbx__net_policy_serialize(p);
  sbx__net_policy_free(p);
  return 0;
}

/* DeerFlow's sandbox.network mapping (its PR #5152): {mode: open | isolated | allowlist, the
 * allowlist of domains, approval}, beside sbx's string form. open is egress under default allow
 * (the always-denied ranges stay denied), isolated is none, allowlist is egress under default
 * deny with an allow rule per domain. The list's key was not found in DeerFlow's sources
 * available here: allowlist, allow and domains are all taken (docs/configuration.md).
 * approval (DeerFlow's prompt for a denied domain) is accepted and has no effect: sbx has no
 * prompt; its denials are in the denied log and sbxd's log (docs/network.md). */
static int parse_network_map(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                             const char *key)
{
  static const char *const list_keys[] = {"allowlist", "allow", "domains"};
  const struct node *mode = NULL;
  sbx_strv_t targets = {0};
  char *mkey = xasprintf("%s.mode", key), *m = NULL;
  int rc = -1;
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR) {
      verr(v, k, key, 0, "keys must be strings");
      goto out;
    }
    cleanup_free char *ks = show(k->text, k->len);
    cleanup_free char *sub = xasprintf("%s.%s", key, ks);
    bool is_list = false;
    for (size_t j = 0; j < ARRAY_SIZE(list_keys); j++)
      is_list |= text_is(k, list_keys[j]);
    if (text_is(k, "mode")) {
      mode = val;
    } else if (text_is(k, "approval")) {
      if (val->type != NODE_SCALAR) {
        type_error(v, val, sub, "a string");
        goto out;
      }
    } else if (is_list) {
      if (val->null)
        continue;
      if (val->type != NODE_SEQ) {
        type_error(v, val, sub, "a list of domains");
        goto out;
      }
      for (size_t j = 0; j < val->n; j++) {
        cleanup_free char *ekey = xasprintf("%s[%zu]", sub, j);
        char *t = NULL;
        if (get_string(v, val->kids[j], ekey, &t, NULL) < 0)
          goto out;
        sbx__strv_push(&targets, t);
        free(t);
      }
    } else {
      verr(v, k, sub, 0, "unknown key (mode, allowlist, allow, domains, approval)");
      goto out;
    }
  }
  if (mode == NULL) {
    verr(v, n, mkey, 0, "missing: open, isolated or allowlist");
    goto out;
  }
  if (get_string(v, mode, mkey, &m, NULL) < 0)
    goto out;
  if (cfg->network_policy != NULL) {
    verr(v, n, key, 0,
         "a mapping sets the egress policy and so does sandbox.network_policy: keep one");
    goto out;
  }
  sbx_error_t perr = NULL;
  sbx_net_policy_t *p =
      sbx__net_policy_from_mode(m, (const char *const *) targets.v, targets.n, &perr);
  if (p == NULL) {
    verr(v, n, key, 0, "%s", perr->msg);
    sbx_error_release(&perr);
    goto out;
  }
  free(cfg->network);
  if (strcmp(m, "isolated") == 0) {
    cfg->network = xstrdup("none");
  } else {
    cfg->network = xstrdup("egress");
    cfg->network_policy = sbx__net_policy_serialize(p);
  }
  sbx__net_policy_free(p);
  rc = 0;
out:
  sbx__strv_free(&targets);
  free(mkey);
  free(m);
  return rc;
}

static int parse_env(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                     const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_MAP)
    return type_error(v, n, key, "a mapping");
  cfg->environment = xreallocarray(NULL, n->n / 2 + 1, sizeof *cfg->environment);
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR)
      return verr(v, k, key, 0, "keys must be strings");
    if (!valid_env_name(k->text, k->len)) {
      cleanup_free char *ks = show(k->text, k->len);
      return verr(v, k, key, 0,
                  "extra_env key '%s' is not a valid POSIX environment variable name (must "
                  "match ^[A-Za-z_][A-Za-z0-9_]*$)",
                  ks);
    }
    cleanup_free char *ekey = xasprintf("%s.%s", key, k->text);
    char *value = NULL;
    bool secret = false;
    if (val->type == NODE_SCALAR && val->null)
      value = xstrdup("");
    else if (get_string(v, val, ekey, &value, &secret) < 0)
      return -1;
    cfg->environment[cfg->n_environment++] =
        (struct sbx_env_var){.key = xstrdup(k->text), .value = value, .secret = secret};
  }
  return 0;
}

static int parse_mount(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                       const char *key)
{
  if (n->type != NODE_MAP)
    return type_error(v, n, key, "a mapping");
  struct sbx_mount *m = &cfg->mounts[cfg->n_mounts++];
  *m = (struct sbx_mount){0};
  const struct node *host = NULL, *cont = NULL;
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR)
      return verr(v, k, key, 0, "keys must be strings");
    cleanup_free char *ks = show(k->text, k->len);
    cleanup_free char *mkey = xasprintf("%s.%s", key, ks);
    if (text_is(k, "host_path")) {
      if (get_string(v, val, mkey, &m->host_path, NULL) < 0)
        return -1;
      host = val;
    } else if (text_is(k, "container_path")) {
      if (get_string(v, val, mkey, &m->container_path, NULL) < 0)
        return -1;
      cont = val;
    } else if (text_is(k, "read_only")) {
      if (get_bool(v, val, mkey, &m->read_only) < 0)
        return -1;
    } else {
      return verr(v, k, mkey, 0, "unknown key");
    }
  }
  if (host == NULL)
    return verr(v, n, key, 0, "missing required key 'host_path'");
  if (cont == NULL)
    return verr(v, n, key, 0, "missing required key 'container_path'");

  cleanup_free char *hkey = xasprintf("%s.host_path", key);
  cleanup_free char *ckey = xasprintf("%s.container_path", key);
  if (m->host_path[0] != '/')
    return value_error(v, host, hkey, "must be an absolute path", m->host_path, false);
  struct stat st;
  if (stat(m->host_path, &st) < 0) {
    cleanup_free char *hp = show_str(m->host_path);
    if (errno == ENOENT)
      return verr(v, host, hkey, 0, "'%s' does not exist", hp);
    return verr(v, host, hkey, errno, "cannot access '%s'", hp);
  }

  char *cleaned = NULL;
  if (check_abs(v, cont, ckey, m->container_path, &cleaned) < 0)
    return -1;
  free(m->container_path);
  m->container_path = cleaned;
  if (strcmp(cleaned, "/") == 0)
    return verr(v, cont, ckey, 0, "must not be '/'");
  if (strcmp(cleaned, USER_DATA) == 0 || sbx__str_has_prefix(cleaned, USER_DATA "/"))
    return value_error(v, cont, ckey, "must not be " USER_DATA " or under it", cleaned, false);
  for (size_t i = 0; i + 1 < cfg->n_mounts; i++) {
    if (strcmp(cfg->mounts[i].container_path, cleaned) == 0) {
      cleanup_free char *cs = show_str(cleaned);
      return verr(v, cont, ckey, 0, "'%s' is already used by sandbox.mounts[%zu]", cs, i);
    }
  }
  return 0;
}

static int parse_mounts(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                        const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_SEQ)
    return type_error(v, n, key, "a list");
  cfg->mounts = xreallocarray(NULL, n->n + 1, sizeof *cfg->mounts);
  for (size_t i = 0; i < n->n; i++) {
    cleanup_free char *mkey = xasprintf("%s[%zu]", key, i);
    if (parse_mount(v, cfg, n->kids[i], mkey) < 0)
      return -1;
  }
  return 0;
}

static int parse_roots(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                       const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_SEQ)
    return type_error(v, n, key, "a list");
  cfg->volume_roots = xreallocarray(NULL, n->n + 1, sizeof *cfg->volume_roots);
  cfg->volume_roots[0] = NULL;
  for (size_t i = 0; i < n->n; i++) {
    cleanup_free char *rkey = xasprintf("%s[%zu]", key, i);
    cleanup_free char *s = NULL;
    char *cleaned = NULL;
    if (get_string(v, n->kids[i], rkey, &s, NULL) < 0 ||
        check_abs(v, n->kids[i], rkey, s, &cleaned) < 0)
      return -1;
    cfg->volume_roots[cfg->n_volume_roots++] = cleaned;
    cfg->volume_roots[cfg->n_volume_roots] = NULL;
  }
  return 0;
}

/* sbxd.images: NAME -> "host". The linux backend has one image, the host's root filesystem, so
 * every alias must name it; the map lets clients ask for e.g. python:3.11 and get the host. */
static int parse_images(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                        const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_MAP)
    return type_error(v, n, key, "a mapping");
  cfg->images = xreallocarray(NULL, n->n / 2 + 1, sizeof *cfg->images);
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR)
      return verr(v, k, key, 0, "keys must be strings");
    if (k->len == 0 || memchr(k->text, '\0', k->len) != NULL)
      return verr(v, k, key, 0, "image names must be non-empty strings");
    cleanup_free char *ks = show(k->text, k->len);
    cleanup_free char *ikey = xasprintf("%s.%s", key, ks);
    char *target = NULL;
    if (get_string(v, val, ikey, &target, NULL) < 0)
      return -1;
    if (strcmp(target, "host") != 0) {
      int r = value_error(v, val, ikey, "must be 'host' (the only image of the linux backend)",
                          target, false);
      free(target);
      return r;
    }
    cfg->images[cfg->n_images++] =
        (struct sbx_image_alias){.name = xstrndup(k->text, k->len), .target = target};
  }
  return 0;
}

/* sandbox.registries: HOST -> {username, password ($VAR allowed), insecure} */
static int parse_registries(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                            const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_MAP)
    return type_error(v, n, key, "a mapping");
  cfg->registries = xreallocarray(NULL, n->n / 2 + 1, sizeof *cfg->registries);
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR)
      return verr(v, k, key, 0, "keys must be strings");
    if (k->len == 0 || memchr(k->text, '\0', k->len) != NULL || memchr(k->text, '/', k->len))
      return verr(v, k, key, 0, "registry names must be HOST[:PORT]");
    cleanup_free char *ks = show(k->text, k->len);
    cleanup_free char *rkey = xasprintf("%s.%s", key, ks);
    if (val->type != NODE_MAP)
      return type_error(v, val, rkey, "a mapping");
    struct sbx_registry *r = &cfg->registries[cfg->n_registries++];
    *r = (struct sbx_registry){.host = xstrndup(k->text, k->len)};
    for (size_t j = 0; j + 1 < val->n; j += 2) {
      const struct node *fk = val->kids[j], *fv = val->kids[j + 1];
      if (fk->type != NODE_SCALAR)
        return verr(v, fk, rkey, 0, "keys must be strings");
      cleanup_free char *fks = show(fk->text, fk->len);
      cleanup_free char *fkey = xasprintf("%s.%s", rkey, fks);
      int rc;
      if (text_is(fk, "username"))
        rc = get_string(v, fv, fkey, &r->username, NULL);
      else if (text_is(fk, "password"))
        rc = get_string(v, fv, fkey, &r->password, NULL);
      else if (text_is(fk, "insecure"))
        rc = get_bool(v, fv, fkey, &r->insecure);
      else
        rc = verr(v, fk, fkey, 0, "unknown key (username, password, insecure)");
      if (rc < 0)
        return -1;
    }
    if ((r->username == NULL) != (r->password == NULL))
      return verr(v, val, rkey, 0, "username and password go together");
  }
  return 0;
}

static int parse_mirrors(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                         const char *key)
{
  if (n->null)
    return 0;
  if (n->type != NODE_SEQ)
    return type_error(v, n, key, "a list");
  cfg->registry_mirrors = xreallocarray(NULL, n->n + 1, sizeof *cfg->registry_mirrors);
  for (size_t i = 0; i < n->n; i++) {
    cleanup_free char *mkey = xasprintf("%s[%zu]", key, i);
    char *s = NULL;
    if (get_string(v, n->kids[i], mkey, &s, NULL) < 0)
      return -1;
    if (*s == '\0' || strchr(s, '/')) {
      int r =
          value_error(v, n->kids[i], mkey, "must be HOST[:PORT] or DOMAIN=HOST[:PORT]", s, false);
      free(s);
      return r;
    }
    cfg->registry_mirrors[cfg->n_registry_mirrors++] = s;
  }
  return 0;
}

static int parse_field(const struct vctx *v, struct sbx_config *cfg, const struct field *f,
                       const struct node *n, const char *key)
{
  if (f->type == F_NETWORK && n->type == NODE_MAP)
    return parse_network_map(v, cfg, n, key);
  switch (f->type) {
  case F_STR:
  case F_OPTSTR:
  case F_USE:
  case F_NETWORK:
  case F_CGMANAGER:
  case F_SLICE:
  case F_PROTOCOL:
  case F_LISTEN: {
    char *s = NULL;
    if (get_string(v, n, key, &s, NULL) < 0)
      return -1;
    cleanup_free char *shown = show_str(s);
    const char *bad = NULL;
    if (f->type == F_STR && *s == '\0')
      bad = "must not be empty";
    else if (f->type == F_OPTSTR && *s == '\0') {
      free(s);
      s = NULL;
    } else if (f->type == F_USE) {
      if (strcmp(s, "deerflow.community.opensandbox:OpenSandboxProvider") == 0) {
        free(s);
        s = xstrdup("opensandbox");
      } else if (strcmp(s, "linux") != 0 && strcmp(s, "opensandbox") != 0) {
        free(s);
        return verr(v, n, key, 0, "unknown backend '%s' (known: linux, opensandbox)", shown);
      }
    } else if (f->type == F_NETWORK && strcmp(s, "none") != 0 && strcmp(s, "host") != 0 &&
               strcmp(s, "egress") != 0)
      bad = "must be 'none', 'egress' or 'host'";
    else if (f->type == F_CGMANAGER && strcmp(s, "auto") != 0 && strcmp(s, "cgroupfs") != 0 &&
             strcmp(s, "systemd") != 0 && strcmp(s, "none") != 0)
      bad = "must be 'auto', 'cgroupfs', 'systemd' or 'none'";
    else if (f->type == F_SLICE && !valid_slice(s))
      bad = "must be a systemd slice name (letters, digits, ':', '_', '.', '-', ending in .slice)";
    else if (f->type == F_PROTOCOL && strcmp(s, "http") != 0 && strcmp(s, "https") != 0)
      bad = "must be 'http' or 'https'";
    else if (f->type == F_LISTEN && !valid_listen(s))
      bad = "must be host:port";
    if (bad != NULL) {
      int r = *s ? value_error(v, n, key, bad, s, false) : verr(v, n, key, 0, "%s", bad);
      free(s);
      return r;
    }
    set_str(cfg, f, s);
    return 0;
  }
  case F_INT: {
    int64_t x = 0;
    if (get_int(v, n, key, f->positive, f->max, f->neg_msg, &x) < 0)
      return -1;
    *FIELD(cfg, f, int) = (int) x;
    return 0;
  }
  case F_I64:
    return get_int(v, n, key, f->positive, f->max, f->neg_msg, FIELD(cfg, f, int64_t));
  case F_U64: {
    int64_t x = 0;
    if (get_int(v, n, key, f->positive, f->max, f->neg_msg, &x) < 0)
      return -1;
    *FIELD(cfg, f, uint64_t) = (uint64_t) x;
    return 0;
  }
  case F_DBL:
    return get_num(v, n, key, f->positive, f->max, FIELD(cfg, f, double));
  case F_BOOL:
    return get_bool(v, n, key, FIELD(cfg, f, bool));
  case F_IGNORED_BOOL: {
    bool ignored;
    return get_bool(v, n, key, &ignored);
  }
  case F_ENV:
    return parse_env(v, cfg, n, key);
  case F_NETPOL:
    return parse_netpol(v, cfg, n, key);
  case F_MOUNTS:
    return parse_mounts(v, cfg, n, key);
  case F_ROOTS:
    return parse_roots(v, cfg, n, key);
  case F_IMAGES:
    return parse_images(v, cfg, n, key);
  case F_REGISTRIES:
    return parse_registries(v, cfg, n, key);
  case F_MIRRORS:
    return parse_mirrors(v, cfg, n, key);
  default:
    return verr(v, n, key, 0, "internal error: unhandled field type");
  }
}

static int parse_block(const struct vctx *v, struct sbx_config *cfg, const struct node *n,
                       const char *block, const struct field *fields, size_t nfields)
{
  if (n->null)
    return 0;
  if (n->type != NODE_MAP)
    return type_error(v, n, block, "a mapping");
  for (size_t i = 0; i + 1 < n->n; i += 2) {
    const struct node *k = n->kids[i], *val = n->kids[i + 1];
    if (k->type != NODE_SCALAR)
      return verr(v, k, block, 0, "keys must be strings");
    const struct field *f = NULL;
    for (size_t j = 0; j < nfields && f == NULL; j++)
      if (text_is(k, fields[j].name))
        f = &fields[j];
    cleanup_free char *ks = show(k->text, k->len);
    cleanup_free char *key = xasprintf("%s.%s", block, ks);
    if (f == NULL)
      return verr(v, k, key, 0, "unknown key");
    if (parse_field(v, cfg, f, val, key) < 0)
      return -1;
  }
  return 0;
}

/* ---- Defaults, load, free ---- */

static char *env_nonempty(const char *name)
{
  const char *s = getenv(name);
  return s != NULL && *s != '\0' ? xstrdup(s) : NULL;
}

static struct sbx_config *config_alloc(void)
{
  struct sbx_config *cfg = xzalloc(sizeof *cfg);
  cfg->replicas = 3;
  cfg->idle_timeout = 600;
  cfg->bash_command_timeout = 600;
  cfg->memory_mib = 1024;
  cfg->cpus = 0;
  cfg->pids = 1024;
  /* an ordinary user often has no delegated cgroup: warn there instead (docs/hosts.md) */
  cfg->cgroup_required = geteuid() == 0;
  cfg->map_host_root = true;
  cfg->output_max_bytes = UINT64_C(10) << 20;
  cfg->bash_output_max_chars = 20000;
  cfg->read_file_output_max_chars = 50000;
  cfg->ls_output_max_chars = 20000;
  cfg->tmp_size_mib = 1024;
  cfg->home_size_mib = 256;
  cfg->image_layer_max_mib = 16384;
  cfg->image_layer_max_entries = 1000000;
  cfg->image_max_mib = 32768;
  cfg->image_min_free_mib = 1024;
  cfg->health_check_timeout = 10;
  cfg->request_timeout = 30;
  cfg->ready_timeout = 30;
  cfg->use_server_proxy = false;
  cfg->sandbox_timeout = 14400;
  cfg->max_sandbox_timeout = 86400;
  cfg->pty_grace = 60;
  cfg->pty_max_sessions = 16;
  cfg->pty_buffer = 1 << 20;
  cfg->max_sandboxes = 64;
  cfg->max_sandboxes_per_user = 32;
  cfg->memory_overcommit = 4;
  cfg->max_connections = 1024;
  cfg->max_connections_per_address = 256;
  cfg->connections_reserve = 64;
  cfg->head_timeout = 10;
  return cfg;
}

/* Defaults that depend on other keys or on the environment, applied after parsing. */
static void config_finish(struct sbx_config *cfg)
{
  if (cfg->use == NULL)
    cfg->use = xstrdup("linux");
  if (cfg->image == NULL)
    cfg->image = xstrdup(strcmp(cfg->use, "opensandbox") == 0 ? "python:3.11" : "host");
  if (cfg->network == NULL)
    cfg->network = xstrdup("none");
  if (cfg->cgroup_manager == NULL)
    cfg->cgroup_manager = xstrdup("auto");
  if (cfg->cgroup_slice == NULL)
    cfg->cgroup_slice = xstrdup("sbx.slice");
  if (cfg->protocol == NULL)
    cfg->protocol = xstrdup("http");
  if (cfg->api_key == NULL)
    cfg->api_key = env_nonempty("OPEN_SANDBOX_API_KEY");
  if (cfg->domain == NULL)
    cfg->domain = env_nonempty("OPEN_SANDBOX_DOMAIN");
  if (cfg->domain == NULL)
    cfg->domain = xstrdup(DEFAULT_DOMAIN);
  if (cfg->listen == NULL)
    cfg->listen = xstrdup(DEFAULT_LISTEN);
  if (cfg->server_api_key == NULL)
    cfg->server_api_key = env_nonempty("OPEN_SANDBOX_API_KEY");
}

struct sbx_config *sbx_config_new_default(void)
{
  struct sbx_config *cfg = config_alloc();
  config_finish(cfg);
  return cfg;
}

void sbx_config_free(struct sbx_config *cfg)
{
  if (cfg == NULL)
    return;
  free(cfg->path);
  free(cfg->use);
  free(cfg->image);
  for (size_t i = 0; i < cfg->n_environment; i++) {
    free(cfg->environment[i].key);
    free(cfg->environment[i].value);
  }
  free(cfg->environment);
  free(cfg->network);
  free(cfg->network_policy);
  free(cfg->cgroup_manager);
  free(cfg->cgroup_slice);
  for (size_t i = 0; i < cfg->n_mounts; i++) {
    free(cfg->mounts[i].host_path);
    free(cfg->mounts[i].container_path);
  }
  free(cfg->mounts);
  free(cfg->api_key);
  free(cfg->domain);
  free(cfg->protocol);
  free(cfg->listen);
  free(cfg->server_api_key);
  for (size_t i = 0; i < cfg->n_volume_roots; i++)
    free(cfg->volume_roots[i]);
  free(cfg->volume_roots);
  for (size_t i = 0; i < cfg->n_images; i++) {
    free(cfg->images[i].name);
    free(cfg->images[i].target);
  }
  free(cfg->images);
  for (size_t i = 0; i < cfg->n_registries; i++) {
    free(cfg->registries[i].host);
    free(cfg->registries[i].username);
    if (cfg->registries[i].password)
      explicit_bzero(cfg->registries[i].password, strlen(cfg->registries[i].password));
    free(cfg->registries[i].password);
  }
  free(cfg->registries);
  for (size_t i = 0; i < cfg->n_registry_mirrors; i++)
    free(cfg->registry_mirrors[i]);
  free(cfg->registry_mirrors);
  free(cfg);
}

struct sbx_config *sbx_config_load_string(const char *name, const char *yaml, size_t len,
                                          sbx_error_t *err)
{
  const char *label = name ? name : "<string>";
  if (yaml == NULL && len > 0) {
    sbx__make_error(err, EINVAL, SBX_E_INVALID, "%s: no configuration text", label);
    return NULL;
  }
  if (len > CONFIG_MAX_BYTES) {
    sbx__make_error(err, 0, SBX_E_CONFIG, "%s:1: file too large (max %zu bytes)", label,
                    CONFIG_MAX_BYTES);
    return NULL;
  }
  struct node *root = NULL;
  if (build_tree(label, yaml ? yaml : "", len, &root, err) < 0)
    return NULL;

  struct vctx v = {.name = label, .err = err};
  struct sbx_config *cfg = config_alloc();
  int r = 0;
  if (root != NULL && !root->null) {
    if (root->type != NODE_MAP) {
      cleanup_free char *got = describe(root);
      r = verr(&v, root, NULL, 0, "top level must be a mapping, got %s", got);
    }
    for (size_t i = 0; r == 0 && root->type == NODE_MAP && i + 1 < root->n; i += 2) {
      const struct node *k = root->kids[i], *val = root->kids[i + 1];
      if (text_is(k, "sandbox"))
        r = parse_block(&v, cfg, val, "sandbox", sandbox_fields, ARRAY_SIZE(sandbox_fields));
      else if (text_is(k, "sbxd"))
        r = parse_block(&v, cfg, val, "sbxd", sbxd_fields, ARRAY_SIZE(sbxd_fields));
    }
  }
  node_free(root);
  if (r < 0) {
    sbx_config_free(cfg);
    return NULL;
  }
  config_finish(cfg);
  cfg->path = name ? xstrdup(name) : NULL;
  return cfg;
}

struct sbx_config *sbx_config_load(const char *path, sbx_error_t *err)
{
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (path == NULL) {
    sbx__make_error(err, EINVAL, SBX_E_INVALID, "config: no path given");
    return NULL;
  }
  if (sbx__read_file_at(AT_FDCWD, path, CONFIG_MAX_BYTES, &data, &len) < 0) {
    if (errno == EFBIG)
      sbx__make_error(err, 0, SBX_E_CONFIG, "%s:1: file too large (max %zu bytes)", path,
                      CONFIG_MAX_BYTES);
    else
      sbx__make_error(err, errno, SBX_E_CONFIG, "%s: cannot read configuration", path);
    return NULL;
  }
  return sbx_config_load_string(path, data, len, err);
}

/* ---- Dump ---- */

/* Appends s as a double-quoted YAML scalar that libyaml reads back unchanged. Invalid UTF-8 and
 * characters libyaml refuses in input are escaped (an invalid byte becomes U+00XX). */
static void put_quoted(sbx_buf_t *b, const char *s)
{
  const unsigned char *p = (const unsigned char *) s;
  sbx__buf_putc(b, '"');
  while (*p) {
    unsigned char c = *p;
    uint32_t cp = c;
    size_t n = 1;
    if (c >= 0x80) {
      n = sbx__utf8_next(p, 4, &cp); /* (a NUL ends any sequence) */
      if (cp == SBX_UTF8_BAD) {
        sbx__buf_printf(b, "\\x%02X", c);
        p++;
        continue;
      }
    }
    if (cp == '"' || cp == '\\') {
      sbx__buf_putc(b, '\\');
      sbx__buf_putc(b, (char) cp);
    } else if (cp == '\n') {
      sbx__buf_puts(b, "\\n");
    } else if (cp == '\t') {
      sbx__buf_puts(b, "\\t");
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
      sbx__buf_printf(b, "\\x%02X", (unsigned) cp);
    } else if (cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF || cp == 0x2028 || cp == 0x2029) {
      sbx__buf_printf(b, "\\u%04X", (unsigned) cp);
    } else {
      sbx__buf_append(b, p, n);
    }
    p += n;
  }
  sbx__buf_putc(b, '"');
}

static void put_str(sbx_buf_t *b, const char *indent, const char *key, const char *val)
{
  sbx__buf_printf(b, "%s%s: ", indent, key);
  put_quoted(b, val);
  sbx__buf_putc(b, '\n');
}

/* Shortest text that reads back to the same double, in the C locale. */
static void put_num(sbx_buf_t *b, const char *indent, const char *key, double d)
{
  char buf[64];
  locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t) 0);
  locale_t old = c != (locale_t) 0 ? uselocale(c) : (locale_t) 0;
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (strtod(buf, NULL) == d)
      break;
  }
  if (c != (locale_t) 0) {
    uselocale(old);
    freelocale(c);
  }
  sbx__buf_printf(b, "%s%s: %s\n", indent, key, buf);
}

static bool secret_name(const char *k)
{
  static const char *const pats[] = {"KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL"};
  for (size_t i = 0; i < ARRAY_SIZE(pats); i++)
    if (strcasestr(k, pats[i]) != NULL)
      return true;
  return false;
}

char *sbx_config_dump(const struct sbx_config *cfg)
{
  if (cfg == NULL)
    return NULL;
  sbx_buf_t b = {0};
  const char *in = "  ";
  sbx__buf_puts(&b, "# sbx effective configuration (secrets masked)\n");
  if (cfg->path != NULL) {
    cleanup_free char *p = show_str(cfg->path);
    sbx__buf_printf(&b, "# source: %s\n", p);
  }
  sbx__buf_puts(&b, "sandbox:\n");
  put_str(&b, in, "use", cfg->use ? cfg->use : "linux");
  put_str(&b, in, "image", cfg->image ? cfg->image : "host");
  sbx__buf_printf(&b, "  replicas: %d\n", cfg->replicas);
  sbx__buf_printf(&b, "  idle_timeout: %" PRId64 "\n", cfg->idle_timeout);
  put_num(&b, in, "bash_command_timeout", cfg->bash_command_timeout);
  if (cfg->n_environment == 0)
    sbx__buf_puts(&b, "  environment: {}\n");
  else
    sbx__buf_puts(&b, "  environment:\n");
  for (size_t i = 0; i < cfg->n_environment; i++) {
    const struct sbx_env_var *e = &cfg->environment[i];
    sbx__buf_puts(&b, "    ");
    put_quoted(&b, e->key);
    if (e->secret || secret_name(e->key)) {
      sbx__buf_puts(&b, ": " MASK "\n");
    } else {
      sbx__buf_puts(&b, ": ");
      put_quoted(&b, e->value);
      sbx__buf_putc(&b, '\n');
    }
  }
  sbx__buf_printf(&b, "  memory_mib: %" PRIu64 "\n", cfg->memory_mib);
  put_num(&b, in, "cpus", cfg->cpus);
  sbx__buf_printf(&b, "  pids: %" PRId64 "\n", cfg->pids);
  put_str(&b, in, "network", cfg->network ? cfg->network : "none");
  if (cfg->network_policy) /* JSON is YAML's flow style */
    sbx__buf_printf(&b, "  network_policy: %s\n", cfg->network_policy);
  if (cfg->n_mounts == 0)
    sbx__buf_puts(&b, "  mounts: []\n");
  else
    sbx__buf_puts(&b, "  mounts:\n");
  for (size_t i = 0; i < cfg->n_mounts; i++) {
    const struct sbx_mount *m = &cfg->mounts[i];
    put_str(&b, "    - ", "host_path", m->host_path ? m->host_path : "");
    put_str(&b, "      ", "container_path", m->container_path ? m->container_path : "");
    sbx__buf_printf(&b, "      read_only: %s\n", m->read_only ? "true" : "false");
  }
  sbx__buf_printf(&b, "  output_max_bytes: %" PRIu64 "\n", cfg->output_max_bytes);
  sbx__buf_printf(&b, "  bash_output_max_chars: %" PRId64 "\n", cfg->bash_output_max_chars);
  sbx__buf_printf(&b, "  read_file_output_max_chars: %" PRId64 "\n",
                  cfg->read_file_output_max_chars);
  sbx__buf_printf(&b, "  ls_output_max_chars: %" PRId64 "\n", cfg->ls_output_max_chars);
  sbx__buf_printf(&b, "  tmp_size_mib: %" PRIu64 "\n", cfg->tmp_size_mib);
  sbx__buf_printf(&b, "  home_size_mib: %" PRIu64 "\n", cfg->home_size_mib);
  sbx__buf_printf(&b, "  user_data_size_mib: %" PRIu64 "\n", cfg->user_data_size_mib);
  sbx__buf_printf(&b, "  disk_mib: %" PRIu64 "\n", cfg->disk_mib);
  sbx__buf_printf(&b, "  image_layer_max_mib: %" PRIu64 "\n", cfg->image_layer_max_mib);
  sbx__buf_printf(&b, "  image_layer_max_entries: %" PRIu64 "\n", cfg->image_layer_max_entries);
  sbx__buf_printf(&b, "  image_max_mib: %" PRIu64 "\n", cfg->image_max_mib);
  sbx__buf_printf(&b, "  image_min_free_mib: %" PRIu64 "\n", cfg->image_min_free_mib);
  sbx__buf_printf(&b, "  health_check_timeout: %" PRId64 "\n", cfg->health_check_timeout);
  put_num(&b, in, "health_check_skip_seconds", cfg->health_check_skip_seconds);
  sbx__buf_printf(&b, "  spares: %d\n", cfg->spares);
  sbx__buf_printf(&b, "  max_sandboxes: %d\n", cfg->max_sandboxes);
  sbx__buf_printf(&b, "  max_sandboxes_per_user: %d\n", cfg->max_sandboxes_per_user);
  put_num(&b, in, "memory_overcommit", cfg->memory_overcommit);
  put_str(&b, in, "cgroup_manager", cfg->cgroup_manager ? cfg->cgroup_manager : "auto");
  sbx__buf_printf(&b, "  cgroup_required: %s\n", cfg->cgroup_required ? "true" : "false");
  put_str(&b, in, "cgroup_slice", cfg->cgroup_slice ? cfg->cgroup_slice : "sbx.slice");
  sbx__buf_printf(&b, "  map_host_root: %s\n", cfg->map_host_root ? "true" : "false");
  sbx__buf_puts(&b, cfg->n_registries ? "  registries:\n" : "  registries: {}\n");
  for (size_t i = 0; i < cfg->n_registries; i++) {
    const struct sbx_registry *r = &cfg->registries[i];
    sbx__buf_puts(&b, "    ");
    put_quoted(&b, r->host);
    sbx__buf_printf(&b, ":\n      insecure: %s\n", r->insecure ? "true" : "false");
    if (r->username) {
      sbx__buf_puts(&b, "      username: ");
      put_quoted(&b, r->username);
      sbx__buf_puts(&b, "\n      password: " MASK "\n");
    }
  }
  sbx__buf_puts(&b, cfg->n_registry_mirrors ? "  registry_mirrors:\n" : "  registry_mirrors: []\n");
  for (size_t i = 0; i < cfg->n_registry_mirrors; i++) {
    sbx__buf_puts(&b, "    - ");
    put_quoted(&b, cfg->registry_mirrors[i]);
    sbx__buf_putc(&b, '\n');
  }
  if (cfg->api_key != NULL)
    sbx__buf_puts(&b, "  api_key: " MASK "\n");
  put_str(&b, in, "domain", cfg->domain ? cfg->domain : DEFAULT_DOMAIN);
  put_str(&b, in, "protocol", cfg->protocol ? cfg->protocol : "http");
  put_num(&b, in, "request_timeout", cfg->request_timeout);
  put_num(&b, in, "ready_timeout", cfg->ready_timeout);
  sbx__buf_printf(&b, "  use_server_proxy: %s\n", cfg->use_server_proxy ? "true" : "false");
  sbx__buf_printf(&b, "  sandbox_timeout: %" PRId64 "\n", cfg->sandbox_timeout);
  sbx__buf_puts(&b, "sbxd:\n");
  put_str(&b, in, "listen", cfg->listen ? cfg->listen : DEFAULT_LISTEN);
  if (cfg->server_api_key != NULL)
    sbx__buf_puts(&b, "  api_key: " MASK "\n");
  if (cfg->n_volume_roots == 0)
    sbx__buf_puts(&b, "  volume_roots: []\n");
  else
    sbx__buf_puts(&b, "  volume_roots:\n");
  for (size_t i = 0; i < cfg->n_volume_roots; i++) {
    sbx__buf_puts(&b, "    - ");
    put_quoted(&b, cfg->volume_roots[i]);
    sbx__buf_putc(&b, '\n');
  }
  sbx__buf_printf(&b, "  max_sandbox_timeout: %" PRId64 "\n", cfg->max_sandbox_timeout);
  if (cfg->n_images == 0)
    sbx__buf_puts(&b, "  images: {}\n");
  else
    sbx__buf_puts(&b, "  images:\n");
  for (size_t i = 0; i < cfg->n_images; i++) {
    sbx__buf_puts(&b, "    ");
    put_quoted(&b, cfg->images[i].name);
    sbx__buf_puts(&b, ": ");
    put_quoted(&b, cfg->images[i].target);
    sbx__buf_putc(&b, '\n');
  }
  put_num(&b, in, "pty_grace", cfg->pty_grace);
  sbx__buf_printf(&b, "  pty_max_sessions: %" PRId64 "\n", cfg->pty_max_sessions);
  sbx__buf_printf(&b, "  pty_buffer: %" PRId64 "\n", cfg->pty_buffer);
  sbx__buf_printf(&b, "  max_connections: %" PRId64 "\n", cfg->max_connections);
  sbx__buf_printf(&b, "  max_connections_per_address: %" PRId64 "\n",
                  cfg->max_connections_per_address);
  sbx__buf_printf(&b, "  connections_reserve: %" PRId64 "\n", cfg->connections_reserve);
  put_num(&b, in, "head_timeout", cfg->head_timeout);
  return sbx__buf_steal(&b);
}
