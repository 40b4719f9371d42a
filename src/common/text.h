/* Text rules of the contract (contract.md §1.1, §1.2): UTF-8 checks, read_file line ranges,
 * and the rendered execute_command result an agent reads. Pure functions, shared by every
 * backend so they all answer alike. */
#ifndef SBX_TEXT_H
#define SBX_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

#include <locale.h>

/* A read_file bound that was not given. */
#define SBX_LINE_NONE INT64_MIN

#define SBX_UTF8_BAD UINT32_MAX

/* The one UTF-8 decoder: the sequence at s (len >= 1 bytes). Returns its length (1..4) and sets
 * *cp to its code point; an ill-formed sequence (overlong, surrogate, past U+10FFFF, cut short,
 * a stray continuation byte) gives the length of its maximal subpart (Unicode §3.9: what
 * Python's errors='replace' turns into one U+FFFD) and *cp = SBX_UTF8_BAD. Byte i is read only
 * once bytes 0..i-1 were accepted, so a NUL-terminated string may be passed with len 4. */
size_t sbx__utf8_next(const void *s, size_t len, uint32_t *cp);

bool sbx__utf8_valid(const char *s, size_t len);
/* How many bytes at s are ASCII before the first that is not (eight at a time). */
size_t sbx__ascii_run(const void *s, size_t len);
/* Copy with each maximal invalid sequence replaced by U+FFFD; *outlen gets the length. */
char *sbx__utf8_sanitize(const char *s, size_t len, size_t *outlen);
/* The same, appended to b. */
void sbx__buf_put_utf8_lossy(sbx_buf_t *b, const char *s, size_t len);
/* Code points of s as decoded with replacement (each maximal invalid subsequence counts 1). */
size_t sbx__utf8_count_lossy(const char *s, size_t len);
/* One scan's verdict on a text: pure ASCII, well-formed UTF-8, or not. */
enum { SBX_TEXT_ASCII, SBX_TEXT_UTF8, SBX_TEXT_INVALID };
int sbx__text_class(const char *s, size_t len);
/* True if the string is pure ASCII. */
bool sbx__str_ascii(const char *s);

/* Two locales created once for the life of the process (C, and C.UTF-8 or C if the system has
 * none), to switch to per thread with uselocale (never setlocale): fnmatch and regex see code
 * points under the second. */
locale_t sbx__locale_c(void);
locale_t sbx__locale_utf8(void);

/* read_file's range: 1-based, inclusive; start < 1 clamps to 1; end <= 0 or start past the end
 * gives ""; with neither bound the text is returned unchanged. Lines split on '\n', a trailing
 * '\r' removed from each, joined with '\n' without a trailing newline. */
char *sbx__text_line_range(const char *text, size_t len, int64_t start, int64_t end,
                           size_t *outlen);

/* True if key matches ^[A-Za-z_][A-Za-z0-9_]*$. */
bool sbx__env_key_valid(const char *key, size_t len);
/* Checks "KEY=VALUE" strings; on a bad key sets DeerFlow's ValueError text. */
int sbx__env_check(const char *const *env, size_t n, sbx_error_t *err);

/* What a finished command produced, as execute_command renders it. */
typedef struct {
  const char *out;
  size_t out_len;
  uint64_t out_total; /* bytes the command wrote; > out_len means some were dropped */
  const char *err;
  size_t err_len;
  uint64_t err_total;
  int exit_code; /* negative = killed by that signal */
  bool timed_out;
} sbx_exec_output_t;

/* The truncation marker appended to a stream whose total exceeded what was kept. */
char *sbx__exec_stream_text(const char *data, size_t len, uint64_t total, size_t *outlen);
/* stdout; then stderr (after "\nStd Error:\n" when stdout is non-empty); then on timeout
 * "Error: command timed out" and "Exit Code: 124" lines, otherwise on a non-zero exit
 * "Exit Code: N"; "(no output)" if empty. Invalid UTF-8 is replaced (U+FFFD); a NUL byte of
 * the output stays (as DeerFlow's providers keep it), so *outlen is the text's length. */
char *sbx__exec_render(const sbx_exec_output_t *o, size_t *outlen);

/* DeerFlow's tool-layer caps (deerflow/sandbox/tools.py: _truncate_bash_output,
 * _truncate_read_file_output, _truncate_ls_output), on the text a model reads. Characters are
 * code points once invalid UTF-8 is replaced (Python's len of the decoded text); the result,
 * marker included, has at most max of them; max <= 0 leaves the text whole. A copy of s
 * (sanitized), NUL-terminated, its length in *outlen. Middle: the head and tail halves and
 * "\n... [middle truncated: N chars skipped] ...\n". Head: the first characters and
 * "\n... [truncated: showing first K of N chars. HINT] ...". */
char *sbx__truncate_middle(const char *s, size_t len, int64_t max, size_t *outlen);
char *sbx__truncate_head(const char *s, size_t len, int64_t max, const char *hint, size_t *outlen);

#endif
