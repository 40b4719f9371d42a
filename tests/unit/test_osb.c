/* Unit tests for the opensandbox backend's pure parts: the event-stream reader and the output
 * sync name rules. (The backend itself is tested against a real sbxd in tests/integration.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "../../src/backends/opensandbox/osb.h"
#include "../../src/backends/opensandbox/sse.h"

struct seen {
  char types[32][32];
  char texts[32][64];
  int n;
};

static int on_event(void *arg, json_t *ev)
{
  struct seen *s = arg;
  if (s->n < 32) {
    snprintf(s->types[s->n], 32, "%s", json_string_value(json_object_get(ev, "type")));
    const char *t = json_string_value(json_object_get(ev, "text"));
    snprintf(s->texts[s->n], 64, "%s", t ? t : "");
    s->n++;
  }
  return 0;
}

static void feed_in_pieces(struct osb_sse *p, const char *s, size_t piece)
{
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i += piece)
    osb_sse_feed(p, s + i, n - i < piece ? n - i : piece);
  osb_sse_finish(p);
}

static void test_sse_framings(void **state)
{
  (void) state;
  /* raw JSON lines (execd), data: framing (SDKs accept both), comments and SSE fields skipped,
   * CRLF, a last line without a newline, split at every possible byte boundary */
  const char *stream = "{\"type\":\"init\",\"text\":\"abc\",\"timestamp\":1}\n\n"
                       ": keep-alive\r\n"
                       "event: message\n"
                       "id: 7\n"
                       "retry: 3000\n"
                       "data: {\"type\":\"stdout\",\"text\":\"hi\",\"timestamp\":2}\r\n\r\n"
                       "not json at all\n"
                       "{\"no_type\":1}\n"
                       "  {\"type\":\"stderr\",\"text\":\"\\n\",\"timestamp\":3}  \n"
                       "{\"type\":\"execution_complete\",\"timestamp\":4}";
  for (size_t piece = 1; piece <= strlen(stream); piece++) {
    struct seen s = {0};
    struct osb_sse p = {.on_event = on_event, .arg = &s};
    feed_in_pieces(&p, stream, piece);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.types[0], "init");
    assert_string_equal(s.texts[0], "abc");
    assert_string_equal(s.types[1], "stdout");
    assert_string_equal(s.texts[1], "hi");
    assert_string_equal(s.types[2], "stderr");
    assert_string_equal(s.texts[2], "\n");
    assert_string_equal(s.types[3], "execution_complete");
    assert_int_equal(p.bad_lines, 2);
    osb_sse_free(&p);
  }
}

static void test_sse_overlong_line(void **state)
{
  (void) state;
  struct seen s = {0};
  struct osb_sse p = {.on_event = on_event, .arg = &s, .max_line = 64};
  char big[300];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  osb_sse_feed(&p, big, strlen(big));
  osb_sse_feed(&p, "\n{\"type\":\"ping\"}\n", 17);
  osb_sse_finish(&p);
  assert_int_equal(s.n, 1);
  assert_string_equal(s.types[0], "ping");
  assert_int_equal(p.dropped, 299);
  osb_sse_free(&p);
}

static bool ok(const char *c)
{
  return osb_sync_component_ok(c, strlen(c));
}

static void test_sync_names(void **state)
{
  (void) state;
  assert_true(ok("report.pdf"));
  assert_true(ok("a b"));
  assert_true(ok("\xc3\xa9t\xc3\xa9.txt"));
  assert_true(ok(".hidden"));
  assert_true(ok("COM0"));
  assert_true(ok("console"));
  assert_false(ok(""));
  assert_false(ok("."));
  assert_false(ok(".."));
  assert_false(ok("a\\b"));
  assert_false(ok("c:x"));
  assert_false(ok("trailing."));
  assert_false(ok("trailing "));
  assert_false(ok("CON"));
  assert_false(ok("con.txt"));
  assert_false(ok("Nul"));
  assert_false(ok("aux.tar.gz"));
  assert_false(ok("COM1"));
  assert_false(ok("lpt9.log"));
  assert_false(ok("tab\tname"));
  assert_false(ok("new\nline"));
}

static void test_url_escape(void **state)
{
  (void) state;
  char *e = osb_url_escape("a-Z_0.9~");
  assert_string_equal(e, "a-Z_0.9~"); /* unreserved: as is */
  free(e);
  e = osb_url_escape("/a b?x=1&y=%\xc3\xa9");
  assert_string_equal(e, "%2Fa%20b%3Fx%3D1%26y%3D%25%C3%A9");
  free(e);
}

/* A file's name is the sandbox's (any byte but / and NUL): it must stay inside its quoted
 * parameter, whichever bytes it has. */
static void test_multipart_filename(void **state)
{
  (void) state;
  sbx_buf_t b = {0};
  osb_multipart_append(&b, "BND", "file", "plain.txt", "text/plain", "x", 1);
  sbx__buf_putc(&b, '\0');
  assert_non_null(strstr(b.data, "name=\"file\"; filename=\"plain.txt\"\r\n")); /* control */
  sbx__buf_free(&b);
  osb_multipart_append(&b, "BND", "file", "a\"b\r\nX-Injected: 1\r\n\r\n", "text/plain", "x", 1);
  osb_multipart_end(&b, "BND");
  sbx__buf_putc(&b, '\0');
  assert_null(strstr(b.data, "\r\nX-Injected"));
  assert_non_null(strstr(b.data, "filename=\"a%22b%0D%0AX-Injected: 1%0D%0A%0D%0A\"\r\n"));
  assert_string_equal(b.data, "--BND\r\nContent-Disposition: form-data; name=\"file\"; "
                              "filename=\"a%22b%0D%0AX-Injected: 1%0D%0A%0D%0A\"\r\n"
                              "Content-Type: text/plain\r\n\r\nx\r\n--BND--\r\n");
  sbx__buf_free(&b);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sse_framings),       cmocka_unit_test(test_sse_overlong_line),
      cmocka_unit_test(test_sync_names),         cmocka_unit_test(test_url_escape),
      cmocka_unit_test(test_multipart_filename),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
