/* libFuzzer target for the relay's Host / SNI reader (src/net/peek.c): the first bytes of a
 * connection the sandbox makes to port 80 or 443, hostile by assumption.
 *
 * Oracles:
 * - a name is given only with SBX_PEEK_NAME, and then it is 1..253 characters of lowercase
 *   letters, digits, '-', '_' and '.', with no empty label and no trailing dot;
 * - with full set, the answer is never "more";
 * - the answer depends on the bytes up to the point it was given: when a prefix already gives
 *   an answer other than "more", the whole input gives the same answer and the same name;
 * - nothing reads outside the input (ASan), loops end (the time-out).
 *
 * Run: fuzz/run.sh 60 fuzz_net_peek */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/peek.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(enum sbx_peek_result r, const char *name)
{
  size_t len = strlen(name);
  if ((r == SBX_PEEK_NAME) != (len > 0) || len > SBX_PEEK_NAME_MAX)
    abort();
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              (c == '.' && i > 0 && i + 1 < len && name[i - 1] != '.');
    if (!ok)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char whole[SBX_PEEK_NAME_MAX + 1], part[SBX_PEEK_NAME_MAX + 1];
  enum sbx_peek_result w = sbx__peek_name(data, size, 0, whole);
  check(w, whole);
  enum sbx_peek_result f = sbx__peek_name(data, size, 1, part);
  check(f, part);
  if (f == SBX_PEEK_MORE || (w != SBX_PEEK_MORE && (f != w || strcmp(part, whole) != 0)))
    abort();
  if (size > SBX_PEEK_MAX)
    return 0;
  /* a few prefixes (all of them would make the target quadratic) */
  size_t cuts[] = {size / 4, size / 2, size * 3 / 4, size > 0 ? size - 1 : 0};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    enum sbx_peek_result p = sbx__peek_name(data, cuts[i], 0, part);
    check(p, part);
    if (p != SBX_PEEK_MORE && (p != w || strcmp(part, whole) != 0))
      abort();
    check(sbx__peek_name(data, cuts[i], 1, part), part);
  }
  return 0;
}
