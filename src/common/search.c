/* DeerFlow's search helpers, native: the ignore list, path_matches, list_dir, glob and grep over
 * directory fds (openat + O_NOFOLLOW below the root, never path strings re-resolved), with the
 * limit+1 truncation rule. See search.h for the contract. */
#include "search.h"
#include "text.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <locale.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <string.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */

/* Like sbx_make_error but keeps the message exact (no strerror text appended) while still
 * recording the errno value in status. */
static int set_error(sbx_error_t *err, int status, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int set_error(sbx_error_t *err, int status, int kind, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  return sbx_error_set(err, status, kind, msg);
}

/* ------------------------------------------------------------------------------------------ */
/* The ignore list (contract §5.1)                                                             */

/* Every one of the 50 patterns is either a plain name or has exactly one '*' and no other
 * fnmatch metacharacter, so fnmatch(pattern, segment, 0) reduces to "equal" or "starts with pre
 * and ends with suf". The unit tests check this equivalence against fnmatch(3) itself. */
typedef struct {
  const char *pattern;
  const char *pre;
  const char *suf;
  unsigned char prelen;
  unsigned char suflen;
  bool star;
} ignore_pat_t;

// clang-format off
#define IG_NAME(s) {s, s, "", sizeof(s) - 1, 0, false}
#define IG_SUFFIX(s) {"*" s, "", s, 0, sizeof(s) - 1, true}
#define IG_PRESUF(p, s) {p "*" s, p, s, sizeof(p) - 1, sizeof(s) - 1, true}
// clang-format on

static const ignore_pat_t ignore_patterns[] = {
    IG_NAME(".git"),        IG_NAME(".svn"),         IG_NAME(".hg"),
    IG_NAME(".bzr"),        IG_NAME("node_modules"), IG_NAME("__pycache__"),
    IG_NAME(".venv"),       IG_NAME("venv"),         IG_NAME(".env"),
    IG_NAME("env"),         IG_NAME(".tox"),         IG_NAME(".nox"),
    IG_NAME(".eggs"),       IG_SUFFIX(".egg-info"),  IG_NAME("site-packages"),
    IG_NAME("dist"),        IG_NAME("build"),        IG_NAME(".next"),
    IG_NAME(".nuxt"),       IG_NAME(".output"),      IG_NAME(".turbo"),
    IG_NAME("target"),      IG_NAME("out"),          IG_NAME(".idea"),
    IG_NAME(".vscode"),     IG_SUFFIX(".swp"),       IG_SUFFIX(".swo"),
    IG_SUFFIX("~"),         IG_NAME(".project"),     IG_NAME(".classpath"),
    IG_NAME(".settings"),   IG_NAME(".DS_Store"),    IG_NAME("Thumbs.db"),
    IG_NAME("desktop.ini"), IG_SUFFIX(".lnk"),       IG_SUFFIX(".log"),
    IG_SUFFIX(".tmp"),      IG_SUFFIX(".temp"),      IG_PRESUF(".upload-", ".part"),
    IG_SUFFIX(".bak"),      IG_SUFFIX(".cache"),     IG_NAME(".cache"),
    IG_NAME("logs"),        IG_NAME(".coverage"),    IG_NAME("coverage"),
    IG_NAME(".nyc_output"), IG_NAME("htmlcov"),      IG_NAME(".pytest_cache"),
    IG_NAME(".mypy_cache"), IG_NAME(".ruff_cache"),
};

_Static_assert(sizeof(ignore_patterns) / sizeof(ignore_patterns[0]) == 50,
               "the DeerFlow ignore list has exactly 50 patterns");

bool sbx_search_ignored_segment(const char *segment, size_t len)
{
  if (segment == NULL || len == 0)
    return false;
  for (size_t i = 0; i < ARRAY_SIZE(ignore_patterns); i++) {
    const ignore_pat_t *p = &ignore_patterns[i];
    if (!p->star) {
      if (len == p->prelen && memcmp(segment, p->pre, len) == 0)
        return true;
      continue;
    }
    if (len < (size_t) p->prelen + p->suflen)
      continue;
    if (memcmp(segment, p->pre, p->prelen) == 0 &&
        memcmp(segment + len - p->suflen, p->suf, p->suflen) == 0)
      return true;
  }
  return false;
}

bool sbx_search_ignored_path(const char *rel_path)
{
  if (rel_path == NULL)
    return false;
  const char *s = rel_path;
  while (*s) {
    const char *e = strchrnul(s, '/');
    if (e > s && sbx_search_ignored_segment(s, (size_t) (e - s)))
      return true;
    s = *e ? e + 1 : e;
  }
  return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Locales: fnmatch and regex run under a per-thread C.UTF-8 locale (uselocale, never           */
/* setlocale) so '?', '.', brackets and REG_ICASE see code points. Created once, kept for the  */
/* life of the process.                                                                         */

static pthread_once_t locale_once = PTHREAD_ONCE_INIT;
static locale_t locale_c;
static locale_t locale_utf8;

static void locale_init(void)
{
  locale_c = newlocale(LC_ALL_MASK, "C", (locale_t) 0);
  if (locale_c == (locale_t) 0)
    locale_c = LC_GLOBAL_LOCALE;
  locale_utf8 = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t) 0);
  if (locale_utf8 == (locale_t) 0)
    locale_utf8 = newlocale(LC_ALL_MASK, "C.utf8", (locale_t) 0);
  if (locale_utf8 == (locale_t) 0)
    locale_utf8 = locale_c;
}

static void locales_get(void)
{
  pthread_once(&locale_once, locale_init);
}

static bool str_is_ascii(const char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s >= 0x80)
      return false;
  return true;
}

/* fnmatch(3) without flags (no FNM_PATHNAME, no FNM_PERIOD: '*' matches a leading dot; '\\'
 * escapes), case-sensitive. Pure ASCII runs in the C locale (fast path, same answer); anything
 * else in C.UTF-8 so '?' and brackets match code points, with a byte-wise retry should glibc
 * ever reject the input as invalid multibyte text. */
