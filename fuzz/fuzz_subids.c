/* sbx__subids_overlap and sbx__subids_find (src/backends/linux/ids.c): the parsers of
 * /etc/subuid and /etc/subgid that keep sandbox id ranges off every host user's subordinate ids
 * and find a rootless user's own (by name "sbx", or by the range's first id as a uid, with the
 * range's count as the minimum). Input: 8 bytes of range
 * (first, count), then the file's text. Oracle: an independent reading of the same grammar
 * (lines "name:first:count", decimal digits only; other lines are not entries) with 128-bit
 * arithmetic for the overlap. */
#include "linux.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* digits in [p, end) as a number; false if empty, not all digits or over 2^64-1 */
static bool number(const char *p, const char *end, unsigned __int128 *v)
{
  if (p == end)
    return false;
  *v = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9')
      return false;
    *v = *v * 10 + (unsigned) (*p - '0');
    if (*v > UINT64_MAX)
      return false;
  }
  return true;
}

static bool reference(const char *text, size_t len, uint32_t first, uint32_t count)
{
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && text[j] != '\n')
      j++;
    const char *line = text + i, *end = text + j;
    const char *c1 = memchr(line, ':', (size_t) (end - line));
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t) (end - c1 - 1)) : NULL;
    unsigned __int128 a, n;
    if (c2 && number(c1 + 1, c2, &a) && number(c2 + 1, end, &n) && n > 0 &&
        a < (unsigned __int128) first + count && a + n > first)
      return true;
    i = j + 1;
  }
  return false;
}

/* the first entry of name or uid with at least min ids, all below 2^32 - 1 */
static bool reference_find(const char *text, size_t len, const char *name, uint32_t uid,
                           uint32_t min, uint32_t *first, uint32_t *count)
{
  char u[16];
  snprintf(u, sizeof u, "%u", (unsigned) uid);
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && text[j] != '\n')
      j++;
    const char *line = text + i, *end = text + j;
    const char *c1 = memchr(line, ':', (size_t) (end - line));
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t) (end - c1 - 1)) : NULL;
    unsigned __int128 a, n;
    if (c2 && number(c1 + 1, c2, &a) && number(c2 + 1, end, &n)) {
      size_t k = (size_t) (c1 - line);
      bool who = (strlen(name) == k && memcmp(line, name, k) == 0) ||
                 (strlen(u) == k && memcmp(line, u, k) == 0);
      if (who && n >= min && a + n < UINT32_MAX) {
        *first = (uint32_t) a;
        *count = (uint32_t) n;
        return true;
      }
    }
    i = j + 1;
  }
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 8)
    return 0;
  uint32_t first, count;
  memcpy(&first, data, 4);
  memcpy(&count, data + 4, 4);
  size_t len = size - 8;
  char *text = malloc(len + 1);
  memcpy(text, data + 8, len);
  text[len] = '\0';
  size_t real = strlen(text); /* the parser reads a C string: stop where it stops */
  if (sbx__subids_overlap(text, first, count) != reference(text, real, first, count))
    abort();
  uint32_t f1 = 0, c1 = 0, f2 = 0, c2 = 0;
  bool found = sbx__subids_find(text, "sbx", first, count, &f1, &c1);
  if (found != reference_find(text, real, "sbx", first, count, &f2, &c2) ||
      (found && (f1 != f2 || c1 != c2)))
    abort();
  free(text);
  return 0;
}
