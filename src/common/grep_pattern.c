/* grep's patterns: see grep_pattern.h. */
#include "grep_pattern.h"
#include "text.h"

#include <locale.h>
#include <regex.h>
#include <string.h>

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

static void needle_init(sbx_needle_t *nd, const char *s, size_t n, bool icase)
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

static void needle_fini(sbx_needle_t *nd)
{
  free(nd->s);
  nd->s = NULL;
}

static bool needle_at(const sbx_needle_t *nd, const char *p)
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
ssize_t sbx__needle_find(const sbx_needle_t *nd, const char *hay, size_t n)
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

/* A required literal is worth a prefilter from 2 bytes, or 1 byte if rare in text. */
static bool must_worth_it(const char *s, size_t n)
{
  return n >= 2 || (n == 1 && byte_frequency((unsigned char) s[0]) <= 40);
}

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
    sbx__buf_append(best, cur->data, cur->len);
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
      sbx__buf_putc(&cur, (char) n);
      s += 2;
      break;
    }
    default: {
      uint32_t cp = c;
      size_t l = c < 0x80 ? 1 : sbx__utf8_next(s, 4, &cp); /* (a NUL ends any sequence) */
      bool valid = cp != SBX_UTF8_BAD;
      if (c >= 0x80 && (icase || !valid)) {
        must_commit(&cur, &last, best);
      } else {
        last = cur.len;
        sbx__buf_append(&cur, s, l);
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
  sbx__buf_free(&cur);
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
      sbx__buf_putc(&b, '\\');
    sbx__buf_putc(&b, *s);
  }
  return sbx__buf_steal(&b);
}

static int regex_compile(sbx_grep_pattern_t *p, const char *re, bool case_sensitive, char *errbuf,
                         size_t errlen)
{
  /* REG_NOSUB: only "does it match" is ever asked. Without it glibc tracks every group through
   * its DFA: (.*)(.*)(.*)(.*)(.*)y takes 7 s on an 8000-byte line, and 0 with it. */
  int flags = REG_EXTENDED | REG_NEWLINE | REG_NOSUB | (case_sensitive ? 0 : REG_ICASE);
  p->loc = sbx__locale_utf8();
  locale_t old = uselocale(p->loc);
  int rc = regcomp(&p->re, re, flags);
  if (rc != 0 && errbuf)
    regerror(rc, &p->re, errbuf, errlen);
  if (rc == 0 && sbx__locale_utf8() != sbx__locale_c() && sbx__str_ascii(re)) {
    uselocale(sbx__locale_c());
    p->has_re_c = regcomp(&p->re_c, re, flags) == 0;
  }
  uselocale(old);
  if (rc != 0)
    return rc;
  p->kind = SBX_GREP_PK_REGEX;
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
  sbx__buf_free(&must);
  return 0;
}

sbx_grep_pattern_t *sbx__grep_pattern_new(const char *pattern, bool literal, bool case_sensitive,
                                          sbx_error_t *err)
{
  if (pattern == NULL)
    pattern = "";
  sbx_grep_pattern_t *p = xzalloc(sizeof *p);
  p->line_by_line = strchr(pattern, '\n') != NULL ||
                    (!literal && (strstr(pattern, "\\`") || strstr(pattern, "\\'")));
  if (literal) {
    if (!case_sensitive && !sbx__str_ascii(pattern)) {
      /* REG_ICASE folds non-ASCII letters too; a pattern the UTF-8 locale cannot take (invalid
       * UTF-8) falls back to ASCII-only folding on bytes. */
      cleanup_free char *esc = ere_escape(pattern);
      if (regex_compile(p, esc, false, NULL, 0) == 0)
        return p;
    }
    p->kind = SBX_GREP_PK_LITERAL;
    needle_init(&p->lit, pattern, strlen(pattern), !case_sensitive);
    return p;
  }
  cleanup_free char *prepared = ere_prepare(pattern);
  if (prepared == NULL) {
    free(p);
    sbx__error_setf(
        err, 0, SBX_E_INVALID,
        "invalid regular expression '%s': too complex (repetitions expand past %d copies "
        "or groups nest deeper than %d)",
        pattern, (int) ERE_MAX_COPIES, ERE_MAX_NESTING);
    return NULL;
  }
  char msg[256];
  int rc = regex_compile(p, prepared, case_sensitive, msg, sizeof msg);
  if (rc != 0) {
    free(p);
    sbx__error_setf(err, 0, SBX_E_INVALID, "invalid regular expression '%s': %s", pattern, msg);
    return NULL;
  }
  p->backrefs = ere_has_backrefs(prepared);
  return p;
}

