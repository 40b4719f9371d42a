/* libFuzzer target for grep's line handling (src/common/grep_pattern.c, whose contract it is,
 * and grep.c): sbx__grep_summarize_line,
 * sbx__grep_pattern_new / sbx__grep_pattern_match, and sbx__search_grep over a memfd.
 *
 * Input: one flag byte (bit 0 literal, bit 1 case-sensitive), the pattern up to the first NUL
 * (at most 32 bytes), then the text (may hold '\n', '\r', NULs and ill-formed UTF-8).
 * Oracles, all written independently of grep_pattern.c and grep.c:
 * - the summary equals a table-driven UTF-8 decode with U+FFFD per maximal ill-formed
 *   subpart, minus a trailing '\r', cut to 197 code points + "..." past 200, NULL past 2000;
 * - a bad regex fails with SBX_E_INVALID naming the pattern, and only if regcomp rejects it
 *   (or it is refused up front as too costly to compile);
 * - a line matches iff plain regexec (C.UTF-8, REG_EXTENDED|REG_NEWLINE[|REG_ICASE]) matches
 *   the decoded line (literals: strstr / ASCII folding / an escaped REG_ICASE regex), so the
 *   required-literal prefilter, the C-locale regex for ASCII text and whole-buffer search never
 *   change an answer;
 * - grep over the whole text reports exactly the matching lines, with 1-based numbers.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc/common \
 *          fuzz/fuzz_grep_line.c src/common/{grep,grep_pattern,walk,pathmatch,ignore,text}.c \
 *          src/common/util.c src/common/error.c
 * Run:   ./a.out -timeout=10 fuzz/corpus/grep_line */
#include <locale.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PATTERN 32

static locale_t utf8;
static int memfd = -1;
static char memfd_path[64];

static void init(void)
{
  if (utf8 != (locale_t) 0)
    return;
  utf8 = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t) 0);
  if (utf8 == (locale_t) 0)
    abort();
  memfd = memfd_create("fuzz_grep", MFD_CLOEXEC);
  if (memfd < 0)
    abort();
  snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
}

/* Unicode Table 3-7 (well-formed UTF-8), as ranges for each byte position. */
static size_t ref_decode_one(const unsigned char *s, size_t n, bool *ok)
{
  static const struct {
    unsigned char lo0, hi0, lo1, hi1;
    int len;
  } rows[] = {
      {0x00, 0x7F, 0, 0, 1},       {0xC2, 0xDF, 0x80, 0xBF, 2}, {0xE0, 0xE0, 0xA0, 0xBF, 3},
      {0xE1, 0xEC, 0x80, 0xBF, 3}, {0xED, 0xED, 0x80, 0x9F, 3}, {0xEE, 0xEF, 0x80, 0xBF, 3},
      {0xF0, 0xF0, 0x90, 0xBF, 4}, {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4},
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    if (s[0] < rows[r].lo0 || s[0] > rows[r].hi0)
      continue;
    int len = rows[r].len;
    size_t got = 1;
    for (int k = 1; k < len; k++) {
      unsigned char lo = k == 1 ? rows[r].lo1 : 0x80, hi = k == 1 ? rows[r].hi1 : 0xBF;
      if (got >= n || s[got] < lo || s[got] > hi) {
        *ok = false;
        return got; /* the maximal subpart */
      }
      got++;
    }
    *ok = true;
    return got;
  }
  *ok = false;
  return 1;
}

/* Decoded (U+FFFD-replaced) bytes of s[0..n) into out (capacity 3n+1); returns code points. */
static size_t ref_decode(const char *s, size_t n, char *out, size_t *out_len, size_t *cut197)
{
  size_t cps = 0, o = 0;
  *cut197 = 0;
  for (size_t i = 0; i < n;) {
    bool ok;
    size_t l = ref_decode_one((const unsigned char *) s + i, n - i, &ok);
    if (ok) {
      memcpy(out + o, s + i, l);
      o += l;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
    }
    i += l;
    if (++cps == 197)
      *cut197 = o;
  }
  out[o] = '\0';
  *out_len = o;
  return cps;
}

static bool ascii_fold_contains(const char *hay, const char *needle)
{
  size_t n = strlen(hay), m = strlen(needle);
  for (size_t i = 0; i + m <= n; i++) {
    size_t j = 0;
    while (j < m) {
      unsigned char a = (unsigned char) hay[i + j], b = (unsigned char) needle[j];
      if (a >= 'A' && a <= 'Z')
        a = (unsigned char) (a + 32);
      if (b >= 'A' && b <= 'Z')
        b = (unsigned char) (b + 32);
      if (a != b)
        break;
      j++;
    }
    if (j == m)
      return true;
  }
  return false;
}

static bool is_ascii(const char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s >= 0x80)
      return false;
  return true;
}

static char *ere_escape(const char *s)
{
  char *out = malloc(2 * strlen(s) + 1), *o = out;
  for (; *s; s++) {
    if (strchr("\\.[]()*+?{}|^$", *s))
      *o++ = '\\';
    *o++ = *s;
  }
  *o = '\0';
  return out;
}

/* regcomp/regexec in C.UTF-8; -1 if the pattern does not compile. */
static int ref_regex(const char *pattern, bool cs, const char *text)
{
  locale_t old = uselocale(utf8);
  regex_t re;
  int r = -1;
  if (regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | (cs ? 0 : REG_ICASE)) == 0) {
    r = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
  }
  uselocale(old);
  return r;
}

