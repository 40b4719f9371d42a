/* Unit-level regression tests for the defects the security suite found (docs/security.md, "Fixes
 * made with this suite"), where a unit test can reach them:
 * - sbx__rm_rf_at removes trees far deeper than the caller's descriptor limit, never follows a
 *   link out of the tree, and survives a name collision with its own moved-up subtrees;
 * - sbx__frame_send to a peer that died fails with EPIPE instead of raising SIGPIPE;
 * - list_dir, glob and grep open their root through sbx__search_open_root (the hook sbx-init uses
 *   to resolve it inside the sandbox without magic links).
 * The agent-side regressions (brace expansion depth, EXEC environment entries) are seeds of
 * fuzz/corpus/agent (regress-*), run by fuzz_agent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto.h"
#include "search.h"
#include "util.h"

static char *make_tmpdir(void)
{
  char *d = xstrdup("/tmp/sbx-regress-XXXXXX");
  assert_non_null(mkdtemp(d));
  return d;
}

/* A chain of depth directories below dir/name, with a file at the bottom. */
static void make_chain(const char *dir, const char *name, int depth)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  assert_true(fd >= 0);
  assert_int_equal(mkdirat(fd, name, 0755), 0);
  int cur = openat(fd, name, O_RDONLY | O_DIRECTORY);
  close(fd);
  for (int i = 0; i < depth; i++) {
    assert_int_equal(mkdirat(cur, "d", 0755), 0);
    int next = openat(cur, "d", O_RDONLY | O_DIRECTORY);
    assert_true(next >= 0);
    close(cur);
    cur = next;
  }
  int f = openat(cur, "leaf", O_WRONLY | O_CREAT, 0644);
  assert_true(f >= 0);
  close(f);
  close(cur);
}

static void test_rm_rf_deeper_than_the_descriptor_limit(void **state)
{
  (void) state;
  cleanup_free char *dir = make_tmpdir();
  make_chain(dir, "tree", 3000);
  /* fewer descriptors than the levels sbx__rm_rf_at keeps open (only the soft limit: raising a
   * hard limit back needs CAP_SYS_RESOURCE) */
  struct rlimit saved;
  getrlimit(RLIMIT_NOFILE, &saved);
  struct rlimit low = {24, saved.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  int r = sbx__rm_rf_at(fd, "tree");
  setrlimit(RLIMIT_NOFILE, &saved);
  assert_int_equal(r, 0);
  assert_int_equal(faccessat(fd, "tree", F_OK, AT_SYMLINK_NOFOLLOW), -1);
  close(fd);
  assert_int_equal(rmdir(dir), 0);
}

static void test_rm_rf_never_follows_links_out(void **state)
{
  (void) state;
  cleanup_free char *dir = make_tmpdir();
  cleanup_free char *outside = xasprintf("%s/outside", dir);
  cleanup_free char *keep = xasprintf("%s/outside/keep", dir);
  assert_int_equal(mkdir(outside, 0755), 0);
  int f = open(keep, O_WRONLY | O_CREAT, 0644);
  close(f);
  make_chain(dir, "tree", 200);
  /* links to the outside at the top and deep down (below the moved-up depth) */
  cleanup_free char *l1 = xasprintf("%s/tree/link", dir);
  assert_int_equal(symlink(outside, l1), 0);
  sbx_buf_t deep = {0};
  sbx__buf_printf(&deep, "%s/tree", dir);
  for (int i = 0; i < 150; i++)
    sbx__buf_puts(&deep, "/d");
  sbx__buf_puts(&deep, "/link");
  assert_int_equal(symlink(outside, deep.data), 0);
  sbx__buf_free(&deep);
  /* a name the walk itself uses for moved-up subtrees, already taken */
  cleanup_free char *taken = xasprintf("%s/tree/.sbx-rm-0", dir);
  f = open(taken, O_WRONLY | O_CREAT, 0644);
  close(f);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  assert_int_equal(sbx__rm_rf_at(fd, "tree"), 0);
  assert_int_equal(faccessat(fd, "tree", F_OK, AT_SYMLINK_NOFOLLOW), -1);
  assert_int_equal(access(keep, F_OK), 0);
  assert_int_equal(sbx__rm_rf_at(fd, "outside"), 0);
  close(fd);
  assert_int_equal(rmdir(dir), 0);
}

static void test_frame_send_to_a_dead_peer_is_epipe(void **state)
{
  (void) state;
  signal(SIGPIPE, SIG_DFL); /* as in the CLI: a SIGPIPE would kill this test */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  close(sv[1]);
  char data[4096] = {0};
  errno = 0;
  assert_int_equal(sbx__frame_send(sv[0], SBX_MSG_DATA, 1, data, sizeof data), -1);
  assert_int_equal(errno, EPIPE);
  close(sv[0]);
  /* a pipe (not a socket) still works */
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(sbx__frame_send(p[1], SBX_MSG_OK, 1, NULL, 0), 0);
  close(p[0]);
  close(p[1]);
}

static int opened;

static int refusing_opener(const char *path, int flags)
{
  (void) path, (void) flags;
  opened++;
  errno = ELOOP;
  return -1;
}

static void test_search_roots_go_through_the_hook(void **state)
{
  (void) state;
  int (*saved)(const char *, int) = sbx__search_open_root;
  sbx__search_open_root = refusing_opener;
  sbx_strv_t out = {0};
  sbx_grep_matches_t m = {0};
  bool truncated;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__search_list_dir("/tmp", 1, 10, 0, &out, &truncated, &err), -1);
  sbx_error_release(&err);
  assert_int_equal(sbx__search_glob("/tmp", "*", false, 10, 0, &out, &truncated, &err), -1);
  sbx_error_release(&err);
  assert_int_equal(sbx__search_grep("/tmp", "x", NULL, true, true, 10, 0, &m, &truncated, &err),
                   -1);
  sbx_error_release(&err);
  sbx__search_open_root = saved;
  assert_int_equal(opened, 3);
  assert_int_equal(out.n, 0);
  assert_int_equal(m.n, 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rm_rf_deeper_than_the_descriptor_limit),
      cmocka_unit_test(test_rm_rf_never_follows_links_out),
      cmocka_unit_test(test_frame_send_to_a_dead_peer_is_epipe),
      cmocka_unit_test(test_search_roots_go_through_the_hook),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