void sbx__grep_pattern_free(sbx_grep_pattern_t *p)
{
  if (p == NULL)
    return;
  if (p->kind == SBX_GREP_PK_REGEX)
    regfree(&p->re);
  if (p->has_re_c)
    regfree(&p->re_c);
  needle_fini(&p->lit);
  needle_fini(&p->must);
  needle_fini(&p->must_safe);
  sbx__buf_free(&p->scratch);
  free(p);
}

/* True if the regex matches in s[from..to) (s[to] readable; the bytes before from give ^ and
 * word context, to is the end of the string for $). ascii: the text is pure ASCII. */
bool sbx__grep_regex_run(sbx_grep_pattern_t *p, bool ascii, const char *s, size_t from, size_t to)
{
  regmatch_t pm[1] = {{.rm_so = (regoff_t) from, .rm_eo = (regoff_t) to}};
  bool use_c = ascii && p->has_re_c;
  locale_t old = uselocale(use_c ? sbx__locale_c() : p->loc);
  int rc = regexec(use_c ? &p->re_c : &p->re, s, 1, pm, REG_STARTEND);
  uselocale(old);
  return rc == 0;
}

/* The prefilter that applies to text of this class, or NULL. */
const sbx_needle_t *sbx__grep_pattern_must(const sbx_grep_pattern_t *p, bool ascii)
{
  if (ascii)
    return p->has_must ? &p->must : NULL;
  return p->has_must_safe ? &p->must_safe : NULL;
}

/* One line of well-formed UTF-8 (ascii: pure ASCII), without '\n' and '\r'. */
static bool pattern_match_clean(sbx_grep_pattern_t *p, const char *line, size_t len, bool ascii)
{
  if (p->kind == SBX_GREP_PK_LITERAL)
    return sbx__needle_find(&p->lit, line, len) >= 0;
  const sbx_needle_t *must = sbx__grep_pattern_must(p, ascii);
  if (must && sbx__needle_find(must, line, len) < 0)
    return false;
  if (line != p->scratch.data) {
    p->scratch.len = 0;
    sbx__buf_append(&p->scratch, line, len);
  }
  return sbx__grep_regex_run(p, ascii, p->scratch.data, 0, len);
}

/* line: one line without its '\n'. A trailing '\r' is ignored and ill-formed UTF-8 reads as
 * U+FFFD, as in the lines grep reports. */
static bool pattern_match_line(sbx_grep_pattern_t *p, const char *line, size_t len)
{
  if (len > 0 && line[len - 1] == '\r')
    len--;
  int cls = sbx__text_class(line, len);
  if (cls == SBX_TEXT_INVALID) {
    p->scratch.len = 0;
    sbx__buf_put_utf8_lossy(&p->scratch, line, len);
    return pattern_match_clean(p, p->scratch.data, p->scratch.len, false);
  }
  return pattern_match_clean(p, line, len, cls == SBX_TEXT_ASCII);
}

bool sbx__grep_pattern_match(sbx_grep_pattern_t *p, const char *line, size_t len)
{
  if (p == NULL)
    return false;
  if (line == NULL)
    line = "", len = 0;
  return pattern_match_line(p, line, len);
}
