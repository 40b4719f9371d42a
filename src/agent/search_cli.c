/* `sbx-init search ...`: the native search run as a plain command, for sandboxes that are
 * reached only through a command API (the opensandbox backend uploads this static binary into
 * its remote sandboxes). Output is one JSON object per line, then a status line:
 *
 *   sbx-init search ls   PATH DEPTH
 *   sbx-init search glob PATH PATTERN INCLUDE_DIRS(0|1) MAX
 *   sbx-init search grep PATH PATTERN GLOB(-:none) LITERAL(0|1) CASE_SENSITIVE(0|1) MAX
 *
 *   {"p":"/abs/path"}                         (ls, glob)
 *   {"p":"/abs/path","n":12,"t":"line"}       (grep)
 *   {"ok":true,"truncated":false}             or {"ok":false,"kind":"not_found","msg":"..."}
 *
 * Each ends by SBX_SEARCH_TIMEOUT_MS in the environment (ms; unset or 0: SBX_SEARCH_DEFAULT_MS,
 * never more than SBX_SEARCH_TIMEOUT_MAX_MS), answering what it found with truncated true.
 */
#include "agent.h"
#include "search.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_str(FILE *f, const char *s)
{
  size_t n;
  cleanup_free char *clean = sbx__utf8_sanitize(s, strlen(s), &n);
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char) clean[i];
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static int finish(int r, bool truncated, sbx_error_t *err)
{
  if (r < 0) {
    printf("{\"ok\":false,\"kind\":\"%s\",\"msg\":", sbx_error_kind_name((*err)->kind));
    json_str(stdout, (*err)->msg);
    printf("}\n");
    sbx_error_release(err);
    return 1;
  }
  printf("{\"ok\":true,\"truncated\":%s}\n", truncated ? "true" : "false");
  return 0;
}

static bool num(const char *s, long long *out)
{
  char *end;
  *out = strtoll(s, &end, 10);
  return *s && *end == '\0';
}

/* the deadline of this search: SBX_SEARCH_TIMEOUT_MS from now */
static uint64_t search_deadline(void)
{
  const char *v = getenv("SBX_SEARCH_TIMEOUT_MS");
  long long ms = 0;
  if (v == NULL || !num(v, &ms) || ms <= 0)
    ms = SBX_SEARCH_DEFAULT_MS;
  if (ms > SBX_SEARCH_TIMEOUT_MAX_MS)
    ms = SBX_SEARCH_TIMEOUT_MAX_MS;
  return sbx__now_ms() + (uint64_t) ms;
}

int sbx__agent_search_main(int argc, char **argv)
{
  sbx_error_t err = NULL;
  bool truncated = false;
  long long a, b, c, d;
  if (argc == 4 && strcmp(argv[1], "ls") == 0 && num(argv[3], &a)) {
    sbx_strv_t out = {0};
    int r =
        sbx__search_list_dir(argv[2], (int) a, 100000, search_deadline(), &out, &truncated, &err);
    for (size_t i = 0; r == 0 && i < out.n; i++) {
      printf("{\"p\":");
      json_str(stdout, out.v[i]);
      printf("}\n");
    }
    sbx__strv_free(&out);
    return finish(r, truncated, &err);
  }
  if (argc == 6 && strcmp(argv[1], "glob") == 0 && num(argv[4], &a) && num(argv[5], &b)) {
    sbx_strv_t out = {0};
    int r = sbx__search_glob(argv[2], argv[3], a != 0, (size_t) b, search_deadline(), &out,
                             &truncated, &err);
    for (size_t i = 0; r == 0 && i < out.n; i++) {
      printf("{\"p\":");
      json_str(stdout, out.v[i]);
      printf("}\n");
    }
    sbx__strv_free(&out);
    return finish(r, truncated, &err);
  }
  if (argc == 8 && strcmp(argv[1], "grep") == 0 && num(argv[5], &a) && num(argv[6], &b) &&
      num(argv[7], &c)) {
    (void) d;
    sbx_grep_matches_t m = {0};
    const char *glob = strcmp(argv[4], "-") == 0 ? NULL : argv[4];
    int r = sbx__search_grep(argv[2], argv[3], glob, a != 0, b != 0, (size_t) c, search_deadline(),
                             &m, &truncated, &err);
    for (size_t i = 0; r == 0 && i < m.n; i++) {
      printf("{\"p\":");
      json_str(stdout, m.v[i].path);
      printf(",\"n\":%llu,\"t\":", (unsigned long long) m.v[i].line_number);
      json_str(stdout, m.v[i].line);
      printf("}\n");
    }
    sbx__search_matches_free(&m);
    return finish(r, truncated, &err);
  }
  fprintf(stderr, "usage: sbx-init search ls PATH DEPTH | glob PATH PATTERN DIRS MAX | "
                  "grep PATH PATTERN GLOB LITERAL CASE MAX\n");
  return 2;
}