static bool seg_fnmatch(const char *pat, bool pat_ascii, const char *str)
{
  locales_get();
  bool ascii = pat_ascii && str_is_ascii(str);
  locale_t old = uselocale(ascii ? locale_c : locale_utf8);
  int r = fnmatch(pat, str, 0);
  if (r != 0 && r != FNM_NOMATCH && !ascii) {
    uselocale(locale_c);
    r = fnmatch(pat, str, 0);
  }
  uselocale(old);
  return r == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* path_matches (contract §5.2)                                                                */

/* A compiled pattern. Unanchored (no '/'): one segment tested against the basename. Anchored:
 * segments matched one path segment each, "**" (seg[i] == NULL) zero or more whole segments,
 * run as an NFA over the set of pattern positions, so the cost is O(segments x path depth)
 * whatever the number of "**". */
typedef struct {
  char *buf;
  char **seg;
  bool *ascii;
  size_t n;
  bool anchored;
  bool never;
} pathpat_t;

static void pathpat_init(pathpat_t *pp, const char *pattern)
{
  memset(pp, 0, sizeof *pp);
  if (pattern == NULL || pattern[0] == '\0' || pattern[0] == '/') {
    pp->never = true;
    return;
  }
  size_t len = strlen(pattern);
  while (len > 0 && pattern[len - 1] == '/')
    len--;
  pp->buf = xstrndup(pattern, len);
  pp->anchored = memchr(pp->buf, '/', len) != NULL;
  size_t max_segs = 1;
  for (size_t i = 0; i < len; i++)
    if (pp->buf[i] == '/')
      max_segs++;
  pp->seg = xreallocarray(NULL, max_segs, sizeof(char *));
  pp->ascii = xreallocarray(NULL, max_segs, sizeof(bool));
  char *s = pp->buf;
  for (;;) {
    char *e = strchrnul(s, '/');
    bool last = *e == '\0';
    *e = '\0';
    if (*s) {
      pp->seg[pp->n] = strcmp(s, "**") == 0 && pp->anchored ? NULL : s;
      pp->ascii[pp->n] = str_is_ascii(s);
      pp->n++;
    }
    if (last)
      break;
    s = e + 1;
  }
  if (pp->n == 0)
    pp->never = true;
}

static void pathpat_fini(pathpat_t *pp)
{
  free(pp->buf);
  free(pp->seg);
  free(pp->ascii);
  memset(pp, 0, sizeof *pp);
}

/* st has n+1 slots; st[n] = the whole pattern has been consumed. */
static void pathpat_closure(const pathpat_t *pp, bool *st)
{
  for (size_t i = 0; i < pp->n; i++)
    if (st[i] && pp->seg[i] == NULL)
      st[i + 1] = true;
}

static void pathpat_start(const pathpat_t *pp, bool *st)
{
  memset(st, 0, pp->n + 1);
  st[0] = true;
  pathpat_closure(pp, st);
}

/* Consumes one path segment; returns whether any state is still alive. */
static bool pathpat_step(const pathpat_t *pp, const bool *in, const char *name, bool *out)
{
  memset(out, 0, pp->n + 1);
  bool alive = false;
  for (size_t i = 0; i < pp->n; i++) {
    if (!in[i])
      continue;
    if (pp->seg[i] == NULL) {
      out[i] = true;
      alive = true;
    } else if (seg_fnmatch(pp->seg[i], pp->ascii[i], name)) {
      out[i + 1] = true;
      alive = true;
    }
  }
  if (alive)
    pathpat_closure(pp, out);
  return alive;
}

static bool pathpat_match_basename(const pathpat_t *pp, const char *name)
{
  return !pp->never && seg_fnmatch(pp->seg[0], pp->ascii[0], name);
}

/* Runs a compiled pattern over a relative path (modified in place: '/' become NULs). Empty
 * segments are skipped; a path without a non-empty segment matches nothing. */
static bool pathpat_match_path(const pathpat_t *pp, char *path)
{
  if (pp->never)
    return false;
  if (!pp->anchored) {
    size_t len = strlen(path);
    while (len > 0 && path[len - 1] == '/')
      path[--len] = '\0';
    if (len == 0)
      return false;
    char *base = strrchr(path, '/');
    return pathpat_match_basename(pp, base ? base + 1 : path);
  }
  cleanup_free bool *a = xmalloc(pp->n + 1);
  cleanup_free bool *b = xmalloc(pp->n + 1);
  pathpat_start(pp, a);
  bool any = false;
  char *s = path;
  for (;;) {
    char *e = strchrnul(s, '/');
    bool last = *e == '\0';
    *e = '\0';
    if (*s) {
      any = true;
      if (!pathpat_step(pp, a, s, b))
        return false;
      bool *t = a;
      a = b;
      b = t;
    }
    if (last)
      break;
    s = e + 1;
  }
  return any && a[pp->n];
}

bool sbx_path_matches(const char *pattern, const char *rel_path)
{
  if (rel_path == NULL)
    return false;
  pathpat_t pp;
  pathpat_init(&pp, pattern);
  cleanup_free char *path = pp.never ? NULL : xstrdup(rel_path);
  bool ok = path != NULL && pathpat_match_path(&pp, path);
  pathpat_fini(&pp);
  return ok;
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8                                                                                       */

/* Length of the sequence at s (1..4) and whether it is well-formed (text.h's decoder). */
static size_t utf8_next(const unsigned char *s, size_t n, bool *valid)
{
  uint32_t cp;
  size_t l = sbx_utf8_next(s, n, &cp);
  *valid = cp != SBX_UTF8_BAD;
  return l;
}

/* Code points of arbitrary bytes as decoded with replacement. */
static size_t utf8_count_lossy(const char *data, size_t n)
{
  const unsigned char *s = (const unsigned char *) data;
  size_t c = 0;
  for (size_t i = 0; i < n; c++) {
    bool ok;
    i += s[i] < 0x80 ? 1 : utf8_next(s + i, n - i, &ok);
  }
  return c;
}

static const char replacement_char[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Appends data to b with every ill-formed subsequence replaced by one U+FFFD. */
static void utf8_sanitize(sbx_buf_t *b, const char *data, size_t n)
{
  const unsigned char *s = (const unsigned char *) data;
  size_t i = 0;
  sbx_buf_reserve(b, n);
  while (i < n) {
    size_t start = i;
    while (i < n && s[i] < 0x80)
      i++;
    bool ok = true;
    size_t l = 0;
    if (i < n) {
      l = utf8_next(s + i, n - i, &ok);
      if (ok)
        i += l;
    }
    sbx_buf_append(b, data + start, i - start);
    if (!ok) {
      sbx_buf_append(b, replacement_char, 3);
      i += l;
    }
  }
}

char *sbx_grep_summarize_line(const char *line, size_t len)
{
  if (line == NULL)
    len = 0;
  if (len > 0 && line[len - 1] == '\r')
    len--;
  const unsigned char *s = (const unsigned char *) line;
  sbx_buf_t b = {0};
  size_t count = 0, cut = 0; /* cut: output bytes after SUMMARY_CHARS - 3 code points */
  size_t i = 0;
  while (i < len) {
    bool ok = true;
    size_t l = s[i] < 0x80 ? 1 : utf8_next(s + i, len - i, &ok);
    count++;
    if (count > SBX_SEARCH_MAX_LINE_CHARS) {
      sbx_buf_free(&b);
      return NULL;
    }
    if (count <= SBX_SEARCH_SUMMARY_CHARS) {
      if (ok)
        sbx_buf_append(&b, line + i, l);
      else
        sbx_buf_append(&b, replacement_char, 3);
      if (count == SBX_SEARCH_SUMMARY_CHARS - 3)
        cut = b.len;
    }
    i += l;
  }
  if (count > SBX_SEARCH_SUMMARY_CHARS) {
    b.len = cut;
    sbx_buf_append(&b, "...", 3);
  }
  return sbx_buf_steal(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* Grep matches                                                                                */

void sbx_search_matches_push(sbx_grep_matches_t *m, const char *path, uint64_t line_number,
                             const char *line, size_t len)
{
  if (m->n + 1 > m->cap) {
    m->cap = m->cap ? m->cap * 2 : 16;
    m->v = xreallocarray(m->v, m->cap, sizeof *m->v);
  }
  sbx_grep_match_t *e = &m->v[m->n++];
  e->path = xstrdup(path);
  e->line_number = line_number;
  e->line = xstrndup(line ? line : "", line ? len : 0);
}

void sbx_search_matches_free(sbx_grep_matches_t *m)
{
  for (size_t i = 0; i < m->n; i++) {
    free(m->v[i].path);
    free(m->v[i].line);
  }
  free(m->v);
  m->v = NULL;
  m->n = m->cap = 0;
}

static void grep_matches_pop(sbx_grep_matches_t *m)
{
  if (m->n == 0)
    return;
  m->n--;
  free(m->v[m->n].path);
  free(m->v[m->n].line);
}

/* ------------------------------------------------------------------------------------------ */
/* Grep patterns                                                                               */

/* Text classes, from one scan of a file or line: pure ASCII runs regexes compiled in the C
 * locale (same answers, several times faster than glibc's multibyte matcher). */
enum { TEXT_ASCII, TEXT_UTF8, TEXT_INVALID };

static int text_class(const char *data, size_t n)
{
  const unsigned char *s = (const unsigned char *) data;
  size_t i = 0;
  int cls = TEXT_ASCII;
  while (i < n) {
    i += sbx_ascii_run(s + i, n - i);
    if (i >= n)
      break;
    bool ok;
    i += utf8_next(s + i, n - i, &ok);
    if (!ok)
      return TEXT_INVALID;
    cls = TEXT_UTF8;
  }
  return cls;
}

/* A fixed string to find, case-sensitive or with ASCII case folding. Like GNU grep, it jumps
 * from one occurrence of the needle's rarest byte to the next with memchr (vectorized in
 * glibc), two memchr streams for a letter when folding, and compares around each. */
typedef struct {
  char *s; /* folded if icase */
  size_t n;
  bool icase;
  size_t rare; /* index of the byte to look for */
} needle_t;

static inline unsigned char fold_ascii(unsigned char c)
{
  return c >= 'A' && c <= 'Z' ? (unsigned char) (c + ('a' - 'A')) : c;
}

/* A rough frequency of a byte in source code and prose (higher = more common). */
static int byte_frequency(unsigned char c)
{
  static const char letters[] = "zqjxkvbywgpfmucdlhrsnioate"; /* rarest first */
  if (c >= 'a' && c <= 'z')
    return 20 + 3 * (int) (strchr(letters, c) - letters);
  if (c >= 'A' && c <= 'Z')
    return 10 + (int) (strchr(letters, c + ('a' - 'A')) - letters);
  if (c == ' ')
    return 100;
  if (c >= '0' && c <= '9')
    return 40;
  if (strchr("_.,()=;\"'/-:\t", c))
    return 50;
  if (c >= 0x80)
    return 15;
  return 10; /* other punctuation */
}

static void needle_init(needle_t *nd, const char *s, size_t n, bool icase)
{
  nd->s = xstrndup(s, n);
  nd->n = n;
  nd->icase = icase;
  nd->rare = 0;
  int best = 1000;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char) nd->s[i];
    if (icase)
      nd->s[i] = (char) (c = fold_ascii(c));
    int f = byte_frequency(c);
    if (f < best) {
      best = f;
      nd->rare = i;
    }
  }
}

static void needle_fini(needle_t *nd)
{
  free(nd->s);
  nd->s = NULL;
}

static bool needle_at(const needle_t *nd, const char *p)
{
  if (!nd->icase)
    return memcmp(p, nd->s, nd->n) == 0;
  for (size_t j = 0; j < nd->n; j++)
    if (fold_ascii((unsigned char) p[j]) != (unsigned char) nd->s[j])
      return false;
  return true;
}

/* The next c in [q, end), or NULL. */
static const char *next_byte(const char *q, const char *end, unsigned char c)
{
  return q < end ? memchr(q, c, (size_t) (end - q)) : NULL;
}

/* Offset of the first occurrence in hay[0..n), or -1. */
static ssize_t needle_find(const needle_t *nd, const char *hay, size_t n)
{
  size_t m = nd->n, k = nd->rare;
  if (m == 0)
    return 0;
  if (m > n)
    return -1;
  unsigned char c = (unsigned char) nd->s[k];
  const char *end = hay + (n - m) + k + 1; /* past the rare byte of the last possible start */
  bool two = nd->icase && c >= 'a' && c <= 'z';
  unsigned char c2 = (unsigned char) (c - ('a' - 'A'));
  const char *q1 = next_byte(hay + k, end, c);
  const char *q2 = two ? next_byte(hay + k, end, c2) : NULL;
  while (q1 || q2) {
    bool first = q1 && (!q2 || q1 < q2);
    const char *q = first ? q1 : q2;
    if (needle_at(nd, q - k))
      return (q - k) - hay;
    if (first)
      q1 = next_byte(q1 + 1, end, c);
    else
      q2 = next_byte(q2 + 1, end, c2);
  }
  return -1;
}

enum {
  PK_LITERAL, /* fixed string: case-sensitive, or ASCII case-insensitive */
  PK_REGEX,   /* POSIX ERE (also a non-ASCII case-insensitive literal, escaped) */
};

/* A required literal is worth a prefilter from 2 bytes, or 1 byte if rare in text. */
static bool must_worth_it(const char *s, size_t n)
{
  return n >= 2 || (n == 1 && byte_frequency((unsigned char) s[0]) <= 40);
}

struct sbx_grep_pattern_s {
  int kind;
  /* Whole-buffer search is ruled out by a '\n' in the pattern (lines never hold one) and by
   * glibc's buffer anchors \` and \' (they match only at the ends of the searched string). */
  bool line_by_line;
  /* A back-reference makes glibc backtrack, exponentially in the line's length: such a pattern
   * is matched in a killable worker process (grep_in_worker). Without one, regexec with
   * REG_NOSUB is glibc's DFA, polynomial: matched in-process. */
  bool backrefs;
  needle_t lit; /* PK_LITERAL */
  regex_t re;   /* PK_REGEX, compiled in C.UTF-8 (or C if unavailable), REG_NOSUB */
  locale_t loc;
  regex_t re_c; /* the same regex compiled in the C locale, for ASCII text (ASCII patterns) */
  bool has_re_c;
  /* A literal every match contains, to find candidate lines before running the regex: must for
   * ASCII text (and any text when case-sensitive), must_safe for non-ASCII text when
   * case-insensitive, without the letters non-ASCII characters fold to (i, s, k: U+0131,
   * U+0130, U+017F, U+212A). */
  needle_t must, must_safe;
  bool has_must, has_must_safe;
  sbx_buf_t scratch; /* a sanitized / NUL-terminated copy of the line being matched */
};

/* Skips a bracket expression starting at s ('['); NULL if it is not closed. */
static const char *skip_bracket(const char *s)
{
  const char *p = s + 1;
  if (*p == '^')
    p++;
  if (*p == ']')
    p++;
  while (*p && *p != ']') {
    if (*p == '[' && (p[1] == ':' || p[1] == '=' || p[1] == '.')) {
      char close[3] = {p[1], ']', '\0'};
      const char *e = strstr(p + 2, close);
      if (e == NULL)
        return NULL;
      p = e + 2;
    } else {
      p++;
    }
  }
  return *p ? p + 1 : NULL;
}

static void must_commit(sbx_buf_t *cur, size_t *last, sbx_buf_t *best)
{
  if (cur->len > best->len) {
    best->len = 0;
    sbx_buf_append(best, cur->data, cur->len);
  }
  cur->len = 0;
  *last = 0;
}

/* The longest literal every match of the ERE must contain (conservative: groups, brackets,
 * escapes other than escaped punctuation and anything quantified break a run; a top-level '|'
 * gives none). With icase, non-ASCII characters break runs too. Returns its length. */
static size_t ere_required_literal(const char *pat, bool icase, sbx_buf_t *best)
{
  sbx_buf_t cur = {0};
  size_t last = 0; /* where the last literal character of cur starts */
  int depth = 0;
  const char *s = pat;
  bool ok = true;
  best->len = 0;
  while (ok && *s) {
    unsigned char c = (unsigned char) *s;
    if (depth > 0) {
      if (c == '\\') {
        ok = s[1] != '\0';
        s += ok ? 2 : 1;
      } else if (c == '[') {
        s = skip_bracket(s);
        ok = s != NULL;
      } else {
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        s++;
      }
      continue;
    }
    switch (c) {
    case '|':
    case ')':
      ok = false;
      break;
    case '(':
      must_commit(&cur, &last, best);
      depth++;
      s++;
      break;
    case '[':
      must_commit(&cur, &last, best);
      s = skip_bracket(s);
      ok = s != NULL;
      break;
    case '*':
    case '?':
    case '{':
      cur.len = last; /* the quantified character is optional */
      must_commit(&cur, &last, best);
      if (c == '{') {
        s = strchr(s, '}');
        ok = s != NULL;
      }
      if (ok)
        s++;
      break;
    case '+':
    case '.':
    case '^':
    case '$':
    case ']':
    case '}':
      must_commit(&cur, &last, best);
      s++;
      break;
    case '\\': {
      unsigned char n = (unsigned char) s[1];
      if (n == '\0') {
        ok = false;
        break;
      }
      if (n >= 0x80 || (n >= '0' && n <= '9') || (n >= 'a' && n <= 'z') || (n >= 'A' && n <= 'Z') ||
          strchr("`'<>", n)) {
        /* glibc's classes (\w \s ...), anchors (\b \< \> \` \' ...), back-references */
        must_commit(&cur, &last, best);
        s += 2;
        break;
      }
      last = cur.len;
      sbx_buf_putc(&cur, (char) n);
      s += 2;
      break;
    }
    default: {
      bool valid = true;
      size_t l = c < 0x80 ? 1 : utf8_next((const unsigned char *) s, strlen(s), &valid);
      if (c >= 0x80 && (icase || !valid)) {
        must_commit(&cur, &last, best);
      } else {
        last = cur.len;
        sbx_buf_append(&cur, s, l);
      }
      s += l;
      break;
    }
    }
  }
  if (ok)
    must_commit(&cur, &last, best);
  else
    best->len = 0;
  sbx_buf_free(&cur);
  return best->len;
}

/* glibc's regcomp copies a repeated subexpression once per repetition (x+ is x x*, x{m,n} is
 * max(m, n) copies) and its compile time grows faster than linearly in the copies: a{1,32767}
 * takes 40 s, twenty stacked '+' over a second. A bound on the copies (multiplied through
 * nesting) keeps any accepted pattern to a fraction of a second; realistic ones (\d{1,3},
 * .{0,200}, [a-z]{2,500}) are far below it. Parentheses are bounded too (the parser
 * recurses). And '+' on an operand that can match the empty string explodes glibc's epsilon
 * closures (each "()+" multiplies the time by five): there E+ means exactly E*, which costs
 * nothing, so such a '+' is rewritten (not with back-references, whose captures could differ). */
#define ERE_MAX_COPIES 5000.0
#define ERE_MAX_NESTING 256

typedef struct {
  double alts;      /* size of the finished alternatives */
  double cur;       /* size of the current one */
  double last;      /* size of the last atom, what a quantifier applies to */
  bool alts_null;   /* a finished alternative can match "" */
  bool prefix_null; /* the current alternative before its last atom can match "" */
  bool cur_null;    /* the current alternative can match "" */
  bool last_null;   /* the last atom can match "" (anywhere: anchors do not count) */
} ere_frame_t;

static void ere_frame_init(ere_frame_t *f)
{
  memset(f, 0, sizeof *f);
  f->prefix_null = f->cur_null = true;
}

/* True if an ERE holds a back-reference \\1..\\9 outside brackets (a "\\\\" pair is an escaped
 * backslash). */
static bool ere_has_backrefs(const char *pat)
{
  for (const char *s = pat; *s; s++) {
    if (*s == '[') {
      const char *e = skip_bracket(s);
      if (e == NULL)
        return false;
      s = e - 1;
    } else if (*s == '\\' && s[1]) {
      if (s[1] >= '1' && s[1] <= '9')
        return true;
      s++;
    }
  }
  return false;
}

/* Checks the cost of compiling pattern and returns the pattern to compile (a copy, maybe with
 * '+' rewritten), or NULL if it is too complex. */
static char *ere_prepare(const char *pat)
{
  ere_frame_t st[ERE_MAX_NESTING + 1];
  int d = 0;
  double copies = 0;
  bool backrefs = false;
  for (const char *s = pat; *s; s++)
    if (s[0] == '\\' && s[1] >= '1' && s[1] <= '9')
      backrefs = true;
  char *out = xstrdup(pat);
  ere_frame_init(&st[0]);
  for (const char *s = pat; *s && copies <= ERE_MAX_COPIES;) {
    ere_frame_t *f = &st[d];
    double atom = 1;
    bool atom_null = false;
    switch (*s) {
    case '(':
      if (d == ERE_MAX_NESTING) {
        free(out);
        return NULL;
      }
      ere_frame_init(&st[++d]);
      s++;
      continue;
    case ')':
      s++;
      if (d == 0)
        break; /* unmatched: regcomp decides */
      atom = f->alts + f->cur + 1;
      atom_null = f->alts_null || f->cur_null;
      d--;
      break;
    case '|':
      f->alts += f->cur + 1;
      f->alts_null = f->alts_null || f->cur_null;
      f->cur = f->last = 0;
      f->prefix_null = f->cur_null = true;
      f->last_null = false;
      s++;
      continue;
    case '*':
    case '?':
      f->cur += 1;
      f->last += 1;
      f->last_null = true;
      f->cur_null = f->prefix_null;
      s++;
      continue;
    case '+':
      if (f->last_null && !backrefs) {
        out[s - pat] = '*'; /* E+ = E* when E matches "" */
        f->cur += 1;
        f->last += 1;
      } else {
        copies += f->last;
        f->cur += f->last + 1;
        f->last = 2 * f->last + 1;
      }
      s++;
      continue;
    case '{': {
      char *e;
      double m = 0, n;
      const char *q = s + 1;
      if (*q >= '0' && *q <= '9') {
        m = strtod(q, &e);
        q = e;
      }
      n = m;
      if (*q == ',') {
        q++;
        n = m + 1;
        if (*q >= '0' && *q <= '9') {
          n = strtod(q, &e);
          q = e;
        }
      }
      if (*q != '}' || q == s + 1) {
        s++; /* not an interval: a literal '{' */
        break;
      }
      double k = m > n ? m : n;
      if (k < 1)
        k = 1;
      copies += f->last * (k - 1);
      f->cur += f->last * (k - 1) + 1;
      f->last = f->last * k + 1;
      f->last_null = f->last_null || m == 0;
      f->cur_null = f->prefix_null && f->last_null;
      s = q + 1;
      continue;
    }
    case '[': {
      const char *e = skip_bracket(s);
      if (e == NULL)
        return out; /* regcomp reports it */
      s = e;
      break;
    }
    case '\\':
      s += s[1] ? 2 : 1;
      break;
    default:
      s++;
      break;
    }
    f = &st[d];
    f->cur += atom;
    f->last = atom;
    f->prefix_null = f->cur_null;
    f->cur_null = f->cur_null && atom_null;
    f->last_null = atom_null;
  }
  if (copies > ERE_MAX_COPIES) {
    free(out);
    return NULL;
  }
  return out;
}

/* Backslash-escapes every ERE metacharacter so the regex matches the text literally. */
static char *ere_escape(const char *s)
{
  sbx_buf_t b = {0};
  for (; *s; s++) {
    if (strchr("\\.[]()*+?{}|^$", *s))
      sbx_buf_putc(&b, '\\');
    sbx_buf_putc(&b, *s);
  }
  return sbx_buf_steal(&b);
}

static int regex_compile(sbx_grep_pattern_t *p, const char *re, bool case_sensitive, char *errbuf,
                         size_t errlen)
{
  locales_get();
  /* REG_NOSUB: only "does it match" is ever asked. Without it glibc tracks every group through
   * its DFA: (.*)(.*)(.*)(.*)(.*)y takes 7 s on an 8000-byte line, and 0 with it. */
  int flags = REG_EXTENDED | REG_NEWLINE | REG_NOSUB | (case_sensitive ? 0 : REG_ICASE);
  p->loc = locale_utf8;
  locale_t old = uselocale(p->loc);
  int rc = regcomp(&p->re, re, flags);
  if (rc != 0 && errbuf)
    regerror(rc, &p->re, errbuf, errlen);
  if (rc == 0 && locale_utf8 != locale_c && str_is_ascii(re)) {
    uselocale(locale_c);
    p->has_re_c = regcomp(&p->re_c, re, flags) == 0;
  }
  uselocale(old);
  if (rc != 0)
    return rc;
  p->kind = PK_REGEX;
  sbx_buf_t must = {0};
  ere_required_literal(re, !case_sensitive, &must);
  if (must_worth_it(must.data, must.len)) {
    needle_init(&p->must, must.data, must.len, !case_sensitive);
    p->has_must = true;
    if (case_sensitive) {
      needle_init(&p->must_safe, must.data, must.len, false);
      p->has_must_safe = true;
    } else {
      /* the longest piece without i, s, k */
      size_t best = 0, best_at = 0;
      for (size_t i = 0; i < must.len;) {
        size_t j = i;
        while (j < must.len && !strchr("iskISK", must.data[j]))
          j++;
        if (j - i > best) {
          best = j - i;
          best_at = i;
        }
        i = j + 1;
      }
      if (must_worth_it(must.data + best_at, best)) {
        needle_init(&p->must_safe, must.data + best_at, best, true);
        p->has_must_safe = true;
      }
    }
  }
  sbx_buf_free(&must);
  return 0;
}

sbx_grep_pattern_t *sbx_grep_pattern_new(const char *pattern, bool literal, bool case_sensitive,
                                         sbx_error_t *err)
{
  if (pattern == NULL)
    pattern = "";
  sbx_grep_pattern_t *p = xzalloc(sizeof *p);
  p->line_by_line = strchr(pattern, '\n') != NULL ||
                    (!literal && (strstr(pattern, "\\`") || strstr(pattern, "\\'")));
  if (literal) {
    if (!case_sensitive && !str_is_ascii(pattern)) {
      /* REG_ICASE folds non-ASCII letters too; a pattern the UTF-8 locale cannot take (invalid
       * UTF-8) falls back to ASCII-only folding on bytes. */
      cleanup_free char *esc = ere_escape(pattern);
      if (regex_compile(p, esc, false, NULL, 0) == 0)
        return p;
    }
    p->kind = PK_LITERAL;
    needle_init(&p->lit, pattern, strlen(pattern), !case_sensitive);
    return p;
  }
  cleanup_free char *prepared = ere_prepare(pattern);
  if (prepared == NULL) {
    free(p);
    set_error(err, 0, SBX_E_INVALID,
              "invalid regular expression '%s': too complex (repetitions expand past %d copies "
              "or groups nest deeper than %d)",
              pattern, (int) ERE_MAX_COPIES, ERE_MAX_NESTING);
    return NULL;
  }
  char msg[256];
  int rc = regex_compile(p, prepared, case_sensitive, msg, sizeof msg);
  if (rc != 0) {
    free(p);
    set_error(err, 0, SBX_E_INVALID, "invalid regular expression '%s': %s", pattern, msg);
    return NULL;
  }
  p->backrefs = ere_has_backrefs(prepared);
  return p;
}

void sbx_grep_pattern_free(sbx_grep_pattern_t *p)
{
  if (p == NULL)
    return;
  if (p->kind == PK_REGEX)
    regfree(&p->re);
  if (p->has_re_c)
    regfree(&p->re_c);
  needle_fini(&p->lit);
  needle_fini(&p->must);
  needle_fini(&p->must_safe);
  sbx_buf_free(&p->scratch);
  free(p);
}

/* True if the regex matches in s[from..to) (s[to] readable; the bytes before from give ^ and
 * word context, to is the end of the string for $). ascii: the text is pure ASCII. */
static bool regex_run(sbx_grep_pattern_t *p, bool ascii, const char *s, size_t from, size_t to)
{
  regmatch_t pm[1] = {{.rm_so = (regoff_t) from, .rm_eo = (regoff_t) to}};
  bool use_c = ascii && p->has_re_c;
  locale_t old = uselocale(use_c ? locale_c : p->loc);
  int rc = regexec(use_c ? &p->re_c : &p->re, s, 1, pm, REG_STARTEND);
  uselocale(old);
  return rc == 0;
}

/* The prefilter that applies to text of this class, or NULL. */
static const needle_t *pattern_must(const sbx_grep_pattern_t *p, bool ascii)
{
  if (ascii)
    return p->has_must ? &p->must : NULL;
  return p->has_must_safe ? &p->must_safe : NULL;
}

/* One line of well-formed UTF-8 (ascii: pure ASCII), without '\n' and '\r'. */
static bool pattern_match_clean(sbx_grep_pattern_t *p, const char *line, size_t len, bool ascii)
{
  if (p->kind == PK_LITERAL)
    return needle_find(&p->lit, line, len) >= 0;
  const needle_t *must = pattern_must(p, ascii);
  if (must && needle_find(must, line, len) < 0)
    return false;
  if (line != p->scratch.data) {
    p->scratch.len = 0;
    sbx_buf_append(&p->scratch, line, len);
  }
  return regex_run(p, ascii, p->scratch.data, 0, len);
}

/* line: one line without its '\n'. A trailing '\r' is ignored and ill-formed UTF-8 reads as
 * U+FFFD, as in the lines grep reports. */
static bool pattern_match_line(sbx_grep_pattern_t *p, const char *line, size_t len)
{
  if (len > 0 && line[len - 1] == '\r')
    len--;
  int cls = text_class(line, len);
  if (cls == TEXT_INVALID) {
    p->scratch.len = 0;
    utf8_sanitize(&p->scratch, line, len);
    return pattern_match_clean(p, p->scratch.data, p->scratch.len, false);
  }
  return pattern_match_clean(p, line, len, cls == TEXT_ASCII);
}

bool sbx_grep_pattern_match(sbx_grep_pattern_t *p, const char *line, size_t len)
{
  if (p == NULL)
    return false;
  if (line == NULL)
    line = "", len = 0;
  return pattern_match_line(p, line, len);
}

/* ------------------------------------------------------------------------------------------ */
/* The walker                                                                                  */

typedef enum { MODE_LIST, MODE_GLOB, MODE_GREP } walk_mode_t;

typedef struct {
  const char *name;
  size_t len;
  unsigned char type; /* DT_DIR or DT_REG */
} entry_t;

/* One open directory on the walk stack. Slots are reused (with their buffers) as the walk goes
 * up and down, so a walk allocates per depth level, not per directory. */
typedef struct {
  int fd;
  size_t depth;    /* the root is 0 */
  size_t path_len; /* length of this directory's path in the walker's path buffer */
  entry_t *ents;
  size_t n, ents_cap;
  size_t next; /* cursor for the descent */
  char *names; /* NUL-separated names */
  size_t names_len, names_cap;
} frame_t;

#define DENTS_BUF_SIZE (64 * 1024)
#define DEADLINE_EVERY 256

typedef struct {
  walk_mode_t mode;
  int max_depth; /* MODE_LIST: the caller's depth */
  bool include_dirs;
  pathpat_t *pat; /* glob pattern, or grep's file filter; NULL = every file */
  sbx_grep_pattern_t *gp;
  size_t limit; /* max_results + 1 (saturated) */
  uint64_t deadline_ms;

  char *path; /* base + "/" + relative path of the entry at hand */
  size_t path_cap;
  size_t base_len;

  frame_t *frames;
  size_t nframes, frames_cap;
  bool *states; /* anchored pattern: (pat->n + 1) states per stack level */
  bool *tmp_states;

  char *dents;
  char *fbuf; /* grep: the file being searched */
  size_t fbuf_cap;

  size_t found;
  unsigned ops;
  int cancel_fd;          /* the caller's connection (sbx_search_set_cancel_fd), or -1 */
  uint64_t next_poll_ms;  /* when cancel_fd is polled next */
  int worker_fd;          /* in a grep worker: where matches go (grep_in_worker), else -1 */
  const char *worker_buf; /* in a grep worker: the buffer record offsets are relative to */
  bool stop;
  bool timed_out;
  bool incomplete; /* something could not be searched for lack of resources or depth */

  sbx_strv_t *out_strv;
  sbx_grep_matches_t *out_matches;
} walker_t;

static size_t limit_plus_one(size_t max_results)
{
  return max_results == SIZE_MAX ? SIZE_MAX : max_results + 1;
}

static _Thread_local int search_cancel_fd = -1;

void sbx_search_set_cancel_fd(int fd)
{
  search_cancel_fd = fd;
}

static void walker_init(walker_t *w, walk_mode_t mode, uint64_t deadline_ms)
{
  memset(w, 0, sizeof *w);
  w->mode = mode;
  w->deadline_ms = deadline_ms;
  w->cancel_fd = search_cancel_fd;
  w->worker_fd = -1;
}

/* True once the peer of a connected socket has closed it (or the fd is bad). POLLHUP, not
 * POLLRDHUP: a client that only shut down its writing side still reads the answer. */
static bool peer_gone(int fd)
{
  struct pollfd pfd = {.fd = fd, .events = 0};
  return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLNVAL));
}

#define CANCEL_POLL_MS 20

/* True (and the walk stopped, as timed out) once the deadline has passed or the caller has gone
 * away; the caller's fd is polled at most every CANCEL_POLL_MS. */
static bool deadline_passed(walker_t *w)
{
  if (w->deadline_ms == 0 && w->cancel_fd < 0)
    return false;
  uint64_t now = sbx_now_ms();
  bool over = w->deadline_ms != 0 && now >= w->deadline_ms;
  if (!over && w->cancel_fd >= 0 && now >= w->next_poll_ms) {
    w->next_poll_ms = now + CANCEL_POLL_MS;
    over = peer_gone(w->cancel_fd);
  }
  if (over) {
    w->timed_out = true;
    w->stop = true;
  }
  return over;
}

static bool deadline_tick(walker_t *w)
{
  if (++w->ops % DEADLINE_EVERY != 0)
    return false;
  return deadline_passed(w);
}

static bool is_resource_errno(int e)
{
  return e == EMFILE || e == ENFILE || e == ENOMEM;
}

static void path_reserve(walker_t *w, size_t need)
{
  if (need + 1 <= w->path_cap)
    return;
  size_t cap = w->path_cap ? w->path_cap : 256;
  while (cap < need + 1)
    cap *= 2;
  w->path = xrealloc(w->path, cap);
  w->path_cap = cap;
}

/* Puts dir's path + "/" + name in w->path and returns its length. */
static size_t path_set_entry(walker_t *w, const frame_t *dir, const entry_t *e)
{
  size_t len = dir->path_len + 1 + e->len;
  path_reserve(w, len + 1);
  w->path[dir->path_len] = '/';
  memcpy(w->path + dir->path_len + 1, e->name, e->len);
  w->path[len] = '\0';
  return len;
}

static bool *frame_states(walker_t *w, size_t level)
{
  return w->states + level * (w->pat->n + 1);
}

static int cmp_entry_name(const void *a, const void *b)
{
  return strcmp(((const entry_t *) a)->name, ((const entry_t *) b)->name);
}

/* Orders entries as their final list_dir strings sort: a directory compares as "name/". Then
 * a pre-order walk emits entries already in strcmp order of the reported paths. */
static int cmp_entry_listkey(const void *a, const void *b)
{
  const entry_t *x = a, *y = b;
  for (size_t i = 0;; i++) {
    int cx =
        i < x->len ? (unsigned char) x->name[i] : (i == x->len && x->type == DT_DIR ? '/' : -1);
    int cy =
        i < y->len ? (unsigned char) y->name[i] : (i == y->len && y->type == DT_DIR ? '/' : -1);
    if (cx != cy)
      return cx < cy ? -1 : 1;
    if (cx == -1)
      return 0;
  }
}

/* Reads, filters (ignore list, type) and sorts a directory's entries into f. */
static void frame_read(walker_t *w, frame_t *f)
{
  f->n = 0;
  f->next = 0;
  f->names_len = 0;
  for (;;) {
    ssize_t r = getdents64(f->fd, w->dents, DENTS_BUF_SIZE);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (is_resource_errno(errno))
        w->incomplete = true;
      break; /* unreadable: keep what was read */
    }
    if (r == 0)
      break;
    for (size_t off = 0; off < (size_t) r;) {
      const struct dirent64 *d = (const void *) (w->dents + off);
      off += d->d_reclen;
      const char *name = d->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
        continue;
      size_t len = strlen(name);
      if (sbx_search_ignored_segment(name, len))
        continue;
      unsigned char type = d->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (fstatat(f->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
          continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      if (type != DT_DIR && type != DT_REG)
        continue; /* symlinks, devices, fifos, sockets */
      if (f->names_len + len + 1 > f->names_cap) {
        size_t cap = f->names_cap ? f->names_cap : 4096;
        while (cap < f->names_len + len + 1)
          cap *= 2;
        f->names = xrealloc(f->names, cap);
        f->names_cap = cap;
      }
      if (f->n == f->ents_cap) {
        f->ents_cap = f->ents_cap ? f->ents_cap * 2 : 64;
        f->ents = xreallocarray(f->ents, f->ents_cap, sizeof *f->ents);
      }
      memcpy(f->names + f->names_len, name, len + 1);
      /* an offset for now: names may still move */
      f->ents[f->n].name = (const char *) (uintptr_t) f->names_len;
      f->ents[f->n].len = len;
      f->ents[f->n].type = type;
      f->n++;
      f->names_len += len + 1;
    }
  }
  for (size_t i = 0; i < f->n; i++)
    f->ents[i].name = f->names + (uintptr_t) f->ents[i].name;
  if (f->n > 1)
    qsort(f->ents, f->n, sizeof *f->ents,
          w->mode == MODE_LIST ? cmp_entry_listkey : cmp_entry_name);
}

/* Pushes an open directory fd (taken over) as a new stack level. */
static frame_t *frame_push(walker_t *w, int fd, size_t depth, size_t path_len)
{
  if (w->nframes == w->frames_cap) {
    size_t old = w->frames_cap;
    w->frames_cap = old ? old * 2 : 16;
    w->frames = xreallocarray(w->frames, w->frames_cap, sizeof *w->frames);
    memset(w->frames + old, 0, (w->frames_cap - old) * sizeof *w->frames);
  }
  frame_t *f = &w->frames[w->nframes++];
  f->fd = fd;
  f->depth = depth;
  f->path_len = path_len;
  frame_read(w, f);
  return f;
}

static void frame_pop(walker_t *w)
{
  frame_t *f = &w->frames[--w->nframes];
  if (f->fd >= 0)
    close(f->fd);
  f->fd = -1;
  f->n = 0;
  /* Keep the slot's buffers for the next directory at this depth unless they grew large. */
  if (f->names_cap > 1024 * 1024) {
    free(f->names);
    f->names = NULL;
    f->names_cap = 0;
    free(f->ents);
    f->ents = NULL;
    f->ents_cap = 0;
  }
}

static void walker_fini(walker_t *w)
{
  while (w->nframes > 0)
    frame_pop(w);
  for (size_t i = 0; i < w->frames_cap; i++) {
    free(w->frames[i].names);
    free(w->frames[i].ents);
  }
  free(w->frames);
  free(w->states);
  free(w->tmp_states);
  free(w->path);
  free(w->dents);
  free(w->fbuf);
}

/* Records one result; stops the walk at limit (max_results + 1). */
static void emit_path(walker_t *w, size_t len, bool slash)
{
  char *s = xmalloc(len + 2);
  memcpy(s, w->path, len);
  if (slash)
    s[len++] = '/';
  s[len] = '\0';
  sbx_strv_push_owned(w->out_strv, s);
  if (++w->found >= w->limit)
    w->stop = true;
}

/* Does entry e of the directory at stack level match the glob pattern / grep filter? */
static bool entry_matches(walker_t *w, size_t level, const entry_t *e)
{
  if (w->pat == NULL)
    return true;
  if (!w->pat->anchored)
    return pathpat_match_basename(w->pat, e->name);
  return pathpat_step(w->pat, frame_states(w, level), e->name, w->tmp_states) &&
         w->tmp_states[w->pat->n];
}

/* --- grep one file ------------------------------------------------------------------------ */

/* One match as a grep worker sends it to its walker. */
typedef struct {
  uint64_t line_no, off, len;
} worker_rec_t;

static void grep_emit(walker_t *w, const char *path, uint64_t line_no, const char *line, size_t len)
{
  cleanup_free char *summary = sbx_grep_summarize_line(line, len);
  if (summary == NULL)
    return; /* over 2000 code points */
  if (w->worker_fd >= 0) {
    worker_rec_t r = {line_no, (uint64_t) (line - w->worker_buf), len};
    if (sbx_write_all(w->worker_fd, &r, sizeof r) < 0)
      _exit(1);
  } else {
    sbx_search_matches_push(w->out_matches, path, line_no, summary, strlen(summary));
  }
  if (++w->found >= w->limit)
    w->stop = true;
}

static size_t count_newlines(const char *s, size_t n)
{
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += s[i] == '\n';
  return c;
}

/* The end of the range of whole lines that starts at from and spans about span bytes: the
 * position of a '\n' (or len), never inside a line; at least the first line. */
static size_t lines_range_end(const char *buf, size_t len, size_t from, size_t span)
{
  if (len - from <= span)
    return len;
  const char *nl = memrchr(buf + from, '\n', span);
  if (nl == NULL)
    nl = memchr(buf + from + span, '\n', len - from - span);
  return nl ? (size_t) (nl - buf) : len;
}

/* The first line of buf[from..to) that matches on its own, given that the range as a whole
 * matches; SIZE_MAX if none does (a match can cross a '\n': [[:space:]] holds it). A line that
 * matches on its own makes every range holding it match, so halving finds it in O(log lines)
 * regexecs when matches stay within lines, and visits each line at most once otherwise. The
 * recursion is as deep as log2 of the lines in a range (at most 18 for 256 KiB). */
static size_t first_matching_line(walker_t *w, const char *buf, size_t from, size_t to, bool ascii)
{
  if (memchr(buf + from, '\n', to - from) == NULL)
    return from; /* one line, and it matches */
  if (deadline_passed(w))
    return SIZE_MAX;
  size_t half = from + (to - from) / 2;
  const char *mid = memchr(buf + half, '\n', to - half);
  if (mid == NULL)
    mid = memrchr(buf + from, '\n', half - from);
  size_t m = (size_t) (mid - buf);
  if (regex_run(w->gp, ascii, buf, from, m)) {
    size_t r = first_matching_line(w, buf, from, m, ascii);
    if (r != SIZE_MAX || w->stop)
      return r;
  }
  if (regex_run(w->gp, ascii, buf, m + 1, to))
    return first_matching_line(w, buf, m + 1, to, ascii);
  return SIZE_MAX;
}

#define GREP_SPAN_MIN 4096
#define GREP_SPAN_MAX (256 * 1024)

/* Whole-buffer search, for well-formed UTF-8 without '\r' and a pattern without '\n': find the
 * next candidate in the buffer (the literal or the regex's required literal), then report the
 * line holding it if the line matches on its own. A regex without one is run over ranges of
 * whole lines growing from 4 KiB to 256 KiB while they do not match (a range that matches is
 * halved down to its first matching line), so the deadline is looked at between regexecs. Same
 * answers as line by line, without a regexec per line. */
static void grep_buffer_fast(walker_t *w, const char *path, const char *buf, size_t len, bool ascii)
{
  sbx_grep_pattern_t *p = w->gp;
  const needle_t *nd = p->kind == PK_LITERAL ? &p->lit : pattern_must(p, ascii);
  size_t from = 0, counted = 0, span = GREP_SPAN_MIN;
  uint64_t line_no = 1;
  while (from < len && !w->stop) {
    size_t ls;
    if (nd) {
      ssize_t hit = needle_find(nd, buf + from, len - from);
      if (hit < 0)
        return;
      size_t pos = from + (size_t) hit;
      const char *nl = pos > from ? memrchr(buf + from, '\n', pos - from) : NULL;
      ls = nl ? (size_t) (nl - buf) + 1 : from;
    } else {
      size_t to = lines_range_end(buf, len, from, span);
      ls = regex_run(p, ascii, buf, from, to) ? first_matching_line(w, buf, from, to, ascii)
                                              : SIZE_MAX;
      if (ls == SIZE_MAX) {
        if (w->stop)
          return;
        from = to + 1;
        span = span < GREP_SPAN_MAX ? span * 2 : span;
        if (deadline_passed(w))
          return;
        continue;
      }
      span = GREP_SPAN_MIN;
    }
    if (ls >= len)
      return; /* the empty "line" after a final '\n' is not a line */
    const char *end = memchr(buf + ls, '\n', len - ls);
    size_t le = end ? (size_t) (end - buf) : len;
    /* a candidate of a needle: run the regex on the line (the halving found a matching one) */
    bool ok = p->kind == PK_LITERAL || !nd || regex_run(p, ascii, buf, ls, le);
    line_no += count_newlines(buf + counted, ls - counted);
    counted = ls;
    if (ok)
      grep_emit(w, path, line_no, buf + ls, le - ls); /* skips lines over 2000 code points */
    from = le + 1;
    if ((++w->ops & 1023) == 0 && deadline_passed(w))
      return;
  }
}

/* Line by line: files with '\r' or ill-formed UTF-8, or a pattern holding a '\n'. */
static void grep_buffer_lines(walker_t *w, const char *path, const char *buf, size_t len)
{
  uint64_t line_no = 0;
  size_t pos = 0;
  while (pos < len && !w->stop) {
    const char *end = memchr(buf + pos, '\n', len - pos);
    size_t le = end ? (size_t) (end - buf) : len;
    const char *line = buf + pos;
    size_t n = le - pos;
    line_no++;
    pos = le + 1;
    if ((line_no & 255) == 0 && deadline_passed(w))
      return;
    size_t stripped = n > 0 && line[n - 1] == '\r' ? n - 1 : n;
    if (stripped > SBX_SEARCH_MAX_LINE_CHARS &&
        utf8_count_lossy(line, stripped) > SBX_SEARCH_MAX_LINE_CHARS)
      continue;
    if (pattern_match_line(w->gp, line, n))
      grep_emit(w, path, line_no, line, n);
  }
}

static void grep_buffer(walker_t *w, const char *path, const char *buf, size_t len, int cls)
{
  if (cls != TEXT_INVALID && !w->gp->line_by_line && memchr(buf, '\r', len) == NULL)
    grep_buffer_fast(w, path, buf, len, cls == TEXT_ASCII);
  else
    grep_buffer_lines(w, path, buf, len);
}

/* Back-references: glibc matches them by backtracking, exponentially in the line's length (one
 * regexec of (.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x on a 300-byte line runs for hours), and nothing
 * inside regexec can be interrupted. So a file is searched by a forked child that streams a
 * record per matching line; this side reads them and kills the child at the deadline, when the
 * caller goes away (the search is then timed out: truncated) or at the limit. A child that
 * cannot be made, or dies, leaves the answer incomplete (truncated), never wrong. */
static void grep_in_worker(walker_t *w, const char *path, const char *buf, size_t len, int cls)
{
  const needle_t *nd = cls == TEXT_INVALID ? NULL : pattern_must(w->gp, cls == TEXT_ASCII);
  if (nd && needle_find(nd, buf, len) < 0)
    return; /* no candidate (the needle is matched as in grep_buffer_fast) */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    w->incomplete = true;
    return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    w->incomplete = true;
    return;
  }
  if (pid == 0) {
    close(sv[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the forking thread ending kills it too */
    w->worker_fd = sv[1];
    w->worker_buf = buf;
    w->deadline_ms = 0;
    w->cancel_fd = -1;
    grep_buffer(w, path, buf, len, cls);
    _exit(0);
  }
  close(sv[1]);
  worker_rec_t rec;
  size_t got = 0;
  bool done = false;
  while (!w->stop && !deadline_passed(w)) {
    int wait_ms = -1;
    if (w->cancel_fd >= 0)
      wait_ms = CANCEL_POLL_MS;
    if (w->deadline_ms) {
      uint64_t now = sbx_now_ms(), left = w->deadline_ms > now ? w->deadline_ms - now : 0;
      if (wait_ms < 0 || left < (uint64_t) wait_ms)
        wait_ms = (int) (left < INT_MAX ? left : INT_MAX);
    }
    struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
    int n = poll(&pfd, 1, wait_ms);
    if (n <= 0)
      continue; /* (EINTR, or time to look at the deadline) */
    ssize_t r = read(sv[0], (char *) &rec + got, sizeof rec - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      done = r == 0 && got == 0;
      break;
    }
    got += (size_t) r;
    if (got < sizeof rec)
      continue;
    got = 0;
    if (rec.off > len || rec.len > len - rec.off) {
      break; /* not from our child: drop it, incomplete */
    }
    grep_emit(w, path, rec.line_no, buf + rec.off, (size_t) rec.len);
  }
  kill(pid, SIGKILL);
  close(sv[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (!done && !w->stop)
    w->incomplete = true;
  if (done && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
    w->incomplete = true;
}

/* Searches an open file (taken over). */
static void grep_fd(walker_t *w, int fd, const char *path)
{
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SBX_SEARCH_MAX_FILE_BYTES) {
    close(fd);
    return;
  }
  /* Read the whole file (at most MAX+1 bytes, to see one that grew past the cap) into the
   * reusable buffer, leaving room for a NUL. */
  const size_t max_cap = (size_t) SBX_SEARCH_MAX_FILE_BYTES + 2;
  size_t want = (size_t) st.st_size;
  size_t len = 0;
  bool failed = false;
  if (w->fbuf_cap < want + 2) {
    size_t cap = want + 2 < 64 * 1024 ? 64 * 1024 : want + 2;
    w->fbuf = xrealloc(w->fbuf, cap);
    w->fbuf_cap = cap;
  }
  while (len < max_cap - 1) {
    if (len + 1 >= w->fbuf_cap) {
      size_t cap = w->fbuf_cap * 2 < max_cap ? w->fbuf_cap * 2 : max_cap;
      w->fbuf = xrealloc(w->fbuf, cap);
      w->fbuf_cap = cap;
    }
    size_t room = w->fbuf_cap - 1 - len;
    if (len + room > max_cap - 1)
      room = max_cap - 1 - len;
    ssize_t r = read(fd, w->fbuf + len, room);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      failed = true; /* unreadable = binary: skipped */
      break;
    }
    if (r == 0)
      break;
    len += (size_t) r;
    if (len == want && (size_t) r < room)
      break; /* what fstat reported, in full with room to spare: EOF */
  }
  close(fd);
  if (failed || len > SBX_SEARCH_MAX_FILE_BYTES || len == 0)
    return;
  char *buf = w->fbuf;
  buf[len] = '\0';
  if (memchr(buf, '\0', len < SBX_SEARCH_BINARY_PROBE ? len : SBX_SEARCH_BINARY_PROBE))
    return;
  int cls = text_class(buf, len);
  if (w->gp->backrefs)
    grep_in_worker(w, path, buf, len, cls);
  else
    grep_buffer(w, path, buf, len, cls);
}

static void grep_file_at(walker_t *w, int dir_fd, const char *name, const char *path)
{
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (is_resource_errno(errno))
      w->incomplete = true;
    return;
  }
  grep_fd(w, fd, path);
}

/* --- the walk ------------------------------------------------------------------------------- */

/* glob / grep: what a directory contributes before its subdirectories are entered. */
static void dir_visit(walker_t *w, size_t level)
{
  if (w->mode == MODE_GLOB && w->include_dirs) {
    for (size_t i = 0; i < w->frames[level].n && !w->stop; i++) {
      const frame_t *f = &w->frames[level];
      const entry_t *e = &f->ents[i];
      if (e->type != DT_DIR || deadline_tick(w))
        continue;
      if (entry_matches(w, level, e))
        emit_path(w, path_set_entry(w, f, e), false);
    }
  }
  for (size_t i = 0; i < w->frames[level].n && !w->stop; i++) {
    const frame_t *f = &w->frames[level];
    const entry_t *e = &f->ents[i];
    if (e->type != DT_REG)
      continue;
    if (w->mode == MODE_GREP ? deadline_passed(w) : deadline_tick(w))
      break;
    if (!entry_matches(w, level, e))
      continue;
    size_t len = path_set_entry(w, f, e);
    if (w->mode == MODE_GLOB)
      emit_path(w, len, false);
    else
      grep_file_at(w, f->fd, e->name, w->path);
  }
}

/* Opens subdirectory e of the top frame and pushes it. */
static void descend(walker_t *w, size_t level, const entry_t *e)
{
  const frame_t *f = &w->frames[level];
  if (f->depth + 1 >= SBX_SEARCH_MAX_DEPTH) {
    w->incomplete = true;
    return;
  }
  if (deadline_passed(w))
    return;
  int fd = openat(f->fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (is_resource_errno(errno))
      w->incomplete = true;
    return;
  }
  size_t path_len = path_set_entry(w, f, e);
  size_t depth = f->depth + 1;
  frame_push(w, fd, depth, path_len);
  if (w->mode != MODE_LIST)
    dir_visit(w, w->nframes - 1);
}

static void walk(walker_t *w, int rootfd)
{
  w->dents = xmalloc(DENTS_BUF_SIZE);
  if (w->pat && w->pat->anchored && !w->pat->never) {
    w->states = xmalloc((size_t) (SBX_SEARCH_MAX_DEPTH + 1) * (w->pat->n + 1));
    w->tmp_states = xmalloc(w->pat->n + 1);
    pathpat_start(w->pat, frame_states(w, 0));
  }
  frame_push(w, rootfd, 0, w->base_len);
  if (w->mode != MODE_LIST)
    dir_visit(w, 0);
  while (w->nframes > 0 && !w->stop) {
    size_t level = w->nframes - 1;
    frame_t *f = &w->frames[level];
    if (f->next >= f->n) {
      frame_pop(w);
      continue;
    }
    const entry_t *e = &f->ents[f->next++];
    if (w->mode == MODE_LIST) {
      if (deadline_tick(w))
        break;
      emit_path(w, path_set_entry(w, f, e), e->type == DT_DIR);
      if (!w->stop && e->type == DT_DIR && f->depth + 1 < (size_t) w->max_depth)
        descend(w, level, e);
      continue;
    }
    if (e->type != DT_DIR)
      continue;
    if (w->states) {
      /* the states after this directory, in the next level's slot; prune dead branches */
      if (!pathpat_step(w->pat, frame_states(w, level), e->name, frame_states(w, level + 1)))
        continue;
    }
    descend(w, level, e);
  }
}

static int open_root_default(const char *path, int flags)
{
  return open(path, flags);
}

int (*sbx_search_open_root)(const char *path, int flags) = open_root_default;

/* Opens a list/glob root: following a symlink at the root is fine. */
static int open_root_dir(const char *root, sbx_error_t *err)
{
  if (root == NULL || root[0] == '\0')
    return set_error(err, ENOENT, SBX_E_NOT_FOUND, "directory not found: %s", root ? root : "");
  int fd = sbx_search_open_root(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    return fd;
  int e = errno;
  if (e == ENOENT)
    return set_error(err, e, SBX_E_NOT_FOUND, "directory not found: %s", root);
  if (e == ENOTDIR) {
    struct stat st;
    if (stat(root, &st) == 0 && !S_ISDIR(st.st_mode))
      return set_error(err, e, SBX_E_NOT_DIR, "not a directory: %s", root);
    return set_error(err, ENOENT, SBX_E_NOT_FOUND, "directory not found: %s", root);
  }
  return sbx_make_error(err, e, sbx_errno_kind(e), "cannot open directory %s", root);
}

/* The reporting prefix: root without trailing '/' ("/" itself becomes "", so that joining with
 * "/" + name gives "/name"). */
static void walker_set_base(walker_t *w, const char *root)
{
  size_t len = strlen(root);
  while (len > 0 && root[len - 1] == '/')
    len--;
  path_reserve(w, len + 1);
  memcpy(w->path, root, len);
  w->path[len] = '\0';
  w->base_len = len;
}

/* limit+1: drop the extra result, and report truncation. */
static bool finish_strv(walker_t *w, sbx_strv_t *out, size_t max_results)
{
  bool truncated = w->timed_out || w->incomplete;
  if (w->found > max_results) {
    truncated = true;
    while (w->found > max_results) {
      free(out->v[--out->n]);
      out->v[out->n] = NULL;
      w->found--;
    }
  }
  return truncated;
}

int sbx_search_list_dir(const char *path, int max_depth, size_t max_entries, uint64_t deadline_ms,
                        sbx_strv_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  if (max_depth < 0)
    return set_error(err, EINVAL, SBX_E_INVALID, "max_depth must be non-negative");
  int fd = open_root_dir(path, err);
  if (fd < 0)
    return -1;
  if (max_depth == 0) {
    close(fd);
    return 0;
  }
  walker_t w;
  walker_init(&w, MODE_LIST, deadline_ms);
  w.max_depth = max_depth;
  w.limit = limit_plus_one(max_entries);
  w.out_strv = out;
  walker_set_base(&w, path);
  walk(&w, fd);
  bool t = finish_strv(&w, out, max_entries);
  walker_fini(&w);
  if (truncated)
    *truncated = t;
  return 0;
}

int sbx_search_glob(const char *root, const char *pattern, bool include_dirs, size_t max_results,
                    uint64_t deadline_ms, sbx_strv_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  int fd = open_root_dir(root, err);
  if (fd < 0)
    return -1;
  pathpat_t pp;
  pathpat_init(&pp, pattern);
  if (pp.never) {
    close(fd);
    pathpat_fini(&pp);
    return 0;
  }
  walker_t w;
  walker_init(&w, MODE_GLOB, deadline_ms);
  w.include_dirs = include_dirs;
  w.pat = &pp;
  w.limit = limit_plus_one(max_results);
  w.out_strv = out;
  walker_set_base(&w, root);
  walk(&w, fd);
  bool t = finish_strv(&w, out, max_results);
  walker_fini(&w);
  pathpat_fini(&pp);
  if (truncated)
    *truncated = t;
  return 0;
}

int sbx_search_grep(const char *root, const char *pattern, const char *glob, bool literal,
                    bool case_sensitive, size_t max_results, uint64_t deadline_ms,
                    sbx_grep_matches_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  sbx_grep_pattern_t *gp = sbx_grep_pattern_new(pattern, literal, case_sensitive, err);
  if (gp == NULL)
    return -1;
  if (root == NULL || root[0] == '\0') {
    sbx_grep_pattern_free(gp);
    return set_error(err, ENOENT, SBX_E_NOT_FOUND, "path not found: %s", root ? root : "");
  }
  int fd = sbx_search_open_root(root, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    sbx_grep_pattern_free(gp);
    if (e == ENOENT || e == ENOTDIR)
      return set_error(err, e, SBX_E_NOT_FOUND, "path not found: %s", root);
    return sbx_make_error(err, e, sbx_errno_kind(e), "cannot open %s", root);
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    sbx_grep_pattern_free(gp);
    return sbx_make_error(err, e, sbx_errno_kind(e), "cannot stat %s", root);
  }
  /* An empty glob filters nothing (DeerFlow: `if glob and not path_matches(...)`). */
  bool filter = glob != NULL && glob[0] != '\0';
  pathpat_t pp;
  pathpat_init(&pp, filter ? glob : NULL);
  walker_t w;
  walker_init(&w, MODE_GREP, deadline_ms);
  w.pat = filter ? &pp : NULL;
  w.gp = gp;
  w.limit = limit_plus_one(max_results);
  w.out_matches = out;
  if (S_ISDIR(st.st_mode)) {
    if (!(filter && pp.never)) {
      walker_set_base(&w, root);
      walk(&w, fd);
      fd = -1;
    }
  } else if (S_ISREG(st.st_mode)) {
    const char *base = strrchr(root, '/');
    base = base ? base + 1 : root;
    if (!filter || sbx_path_matches(glob, base)) {
      grep_fd(&w, fd, root);
      fd = -1;
    }
  }
  if (fd >= 0)
    close(fd);
  bool t = w.timed_out || w.incomplete;
  if (w.found > max_results) {
    t = true;
    while (w.found > max_results) {
      grep_matches_pop(out);
      w.found--;
    }
  }
  walker_fini(&w);
  pathpat_fini(&pp);
  sbx_grep_pattern_free(gp);
  if (truncated)
    *truncated = t;
  return 0;
}
