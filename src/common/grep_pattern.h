/* grep's pattern preparation and line matching. Its contract is the differential fuzzer
 * fuzz/fuzz_grep_line.c: a line matches iff plain regexec (C.UTF-8, REG_EXTENDED|REG_NEWLINE
 * [|REG_ICASE]) matches the line decoded with replacement (literals: strstr / ASCII folding / an
 * escaped REG_ICASE regex), so the required-literal prefilter, the C-locale regex for ASCII
 * text, REG_NOSUB and whole-buffer search never change an answer; and a pattern is refused only
 * if regcomp refuses it or it is too costly to compile. */
#ifndef SBX_GREP_PATTERN_H
#define SBX_GREP_PATTERN_H

#include <locale.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "util.h"

/* A compiled grep pattern: POSIX ERE (glibc regcomp, REG_EXTENDED|REG_NEWLINE, so GNU's \w \s
 * \b \< \> and back-references work; UTF-8 aware through a per-thread C.UTF-8 locale), or a
 * fixed string with literal. Case-insensitive unless case_sensitive: REG_ICASE (Unicode case
 * folding) for regexes and non-ASCII literals, ASCII folding for ASCII literals. A bad regex is
 * SBX_E_INVALID: "invalid regular expression '<pattern>': <regerror text>". A literal never
 * fails. A pattern object keeps a scratch buffer: use one per thread. */
typedef struct sbx_grep_pattern_s sbx_grep_pattern_t;
sbx_grep_pattern_t *sbx__grep_pattern_new(const char *pattern, bool literal, bool case_sensitive,
                                          sbx_error_t *err);
/* line: one line without its '\n' (need not be NUL-terminated; may hold NULs). A trailing '\r'
 * is not part of the line and ill-formed UTF-8 reads as U+FFFD, as in the lines grep reports, so
 * "x$" matches "x\r". */
bool sbx__grep_pattern_match(sbx_grep_pattern_t *p, const char *line, size_t len);
void sbx__grep_pattern_free(sbx_grep_pattern_t *p);

/* ---- for grep.c's whole-buffer search ---- */

/* A fixed string to find, case-sensitive or with ASCII case folding. Like GNU grep, it jumps
 * from one occurrence of the needle's rarest byte to the next with memchr (vectorized in
 * glibc), two memchr streams for a letter when folding, and compares around each. */
typedef struct {
  char *s; /* folded if icase */
  size_t n;
  bool icase;
  size_t rare; /* index of the byte to look for */
} sbx_needle_t;

/* Offset of the first occurrence in hay[0..n), or -1. */
ssize_t sbx__needle_find(const sbx_needle_t *nd, const char *hay, size_t n);

enum {
  SBX_GREP_PK_LITERAL, /* fixed string: case-sensitive, or ASCII case-insensitive */
  SBX_GREP_PK_REGEX,   /* POSIX ERE (also a non-ASCII case-insensitive literal, escaped) */
};

struct sbx_grep_pattern_s {
  int kind;
  /* Whole-buffer search is ruled out by a '\n' in the pattern (lines never hold one) and by
   * glibc's buffer anchors \` and \' (they match only at the ends of the searched string). */
  bool line_by_line;
  /* A back-reference makes glibc backtrack, exponentially in the line's length: such a pattern
   * is matched in a killable worker process (grep_in_worker). Without one, regexec with
   * REG_NOSUB is glibc's DFA, polynomial: matched in-process. */
  bool backrefs;
  sbx_needle_t lit; /* SBX_GREP_PK_LITERAL */
  regex_t re;       /* SBX_GREP_PK_REGEX, compiled in C.UTF-8 (or C if unavailable), REG_NOSUB */
  locale_t loc;
  regex_t re_c; /* the same regex compiled in the C locale, for ASCII text (ASCII patterns) */
  bool has_re_c;
  /* A literal every match contains, to find candidate lines before running the regex: must for
   * ASCII text (and any text when case-sensitive), must_safe for non-ASCII text when
   * case-insensitive, without the letters non-ASCII characters fold to (i, s, k: U+0131,
   * U+0130, U+017F, U+212A). */
  sbx_needle_t must, must_safe;
  bool has_must, has_must_safe;
  sbx_buf_t scratch; /* a sanitized / NUL-terminated copy of the line being matched */
};

/* True if the regex matches in s[from..to) (s[to] readable; the bytes before from give ^ and
 * word context, to is the end of the string for $). ascii: the text is pure ASCII. */
bool sbx__grep_regex_run(sbx_grep_pattern_t *p, bool ascii, const char *s, size_t from, size_t to);
/* The required-literal prefilter that applies to text of this class (ascii or UTF-8), or
 * NULL. */
const sbx_needle_t *sbx__grep_pattern_must(const sbx_grep_pattern_t *p, bool ascii);

#endif