/* The reference answer for one decoded line. */
static bool ref_match(const char *pattern, bool literal, bool cs, const char *clean)
{
  if (!literal)
    return ref_regex(pattern, cs, clean) == 1;
  if (cs)
    return strstr(clean, pattern) != NULL;
  if (!is_ascii(pattern)) {
    char *esc = ere_escape(pattern);
    int r = ref_regex(esc, false, clean);
    free(esc);
    if (r >= 0)
      return r == 1;
  }
  return ascii_fold_contains(clean, pattern);
}

/* glibc's regcomp can take seconds on a quantified group or stacked quantifiers ("()++++",
 * which grep_pattern.c rewrites before compiling): the reference does not compile those. */
static bool ref_can_compile(const char *pattern)
{
  for (const char *s = pattern; *s; s++)
    if (s > pattern && strchr("+*?{", s[0]) && strchr(")*?+}", s[-1]))
      return false;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  init();
  if (size < 1)
    return 0;
  bool literal = data[0] & 1, cs = data[0] & 2;
  data++;
  size--;
  const uint8_t *z = memchr(data, 0, size);
  size_t plen = z ? (size_t) (z - data) : size;
  if (plen > MAX_PATTERN)
    return 0;
  char pattern[MAX_PATTERN + 1];
  memcpy(pattern, data, plen);
  pattern[plen] = '\0';
  const char *text = z ? (const char *) z + 1 : "";
  size_t tlen = z ? size - plen - 1 : 0;
  /* back-references make glibc's matcher exponential: not what this target is after */
  for (size_t i = 0; i + 1 < plen; i++)
    if (pattern[i] == '\\' && pattern[i + 1] >= '1' && pattern[i + 1] <= '9')
      return 0;

  char *scratch = malloc(3 * tlen + 8);

  /* the summary of the whole text taken as one line */
  {
    size_t n = tlen > 0 && text[tlen - 1] == '\r' ? tlen - 1 : tlen;
    size_t olen, cut;
    size_t cps = ref_decode(text, n, scratch, &olen, &cut);
    char *s = sbx__grep_summarize_line(text, tlen);
    if (cps > SBX_SEARCH_MAX_LINE_CHARS) {
      if (s != NULL)
        __builtin_trap();
    } else {
      if (s == NULL)
        __builtin_trap();
      if (cps > SBX_SEARCH_SUMMARY_CHARS)
        memcpy(scratch + cut, "...", 4);
      if (strcmp(s, scratch) != 0)
        __builtin_trap();
    }
    free(s);
  }

  sbx_error_t err = NULL;
  sbx_grep_pattern_t *p = sbx__grep_pattern_new(pattern, literal, cs, &err);
  bool check = literal || ref_can_compile(pattern);
  if (p == NULL) {
    /* refused: by regcomp, or up front as too costly to compile (then do not try) */
    if (literal || err == NULL || err->kind != SBX_E_INVALID || !strstr(err->msg, pattern) ||
        (check && !strstr(err->msg, "too complex") && ref_regex(pattern, cs, "") != -1))
      __builtin_trap();
    sbx_error_release(&err);
    free(scratch);
    return 0;
  }
  if (check && !literal && ref_regex(pattern, cs, "") == -1)
    __builtin_trap();

  /* line by line, and the expected grep answer */
  bool binary = memchr(text, '\0', tlen < SBX_SEARCH_BINARY_PROBE ? tlen : SBX_SEARCH_BINARY_PROBE);
  char *want = malloc(16 * (tlen + 1) + 1);
  size_t wl = 0;
  want[0] = '\0';
  uint64_t line_no = 0;
  for (size_t pos = 0; pos < tlen;) {
    const char *nl = memchr(text + pos, '\n', tlen - pos);
    size_t le = nl ? (size_t) (nl - text) : tlen;
    const char *line = text + pos;
    size_t n = le - pos;
    pos = le + 1;
    line_no++;
    bool got = sbx__grep_pattern_match(p, line, n);
    size_t stripped = n > 0 && line[n - 1] == '\r' ? n - 1 : n;
    size_t olen, cut;
    size_t cps = ref_decode(line, stripped, scratch, &olen, &cut);
    if (!check || memchr(line, '\0', n) != NULL)
      continue; /* regexec takes C strings: no reference */
    bool exp = ref_match(pattern, literal, cs, scratch);
    if (got != exp)
      __builtin_trap();
    if (exp && cps <= SBX_SEARCH_MAX_LINE_CHARS && !binary)
      wl += (size_t) sprintf(want + wl, "%llu,", (unsigned long long) line_no);
  }

  /* the whole text as a file (a memfd, reached as /proc/self/fd/N: a regular file) */
  bool has_nul_line = false;
  for (size_t i = 0; i < tlen && !binary; i++)
    has_nul_line = has_nul_line || text[i] == '\0';
  if (check && ftruncate(memfd, 0) == 0 && pwrite(memfd, text, tlen, 0) == (ssize_t) tlen &&
      !has_nul_line) {
    sbx_grep_matches_t m = {0};
    bool truncated = true;
    if (sbx__search_grep(memfd_path, pattern, NULL, literal, cs, 100000, 0, &m, &truncated, &err) !=
        0)
      __builtin_trap();
    char *got = malloc(16 * (m.n + 1) + 1);
    size_t gl = 0;
    got[0] = '\0';
    for (size_t i = 0; i < m.n; i++)
      gl += (size_t) sprintf(got + gl, "%llu,", (unsigned long long) m.v[i].line_number);
    if (strcmp(got, want) != 0 || truncated)
      __builtin_trap();
    free(got);
    sbx__search_matches_free(&m);
  }
  free(want);
  sbx__grep_pattern_free(p);
  free(scratch);
  return 0;
}
