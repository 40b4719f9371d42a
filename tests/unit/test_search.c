/* Unit tests for src/common's search mechanisms (ignore.c, pathmatch.c, grep_pattern.c, walk.c,
 * grep.c, search.c): path_matches, the ignore list, list_dir, glob and grep over
 * real temporary trees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <fnmatch.h>
#include <locale.h>
#include <regex.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "search.h"
#include "util.h"

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */

static int setup_tmp(void **state)
{
  char tmpl[] = "/tmp/sbx_search_test_XXXXXX";
  char *d = mkdtemp(tmpl);
  if (d == NULL)
    return -1;
  *state = xstrdup(d);
  return 0;
}

static int teardown_tmp(void **state)
{
  char *d = *state;
  sbx__rm_rf_at(AT_FDCWD, d);
  free(d);
  return 0;
}

static char *join_path(const char *root, const char *rel)
{
  return xasprintf("%s/%s", root, rel);
}

static void mkdirs(const char *root, const char *rel)
{
  cleanup_free char *p = join_path(root, rel);
  assert_int_equal(sbx__mkdir_p(p, 0755), 0);
}

static void write_bytes(const char *root, const char *rel, const void *data, size_t len)
{
  cleanup_free char *p = join_path(root, rel);
  char *slash = strrchr(p, '/');
  *slash = '\0';
  assert_int_equal(sbx__mkdir_p(p, 0755), 0);
  *slash = '/';
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(sbx__write_all(fd, data, len), 0);
  close(fd);
}

static void write_text(const char *root, const char *rel, const char *text)
{
  write_bytes(root, rel, text, strlen(text));
}

static void make_symlink(const char *root, const char *target, const char *rel)
{
  cleanup_free char *p = join_path(root, rel);
  assert_int_equal(symlink(target, p), 0);
}

/* Results relative to root, one per line, in order. Every result must start with root + "/". */
static char *rel_list(const sbx_strv_t *v, const char *root)
{
  sbx_buf_t b = {0};
  size_t rl = strlen(root);
  for (size_t i = 0; i < v->n; i++) {
    assert_true(strncmp(v->v[i], root, rl) == 0);
    assert_true(v->v[i][rl] == '/');
    sbx__buf_puts(&b, v->v[i] + rl + 1);
    sbx__buf_putc(&b, '\n');
  }
  assert_null(v->n ? v->v[v->n] : NULL);
  return sbx__buf_steal(&b);
}

/* "rel:line:text\n" per match. */
static char *rel_matches(const sbx_grep_matches_t *m, const char *root)
{
  sbx_buf_t b = {0};
  size_t rl = strlen(root);
  for (size_t i = 0; i < m->n; i++) {
    const char *p = m->v[i].path;
    if (strncmp(p, root, rl) == 0 && p[rl] == '/')
      p += rl + 1;
    sbx__buf_printf(&b, "%s:%llu:%s\n", p, (unsigned long long) m->v[i].line_number, m->v[i].line);
  }
  return sbx__buf_steal(&b);
}

static char *glob_rel(const char *root, const char *pattern, bool include_dirs, size_t max,
                      bool *truncated)
{
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  bool t = false;
  assert_int_equal(sbx__search_glob(root, pattern, include_dirs, max, 0, &v, &t, &err), 0);
  assert_null(err);
  char *r = rel_list(&v, root);
  sbx__strv_free(&v);
  if (truncated)
    *truncated = t;
  return r;
}

static char *list_rel(const char *root, int depth, size_t max, bool *truncated)
{
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  bool t = true;
  assert_int_equal(sbx__search_list_dir(root, depth, max, 0, &v, &t, &err), 0);
  assert_null(err);
  char *r = rel_list(&v, root);
  sbx__strv_free(&v);
  if (truncated)
    *truncated = t;
  return r;
}

static char *grep_rel(const char *root, const char *pattern, const char *glob, bool literal,
                      bool cs, size_t max, bool *truncated)
{
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = true;
  int r = sbx__search_grep(root, pattern, glob, literal, cs, max, 0, &m, &t, &err);
  if (err)
    fprintf(stderr, "grep error: %s\n", err->msg);
  assert_int_equal(r, 0);
  assert_null(err);
  char *s = rel_matches(&m, root);
  sbx__search_matches_free(&m);
  if (truncated)
    *truncated = t;
  return s;
}

static char *repeat(const char *unit, size_t n)
{
  sbx_buf_t b = {0};
  for (size_t i = 0; i < n; i++)
    sbx__buf_puts(&b, unit);
  return sbx__buf_steal(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* path_matches                                                                                */

static void test_path_matches_contract_examples(void **state)
{
  /* no '/': basename at any depth */
  assert_true(sbx__path_matches("*.py", "a.py"));
  assert_true(sbx__path_matches("*.py", "x/y/a.py"));
  assert_false(sbx__path_matches("*.py", "x/y/a.pyc"));
  assert_false(sbx__path_matches("*.py", "a.py/b.txt"));
  assert_true(sbx__path_matches("*", "x/y/anything"));
  assert_true(sbx__path_matches("*", ".hidden"));    /* '*' matches a leading dot */
  assert_true(sbx__path_matches("*.py", ".hid.py")); /* no FNM_PERIOD */
  assert_true(sbx__path_matches("a.py", "deep/er/a.py"));
  assert_false(sbx__path_matches("*.PY", "a.py")); /* case-sensitive */
  assert_true(sbx__path_matches("?.py", "x/a.py"));
  assert_false(sbx__path_matches("?.py", "x/ab.py"));
  assert_true(sbx__path_matches("[ab].c", "b.c"));
  assert_false(sbx__path_matches("[!ab].c", "b.c"));
  assert_true(sbx__path_matches("[!ab].c", "z.c"));
  /* '?' is one code point, not one byte */
  assert_true(sbx__path_matches("?.py", "\xc3\xa9.py"));
  assert_true(sbx__path_matches("\xc3\xa9*", "dir/\xc3\xa9t\xc3\xa9.txt"));
  /* '/': anchored, segment by segment */
  assert_true(sbx__path_matches("src/**/*.py", "src/a.py"));
  assert_true(sbx__path_matches("src/**/*.py", "src/b/c/a.py"));
  assert_false(sbx__path_matches("src/**/*.py", "x/src/a.py"));
  assert_false(sbx__path_matches("src/**/*.py", "src/a.js"));
  assert_true(sbx__path_matches("src/*.py", "src/a.py"));
  assert_false(sbx__path_matches("src/*.py", "x/src/a.py"));
  assert_false(sbx__path_matches("src/*.py", "src/b/a.py")); /* '*' never crosses '/' */
  assert_true(sbx__path_matches("a*b/c", "axxb/c"));
  assert_false(sbx__path_matches("a*/c", "a/x/c"));
  assert_true(sbx__path_matches("*/c", "x/c"));
  assert_false(sbx__path_matches("*/c", "c"));
  assert_false(sbx__path_matches("src/a.py", "src/a.py/x"));
}

static void test_path_matches_doublestar(void **state)
{
  assert_true(sbx__path_matches("**/*.py", "a.py"));
  assert_true(sbx__path_matches("**/*.py", "a/b/c.py"));
  assert_true(sbx__path_matches("a/**/b", "a/b"));
  assert_true(sbx__path_matches("a/**/b", "a/x/b"));
  assert_true(sbx__path_matches("a/**/b", "a/x/y/b"));
  assert_false(sbx__path_matches("a/**/b", "a/x/c"));
  assert_false(sbx__path_matches("a/**/b", "b"));
  assert_true(sbx__path_matches("src/**", "src"));
  assert_true(sbx__path_matches("src/**", "src/a"));
  assert_true(sbx__path_matches("src/**", "src/a/b"));
  assert_false(sbx__path_matches("src/**", "lib/a"));
  assert_true(sbx__path_matches("**/x", "x"));
  assert_true(sbx__path_matches("**/**/**/**/x", "x"));
  assert_true(sbx__path_matches("**/**/**/**/x", "a/b/c/d/e/f/g/x"));
  assert_false(sbx__path_matches("**/**/**/**/x", "a/b/c/d/e/f/g/y"));
  assert_true(sbx__path_matches("**/a/**/b/**", "q/a/r/s/b"));
  assert_false(sbx__path_matches("**/a/**/b/**", "q/b/r/s/a"));
  /* "**" only as a whole segment; "a**" is a plain fnmatch segment */
  assert_true(sbx__path_matches("a**/c", "abc/c"));
  assert_false(sbx__path_matches("a**/c", "a/b/c"));
  /* no '/': "**" behaves like "*" on the basename */
  assert_true(sbx__path_matches("**", "a/b/c"));
  /* pathological: 60 "**" against a 300-segment non-matching path must stay fast */
  cleanup_free char *pat = repeat("**/", 60);
  cleanup_free char *pat2 = xasprintf("%sz", pat);
  cleanup_free char *path = repeat("a/", 300);
  cleanup_free char *path2 = xasprintf("%sy", path);
  cleanup_free char *path3 = xasprintf("%sz", path);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_false(sbx__path_matches(pat2, path2));
  assert_true(sbx__path_matches(pat2, path3));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
  assert_true(secs < 1.0);
}

static void test_path_matches_edges(void **state)
{
  /* empty pattern: nothing */
  assert_false(sbx__path_matches("", "a"));
  assert_false(sbx__path_matches("", ""));
  assert_false(sbx__path_matches(NULL, "a"));
  assert_false(sbx__path_matches("*", NULL));
  /* leading '/': never */
  assert_false(sbx__path_matches("/src/a.py", "src/a.py"));
  assert_false(sbx__path_matches("/*.py", "a.py"));
  assert_false(sbx__path_matches("/", "a"));
  assert_false(sbx__path_matches("/**", "a"));
  /* trailing '/': dropped, so "src/" is the no-'/' pattern "src" */
  assert_true(sbx__path_matches("src/", "src"));
  assert_true(sbx__path_matches("src/", "x/src"));
  assert_false(sbx__path_matches("src/", "src/a.py"));
  assert_true(sbx__path_matches("a/b/", "a/b"));
  assert_false(sbx__path_matches("a/b/", "x/a/b"));
  assert_true(sbx__path_matches("a/b//", "a/b"));
  /* empty path segments are ignored on both sides */
  assert_true(sbx__path_matches("src//*.py", "src/a.py"));
  assert_true(sbx__path_matches("src/*.py", "src//a.py"));
  /* a path without a segment matches nothing */
  assert_false(sbx__path_matches("*", ""));
  assert_false(sbx__path_matches("**/x", ""));
  /* invalid UTF-8 in names still matches byte-wise */
  assert_true(sbx__path_matches("*.txt", "a\xff.txt"));
  assert_true(sbx__path_matches("a?.txt", "a\xff.txt"));
}

/* ------------------------------------------------------------------------------------------ */
/* Ignore list                                                                                 */

static const char *const ignore_list[50] = {
    ".git",        ".svn",         ".hg",
    ".bzr",        "node_modules", "__pycache__",
    ".venv",       "venv",         ".env",
    "env",         ".tox",         ".nox",
    ".eggs",       "*.egg-info",   "site-packages",
    "dist",        "build",        ".next",
    ".nuxt",       ".output",      ".turbo",
    "target",      "out",          ".idea",
    ".vscode",     "*.swp",        "*.swo",
    "*~",          ".project",     ".classpath",
    ".settings",   ".DS_Store",    "Thumbs.db",
    "desktop.ini", "*.lnk",        "*.log",
    "*.tmp",       "*.temp",       ".upload-*.part",
    "*.bak",       "*.cache",      ".cache",
    "logs",        ".coverage",    "coverage",
    ".nyc_output", "htmlcov",      ".pytest_cache",
    ".mypy_cache", ".ruff_cache",
};

/* A concrete name each pattern ignores ('*' replaced by "x1"). */
static char *ignore_sample(const char *pat)
{
  sbx_buf_t b = {0};
  for (const char *p = pat; *p; p++) {
    if (*p == '*')
      sbx__buf_puts(&b, "x1");
    else
      sbx__buf_putc(&b, *p);
  }
  return sbx__buf_steal(&b);
}

static void test_ignore_segments(void **state)
{
  for (size_t i = 0; i < 50; i++) {
    cleanup_free char *name = ignore_sample(ignore_list[i]);
    assert_true(sbx__search_ignored_segment(name, strlen(name)));
    cleanup_free char *rel = xasprintf("a/%s/b.c", name);
    assert_true(sbx__search_ignored_path(rel));
  }
  /* star patterns also match their bare suffix, like fnmatch */
  assert_true(sbx__search_ignored_segment(".log", 4));
  assert_true(sbx__search_ignored_segment("~", 1));
  assert_true(sbx__search_ignored_segment(".upload-.part", 13));
  const char *keep[] = {"src",     "main.py",      "build2", "Build",     "NODE_MODULES",
                        "logs2",   ".gitignore",   "x.logx", ".upload-x", "x.part",
                        "envs",    "a.egg",        "outs",   "distro",    ".github",
                        "app.LOG", "coverage.xml", "x",      ".cache2",   "tmp"};
  for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
    assert_false(sbx__search_ignored_segment(keep[i], strlen(keep[i])));
  /* the length is honoured: "buildx" cut to "build" */
  assert_true(sbx__search_ignored_segment("buildx", 5));
  assert_false(sbx__search_ignored_segment("build", 0));
  assert_false(sbx__search_ignored_segment(NULL, 0));
  assert_false(sbx__search_ignored_path("a/b/c.py"));
  assert_false(sbx__search_ignored_path(""));
  assert_false(sbx__search_ignored_path("//x//y/"));
  assert_true(sbx__search_ignored_path("src/app.log"));
  assert_true(sbx__search_ignored_path("/abs/build/x"));
  assert_false(sbx__search_ignored_path(NULL));
}

/* The table-driven matcher must agree with fnmatch(3) on the 50 patterns. */
static void test_ignore_equals_fnmatch(void **state)
{
  const char *names[] = {
      ".git",
      "git",
      ".gitx",
      "node_modules",
      "x.egg-info",
      ".egg-info",
      "egg-info",
      "a.swp",
      "a.swpx",
      "~",
      "a~",
      "~a",
      ".upload-.part",
      ".upload-abc.part",
      ".upload-abc.par",
      "upload-a.part",
      "a.log",
      "log",
      ".log",
      "a.tmp",
      "a.temp",
      "a.te",
      "x.cache",
      ".cache",
      "cache",
      "Thumbs.db",
      "thumbs.db",
      "desktop.ini",
      "a.lnk",
      "a.bak",
      "bak",
      "logs",
      "coverage",
      ".coverage",
      "htmlcov",
      "target",
      "out",
      "dist",
      "build",
      "site-packages",
      "env",
      ".env",
      "venv",
      ".venv",
      "\xc3\xa9.log",
      "\xff.tmp",
      "a.b.c",
  };
  for (size_t n = 0; n < ARRAY_SIZE(names); n++) {
    bool want = false;
    for (size_t i = 0; i < 50; i++)
      want = want || fnmatch(ignore_list[i], names[n], 0) == 0;
    if (want != sbx__search_ignored_segment(names[n], strlen(names[n])))
      fail_msg("ignore mismatch for %s", names[n]);
  }
}

static void test_ignore_in_walks(void **state)
{
  const char *root = *state;
  write_text(root, "keep.txt", "needle\n");
  for (size_t i = 0; i < 50; i++) {
    cleanup_free char *name = ignore_sample(ignore_list[i]);
    cleanup_free char *f = xasprintf("files/%s", name);
    write_text(root, f, "needle\n");
    cleanup_free char *d = xasprintf("dirs/%s/inner.txt", name);
    write_text(root, d, "needle\n");
  }
  cleanup_free char *g = glob_rel(root, "*", true, 1000, NULL);
  assert_string_equal(g, "dirs\nfiles\nkeep.txt\n");
  cleanup_free char *l = list_rel(root, 5, 1000, NULL);
  assert_string_equal(l, "dirs/\nfiles/\nkeep.txt\n");
  cleanup_free char *m = grep_rel(root, "needle", NULL, false, false, 1000, NULL);
  assert_string_equal(m, "keep.txt:1:needle\n");
}

/* The root and its ancestors never hide anything (bug #5666). */
static void test_ignore_only_below_root(void **state)
{
  const char *root = *state;
  write_text(root, "build/ws/app.py", "print('hi')\n");
  write_text(root, "build/ws/node_modules/x.py", "print('hi')\n");
  cleanup_free char *ws = join_path(root, "build/ws");
  cleanup_free char *g = glob_rel(ws, "*.py", false, 10, NULL);
  assert_string_equal(g, "app.py\n");
  cleanup_free char *m = grep_rel(ws, "print", NULL, false, false, 10, NULL);
  assert_string_equal(m, "app.py:1:print('hi')\n");
  cleanup_free char *l = list_rel(ws, 2, 10, NULL);
  assert_string_equal(l, "app.py\n");
  /* the root itself may carry an ignored name */
  cleanup_free char *nm = join_path(root, "build/ws/node_modules");
  cleanup_free char *g2 = glob_rel(nm, "*.py", false, 10, NULL);
  assert_string_equal(g2, "x.py\n");
  /* a single-file root with an ignored name is searched */
  write_text(root, "debug.log", "print me\n");
  cleanup_free char *logf = join_path(root, "debug.log");
  sbx_grep_matches_t mm = {0};
  sbx_error_t err = NULL;
  bool t = true;
  assert_int_equal(sbx__search_grep(logf, "print", NULL, false, false, 10, 0, &mm, &t, &err), 0);
  assert_int_equal(mm.n, 1);
  assert_string_equal(mm.v[0].path, logf);
  assert_false(t);
  sbx__search_matches_free(&mm);
}

/* ------------------------------------------------------------------------------------------ */
/* glob                                                                                        */

static void make_order_tree(const char *root)
{
  write_text(root, "b.txt", "x\n");
  write_text(root, "a.txt", "x\n");
  write_text(root, "z/w.txt", "x\n");
  write_text(root, "c/x.txt", "x\n");
  write_text(root, "c/d/y.txt", "x\n");
  write_text(root, "B.txt", "x\n");
  mkdirs(root, "c/empty");
}

static void test_glob_order(void **state)
{
  const char *root = *state;
  make_order_tree(root);
  bool t = true;
  cleanup_free char *g1 = glob_rel(root, "*", true, 100, &t);
  assert_string_equal(g1, "c\nz\nB.txt\na.txt\nb.txt\nc/d\nc/empty\nc/x.txt\nc/d/y.txt\nz/w.txt\n");
  assert_false(t);
  cleanup_free char *g2 = glob_rel(root, "*", false, 100, &t);
  assert_string_equal(g2, "B.txt\na.txt\nb.txt\nc/x.txt\nc/d/y.txt\nz/w.txt\n");
  assert_false(t);
  cleanup_free char *g3 = glob_rel(root, "c/**", true, 100, NULL);
  assert_string_equal(g3, "c\nc/d\nc/empty\nc/x.txt\nc/d/y.txt\n");
  cleanup_free char *g4 = glob_rel(root, "*/*.txt", false, 100, NULL);
  assert_string_equal(g4, "c/x.txt\nz/w.txt\n");
  cleanup_free char *g5 = glob_rel(root, "d", true, 100, NULL);
  assert_string_equal(g5, "c/d\n");
  cleanup_free char *g6 = glob_rel(root, "nomatch*", true, 100, &t);
  assert_string_equal(g6, "");
  assert_false(t);
  cleanup_free char *g7 = glob_rel(root, "", true, 100, &t);
  assert_string_equal(g7, "");
  cleanup_free char *g8 = glob_rel(root, "/a.txt", true, 100, &t);
  assert_string_equal(g8, "");
}

static void test_glob_absolute_paths(void **state)
{
  const char *root = *state;
  write_text(root, "a.txt", "x\n");
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  bool t = true;
  /* trailing slashes on the root are dropped: exactly one '/' between parts */
  cleanup_free char *r2 = xasprintf("%s//", root);
  assert_int_equal(sbx__search_glob(r2, "*", false, 10, 0, &v, &t, &err), 0);
  assert_int_equal(v.n, 1);
  cleanup_free char *want = xasprintf("%s/a.txt", root);
  assert_string_equal(v.v[0], want);
  sbx__strv_free(&v);
}

static void test_glob_limit_plus_one(void **state)
{
  const char *root = *state;
  for (int i = 0; i < 5; i++) {
    cleanup_free char *n = xasprintf("f%d.txt", i);
    write_text(root, n, "x\n");
  }
  bool t;
  cleanup_free char *a = glob_rel(root, "*.txt", false, 5, &t);
  assert_string_equal(a, "f0.txt\nf1.txt\nf2.txt\nf3.txt\nf4.txt\n");
  assert_false(t); /* exactly full is complete */
  cleanup_free char *b = glob_rel(root, "*.txt", false, 4, &t);
  assert_string_equal(b, "f0.txt\nf1.txt\nf2.txt\nf3.txt\n");
  assert_true(t);
  cleanup_free char *c = glob_rel(root, "*.txt", false, 0, &t);
  assert_string_equal(c, "");
  assert_true(t);
  cleanup_free char *d = glob_rel(root, "*.none", false, 0, &t);
  assert_string_equal(d, "");
  assert_false(t);
  cleanup_free char *e = glob_rel(root, "*.txt", false, SIZE_MAX, &t);
  assert_string_equal(e, "f0.txt\nf1.txt\nf2.txt\nf3.txt\nf4.txt\n");
  assert_false(t);
}

/* DeerFlow's false negative: a raw cap eaten by node_modules hid src/app.py. */
static void test_glob_node_modules_false_negative(void **state)
{
  const char *root = *state;
  for (int i = 0; i < 1200; i++) {
    cleanup_free char *n = xasprintf("node_modules/pkg%d/index%d.py", i % 40, i);
    write_text(root, n, "import app\n");
  }
  write_text(root, "src/app.py", "import app\n");
  bool t = true;
  cleanup_free char *g = glob_rel(root, "*.py", false, 200, &t);
  assert_string_equal(g, "src/app.py\n");
  assert_false(t);
  cleanup_free char *m = grep_rel(root, "import", NULL, true, false, 200, &t);
  assert_string_equal(m, "src/app.py:1:import app\n");
  assert_false(t);
}

static void test_symlinks_below_root(void **state)
{
  const char *root = *state;
  write_text(root, "real.txt", "hello\n");
  write_text(root, "dir/f.txt", "hello\n");
  make_symlink(root, "real.txt", "link.txt");
  make_symlink(root, "dir", "linkdir");
  make_symlink(root, "/etc", "etclink");
  make_symlink(root, "missing-target", "dangling");
  bool t = true;
  cleanup_free char *g = glob_rel(root, "*", true, 100, &t);
  assert_string_equal(g, "dir\nreal.txt\ndir/f.txt\n");
  assert_false(t);
  cleanup_free char *l = list_rel(root, 3, 100, &t);
  assert_string_equal(l, "dir/\ndir/f.txt\nreal.txt\n");
  cleanup_free char *m = grep_rel(root, "hello", NULL, false, false, 100, &t);
  assert_string_equal(m, "real.txt:1:hello\ndir/f.txt:1:hello\n");
  cleanup_free char *g2 = glob_rel(root, "link*", true, 100, &t);
  assert_string_equal(g2, "");
}

static void test_root_is_symlink(void **state)
{
  const char *root = *state;
  write_text(root, "real/sub/a.txt", "hello\n");
  make_symlink(root, "real", "rootlink");
  cleanup_free char *link = join_path(root, "rootlink");
  cleanup_free char *g = glob_rel(link, "*.txt", false, 10, NULL);
  assert_string_equal(g, "sub/a.txt\n");
  cleanup_free char *l = list_rel(link, 2, 10, NULL);
  assert_string_equal(l, "sub/\nsub/a.txt\n");
  cleanup_free char *m = grep_rel(link, "hel+o", NULL, false, false, 10, NULL);
  assert_string_equal(m, "sub/a.txt:1:hello\n");
  /* a symlink to a file as grep root */
  make_symlink(root, "real/sub/a.txt", "filelink");
  cleanup_free char *fl = join_path(root, "filelink");
  sbx_grep_matches_t mm = {0};
  sbx_error_t err = NULL;
  bool t = true;
  assert_int_equal(sbx__search_grep(fl, "hello", NULL, false, false, 10, 0, &mm, &t, &err), 0);
  assert_int_equal(mm.n, 1);
  assert_string_equal(mm.v[0].path, fl);
  sbx__search_matches_free(&mm);
}

static void test_root_errors(void **state)
{
  const char *root = *state;
  write_text(root, "file.txt", "x\n");
  cleanup_free char *missing = join_path(root, "missing");
  cleanup_free char *file = join_path(root, "file.txt");
  cleanup_free char *under_file = join_path(root, "file.txt/x");
  sbx_strv_t v = {0};
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = false;

  assert_int_equal(sbx__search_glob(missing, "*", false, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  cleanup_free char *w1 = xasprintf("directory not found: %s", missing);
  assert_string_equal(err->msg, w1);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_glob(file, "*", false, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_DIR);
  cleanup_free char *w2 = xasprintf("not a directory: %s", file);
  assert_string_equal(err->msg, w2);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_glob(under_file, "*", false, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_list_dir(missing, 2, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  assert_string_equal(err->msg, w1);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_list_dir(file, 2, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_DIR);
  assert_string_equal(err->msg, w2);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_list_dir(root, -1, 10, 0, &v, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  assert_string_equal(err->msg, "max_depth must be non-negative");
  sbx_error_release(&err);

  assert_int_equal(sbx__search_grep(missing, "x", NULL, false, false, 10, 0, &m, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  cleanup_free char *w3 = xasprintf("path not found: %s", missing);
  assert_string_equal(err->msg, w3);
  sbx_error_release(&err);

  assert_int_equal(sbx__search_grep(under_file, "x", NULL, false, false, 10, 0, &m, &t, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  sbx_error_release(&err);

  assert_int_equal(v.n, 0);
  assert_int_equal(m.n, 0);
}

static void test_deadline(void **state)
{
  const char *root = *state;
  for (int i = 0; i < 20; i++) {
    cleanup_free char *n = xasprintf("d%02d/f.txt", i);
    write_text(root, n, "hit\n");
  }
  sbx_strv_t v = {0};
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = false;
  /* a deadline in the past: the walk stops and says so */
  assert_int_equal(sbx__search_glob(root, "*", false, 100, 1, &v, &t, &err), 0);
  assert_true(t);
  assert_true(v.n < 20);
  sbx__strv_free(&v);
  t = false;
  assert_int_equal(sbx__search_grep(root, "hit", NULL, false, false, 100, 1, &m, &t, &err), 0);
  assert_true(t);
  assert_true(m.n < 20);
  sbx__search_matches_free(&m);
  t = false;
  assert_int_equal(sbx__search_list_dir(root, 3, 1000, 1, &v, &t, &err), 0);
  assert_true(t);
  sbx__strv_free(&v);
  /* a deadline far away changes nothing */
  uint64_t later = sbx__now_ms() + 60000;
  assert_int_equal(sbx__search_glob(root, "*", false, 100, later, &v, &t, &err), 0);
  assert_false(t);
  assert_int_equal(v.n, 20);
  sbx__strv_free(&v);
}

/* A regex that backtracks forever on one line (back-references) or that tracks groups through
 * a long line: the deadline holds inside the line. The positive control: the same pattern,
 * matched with no deadline, is still running after 2 s. */
static void test_deadline_inside_line(void **state)
{
  const char *root = *state;
  static const char evil[] = "(.*)(.*)(.*)(.*)(.*)\\5\\4\\3\\2\\1x";
  char line[320];
  line[0] = 'x';
  memset(line + 1, 'a', 300);
  strcpy(line + 301, "\n");
  cleanup_free char *text = xasprintf("found x here\n%s", line);
  write_text(root, "evil.txt", text);
  cleanup_free char *file = xasprintf("%s/evil.txt", root);

  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = false;
  /* positive control: without a bound it would not end; a fork stands in for "no deadline" */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    sbx__search_grep(file, evil, NULL, false, false, 10, 0, &m, &t, &err);
    _exit(0);
  }
  sleep(2);
  assert_int_equal(waitpid(pid, NULL, WNOHANG), 0); /* still searching */
  kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  /* (its worker dies with it: PR_SET_PDEATHSIG) */

  uint64_t t0 = sbx__now_ms();
  assert_int_equal(sbx__search_grep(file, evil, NULL, false, false, 10, t0 + 500, &m, &t, &err), 0);
  uint64_t took = sbx__now_ms() - t0;
  assert_true(took < 2500); /* 500 ms, and a kill (slower under valgrind) */
  assert_true(t);           /* cut by the deadline: marked truncated */
  /* what was found before the deadline is right: line 1 matches (empty groups, then x), and it
   * is found in a few ms unless the machine is slow (valgrind) */
  assert_true(m.n <= 1);
  if (m.n == 1)
    assert_int_equal(m.v[0].line_number, 1);
  sbx__search_matches_free(&m);

  /* no back-reference: the DFA, fast, whole answer */
  cleanup_free char *big = xmalloc(8002);
  memset(big, 'a', 8000);
  strcpy(big + 8000, "\n");
  write_text(root, "long.txt", big);
  cleanup_free char *lf = xasprintf("%s/long.txt", root);
  t0 = sbx__now_ms();
  t = true;
  assert_int_equal(
      sbx__search_grep(lf, "(.*)(.*)(.*)(.*)(.*)y", NULL, false, true, 10, t0 + 5000, &m, &t, &err),
      0);
  assert_true(sbx__now_ms() - t0 < 1000);
  assert_false(t);
  assert_int_equal(m.n, 0);

  /* back-references still match (in the worker), limit+1 included */
  write_text(root, "br.txt", "abcabc\nxyz\nabab\nabab\n");
  cleanup_free char *bf = xasprintf("%s/br.txt", root);
  assert_int_equal(sbx__search_grep(bf, "(ab)\\1", NULL, false, true, 1, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 1);
  assert_int_equal(m.v[0].line_number, 3);
  assert_true(t);
  sbx__search_matches_free(&m);
  assert_int_equal(sbx__search_grep(bf, "(ab)\\1", NULL, false, true, 2, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 2);
  assert_false(t);
  sbx__search_matches_free(&m);
}

/* The caller going away stops a search, as its deadline would. */
static void test_cancel_fd(void **state)
{
  const char *root = *state;
  char line[320];
  line[0] = 'x';
  memset(line + 1, 'a', 300);
  strcpy(line + 301, "\n");
  write_text(root, "evil.txt", line);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  sbx__search_set_cancel_fd(sv[0]);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the "client": gives up after 300 ms */
    usleep(300000);
    _exit(0);
  }
  close(sv[1]);
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = false;
  uint64_t t0 = sbx__now_ms();
  assert_int_equal(sbx__search_grep(root, "(.*)(.*)(.*)(.*)(.*)\\5\\4\\3\\2\\1x", NULL, false,
                                    false, 10, t0 + 60000, &m, &t, &err),
                   0);
  assert_true(sbx__now_ms() - t0 < 5000);
  assert_true(t);
  assert_int_equal(m.n, 0);
  sbx__search_set_cancel_fd(-1);
  close(sv[0]);
  waitpid(pid, NULL, 0);

  /* a client that only shut down its writing side is still there: the search runs to its end */
  write_text(root, "hit.txt", "hit\n");
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
  sbx__search_set_cancel_fd(sv[0]);
  cleanup_free char *hit = xasprintf("%s/hit.txt", root);
  t = true;
  assert_int_equal(sbx__search_grep(hit, "(h)i\\1*t", NULL, false, true, 10, 0, &m, &t, &err), 0);
  assert_false(t);
  assert_int_equal(m.n, 1);
  sbx__search_matches_free(&m);
  sbx__search_set_cancel_fd(-1);
  close(sv[0]);
  close(sv[1]);
}

static void test_max_depth_bound(void **state)
{
  const char *root = *state;
  /* a chain d/d/d/... 260 deep with f.txt in every directory */
  sbx_buf_t p = {0};
  for (int i = 0; i < 260; i++) {
    sbx__buf_puts(&p, "d/");
    cleanup_free char *f = xasprintf("%sf.txt", p.data);
    write_text(root, f, "x\n");
  }
  sbx__buf_free(&p);
  bool t = false;
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  assert_int_equal(sbx__search_glob(root, "f.txt", false, 1000, 0, &v, &t, &err), 0);
  /* directories at depth >= SBX_SEARCH_MAX_DEPTH are not entered: files at depth 2..256 */
  assert_int_equal(v.n, SBX_SEARCH_MAX_DEPTH - 1);
  assert_true(t);
  sbx__strv_free(&v);
  /* below the bound: complete */
  cleanup_free char *sub = join_path(root, "d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d");
  assert_int_equal(sbx__search_glob(sub, "f.txt", false, 1000, 0, &v, &t, &err), 0);
  assert_int_equal(v.n, 241);
  assert_false(t);
  sbx__strv_free(&v);
}

/* ------------------------------------------------------------------------------------------ */
/* grep                                                                                        */

static void test_grep_literal_regex_case(void **state)
{
  const char *root = *state;
  write_text(root, "a.c", "foo.bar\nfooxbar\nFOO.BAR\nnothing\n");
  cleanup_free char *r1 = grep_rel(root, "foo.bar", NULL, true, false, 100, NULL);
  assert_string_equal(r1, "a.c:1:foo.bar\na.c:3:FOO.BAR\n");
  cleanup_free char *r2 = grep_rel(root, "foo.bar", NULL, false, false, 100, NULL);
  assert_string_equal(r2, "a.c:1:foo.bar\na.c:2:fooxbar\na.c:3:FOO.BAR\n");
  cleanup_free char *r3 = grep_rel(root, "foo.bar", NULL, false, true, 100, NULL);
  assert_string_equal(r3, "a.c:1:foo.bar\na.c:2:fooxbar\n");
  cleanup_free char *r4 = grep_rel(root, "foo.bar", NULL, true, true, 100, NULL);
  assert_string_equal(r4, "a.c:1:foo.bar\n");
  cleanup_free char *r5 = grep_rel(root, "^(foo|FOO)[.]", NULL, false, true, 100, NULL);
  assert_string_equal(r5, "a.c:1:foo.bar\na.c:3:FOO.BAR\n");
  cleanup_free char *r6 = grep_rel(root, "BAR$", NULL, false, true, 100, NULL);
  assert_string_equal(r6, "a.c:3:FOO.BAR\n");
}

static void test_grep_literal_metachars(void **state)
{
  const char *root = *state;
  write_text(root, "m.txt", "plain\nx.*+?()[]{}|^$\\y\nX.*+?()[]{}|^$\\Y\n");
  cleanup_free char *r1 = grep_rel(root, ".*+?()[]{}|^$\\", NULL, true, true, 100, NULL);
  assert_string_equal(r1, "m.txt:2:x.*+?()[]{}|^$\\y\nm.txt:3:X.*+?()[]{}|^$\\Y\n");
  cleanup_free char *r2 = grep_rel(root, "x.*+?()[]{}|^$\\y", NULL, true, false, 100, NULL);
  assert_string_equal(r2, "m.txt:2:x.*+?()[]{}|^$\\y\nm.txt:3:X.*+?()[]{}|^$\\Y\n");
  /* non-ASCII literal, case-insensitive: escaped into an ERE, REG_ICASE folds É/é */
  write_text(root, "u.txt",
             "\xc3\xa9"
             "cole (x)\nECOLE\n\xc3\x89"
             "COLE (X)\n");
  cleanup_free char *r3 = grep_rel(root,
                                   "\xc3\xa9"
                                   "cole (x)",
                                   "u.txt", true, false, 100, NULL);
  assert_string_equal(r3, "u.txt:1:\xc3\xa9"
                          "cole (x)\nu.txt:3:\xc3\x89"
                          "COLE (X)\n");
  cleanup_free char *r4 = grep_rel(root,
                                   "\xc3\xa9"
                                   "cole (x)",
                                   "u.txt", true, true, 100, NULL);
  assert_string_equal(r4, "u.txt:1:\xc3\xa9"
                          "cole (x)\n");
  /* an empty pattern matches every line */
  cleanup_free char *r5 = grep_rel(root, "", "m.txt", true, true, 100, NULL);
  assert_string_equal(r5, "m.txt:1:plain\nm.txt:2:x.*+?()[]{}|^$\\y\nm.txt:3:X.*+?()[]{}|^$\\Y\n");
}

static void test_grep_bad_regex(void **state)
{
  const char *root = *state;
  write_text(root, "a.txt", "(\n");
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = false;
  assert_int_equal(sbx__search_grep(root, "foo(", NULL, false, false, 10, 0, &m, &t, &err), -1);
  assert_non_null(err);
  assert_int_equal(err->kind, SBX_E_INVALID);
  assert_non_null(strstr(err->msg, "foo("));
  assert_non_null(strstr(err->msg, "Unmatched ( or \\("));
  sbx_error_release(&err);
  assert_null(sbx__grep_pattern_new("a[", false, false, &err));
  assert_int_equal(err->kind, SBX_E_INVALID);
  assert_non_null(strstr(err->msg, "a["));
  sbx_error_release(&err);
  /* patterns glibc would take seconds to compile are refused up front */
  cleanup_free char *plus = repeat("+", 24);
  cleanup_free char *stacked = xasprintf("a%s", plus);
  cleanup_free char *open = repeat("(", 300);
  cleanup_free char *close = repeat(")", 300);
  cleanup_free char *nested = xasprintf("%sa%s", open, close);
  const char *too_complex[] = {"a{1,32767}", stacked, nested, "(a{1,100}){1,100}",
                               "((a|b|c|d){1,1000})"};
  for (size_t i = 0; i < ARRAY_SIZE(too_complex); i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_null(sbx__grep_pattern_new(too_complex[i], false, false, &err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 1);
    assert_int_equal(err->kind, SBX_E_INVALID);
    assert_non_null(strstr(err->msg, "too complex"));
    sbx_error_release(&err);
  }
  const char *fine[] = {"\\w{1,255}",   ".{0,200}",  "(foo|bar|baz){1,100}",
                        "[a-z]{2,500}", "a{1,4000}", "x{2}{3}",
                        "a+b+c+",       "((a))(b)",  "a{,3}"};
  for (size_t i = 0; i < ARRAY_SIZE(fine); i++) {
    sbx_grep_pattern_t *ok = sbx__grep_pattern_new(fine[i], false, false, &err);
    if (ok == NULL)
      fail_msg("refused %s: %s", fine[i], err->msg);
    sbx__grep_pattern_free(ok);
  }
  /* '+' on an operand that matches "" is compiled as '*' (same language, no blow-up) */
  const char *nullable_plus[] = {"()+++++++++++", "(a*)++++++++++x", "(a|)+++++++++y",
                                 "((((()+)+)+)+)+)+z", "x{0,3}+++++++++"};
  for (size_t i = 0; i < ARRAY_SIZE(nullable_plus); i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_grep_pattern_t *np = sbx__grep_pattern_new(nullable_plus[i], false, true, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_non_null(np);
    assert_true(t1.tv_sec - t0.tv_sec < 1);
    sbx__grep_pattern_free(np);
  }
  sbx_grep_pattern_t *np = sbx__grep_pattern_new("(a*)+x", false, true, &err);
  assert_true(sbx__grep_pattern_match(np, "x", 1));
  assert_true(sbx__grep_pattern_match(np, "aax", 3));
  assert_false(sbx__grep_pattern_match(np, "aa", 2));
  sbx__grep_pattern_free(np);
  /* anchors are not "": (^)+a keeps its meaning */
  np = sbx__grep_pattern_new("b(^)+a", false, true, &err);
  assert_false(sbx__grep_pattern_match(np, "ba", 2));
  sbx__grep_pattern_free(np);
  np = sbx__grep_pattern_new("b(^)*a", false, true, &err);
  assert_true(sbx__grep_pattern_match(np, "ba", 2));
  sbx__grep_pattern_free(np);
  np = sbx__grep_pattern_new("(\\<)+ab", false, true, &err);
  assert_false(sbx__grep_pattern_match(np, "cab", 3));
  assert_true(sbx__grep_pattern_match(np, "c ab", 4));
  sbx__grep_pattern_free(np);
  /* a long literal is never too complex */
  cleanup_free char *longlit = repeat("a{1,9}", 2000);
  sbx_grep_pattern_t *lit = sbx__grep_pattern_new(longlit, true, false, &err);
  assert_non_null(lit);
  sbx__grep_pattern_free(lit);
  /* the same text as a literal is fine */
  cleanup_free char *r = grep_rel(root, "(", NULL, true, false, 10, NULL);
  assert_string_equal(r, "a.txt:1:(\n");
  /* a bad regex is reported even when the root is missing */
  cleanup_free char *missing = join_path(root, "nope");
  assert_int_equal(sbx__search_grep(missing, "(", NULL, false, false, 10, 0, &m, &t, &err), -1);
  assert_non_null(err);
  sbx_error_release(&err);
}

static void test_grep_binary_and_size(void **state)
{
  const char *root = *state;
  /* NUL in the first 8192 bytes: binary, skipped */
  char bin[100] = "needle\n";
  bin[50] = '\0';
  write_bytes(root, "bin.dat", bin, sizeof bin);
  /* NUL after 8192 bytes: text */
  cleanup_free char *late = xmalloc(9001);
  memset(late, 'a', 9000);
  memcpy(late, "needle\n", 7);
  late[8999] = '\n';
  late[8500] = '\0';
  write_bytes(root, "late.dat", late, 9000);
  /* 1,000,001 bytes: skipped; exactly 1,000,000: searched */
  cleanup_free char *big = xmalloc(1000001);
  memset(big, 'b', 1000001);
  memcpy(big, "needle\n", 7);
  for (size_t i = 1000; i < 1000001; i += 1000)
    big[i] = '\n';
  write_bytes(root, "big.txt", big, 1000001);
  write_bytes(root, "exact.txt", big, 1000000);
  write_text(root, "empty.txt", "");
  bool t = true;
  cleanup_free char *r = grep_rel(root, "needle", NULL, false, false, 100, &t);
  assert_string_equal(r, "exact.txt:1:needle\nlate.dat:1:needle\n");
  assert_false(t);
  /* a match on the last line of a file of exactly 1,000,000 bytes */
  big[999995] = 'Q';
  write_bytes(root, "exact.txt", big, 1000000);
  cleanup_free char *b197 = repeat("b", 197);
  cleanup_free char *want = xasprintf("exact.txt:1001:%s...\n", b197);
  cleanup_free char *r2 = grep_rel(root, "Q", NULL, true, true, 100, NULL);
  assert_string_equal(r2, want);
  cleanup_free char *r3 = grep_rel(root, "Q", NULL, false, true, 100, NULL);
  assert_string_equal(r3, want);
}

static void test_grep_line_lengths(void **state)
{
  const char *root = *state;
  cleanup_free char *l2000 = repeat("a", 2000);
  cleanup_free char *l2001 = repeat("a", 2001);
  cleanup_free char *e2000 = repeat("\xc3\xa9", 2000);
  cleanup_free char *e2001 = repeat("\xc3\xa9", 2001);
  cleanup_free char *content = xasprintf("%s\n%s\n%s\n%s\n", l2000, l2001, e2000, e2001);
  write_text(root, "long.txt", content);
  cleanup_free char *a197 = repeat("a", 197);
  cleanup_free char *e197 = repeat("\xc3\xa9", 197);
  cleanup_free char *want = xasprintf("long.txt:1:%s...\nlong.txt:3:%s...\n", a197, e197);
  cleanup_free char *r = grep_rel(root, "a|\xc3\xa9", NULL, false, true, 100, NULL);
  assert_string_equal(r, want);
  /* same through the line-by-line path (a CRLF file) */
  cleanup_free char *crlf = xasprintf("%s\r\n%s\r\n%s\r\n%s\r\n", l2000, l2001, e2000, e2001);
  write_text(root, "long.txt", crlf);
  cleanup_free char *r2 = grep_rel(root, "a|\xc3\xa9", NULL, false, true, 100, NULL);
  assert_string_equal(r2, want);
}

static void test_grep_summaries(void **state)
{
  const char *root = *state;
  cleanup_free char *l250 = repeat("x", 250);
  cleanup_free char *l200 = repeat("y", 200);
  cleanup_free char *l201 = repeat("z", 201);
  cleanup_free char *content = xasprintf("%s\n%s\n%s\n", l250, l200, l201);
  write_text(root, "s.txt", content);
  cleanup_free char *x197 = repeat("x", 197);
  cleanup_free char *z197 = repeat("z", 197);
  cleanup_free char *want =
      xasprintf("s.txt:1:%s...\ns.txt:2:%s\ns.txt:3:%s...\n", x197, l200, z197);
  cleanup_free char *r = grep_rel(root, "[xyz]", NULL, false, false, 100, NULL);
  assert_string_equal(r, want);
}

static void test_grep_utf8_crlf(void **state)
{
  const char *root = *state;
  write_text(root, "crlf.txt", "hello\r\nworld\r\n\r\nlast hello\r");
  cleanup_free char *r1 = grep_rel(root, "hello$", NULL, false, true, 100, NULL);
  assert_string_equal(r1, "crlf.txt:1:hello\ncrlf.txt:4:last hello\n");
  cleanup_free char *r2 = grep_rel(root, "^$", NULL, false, true, 100, NULL);
  assert_string_equal(r2, "crlf.txt:3:\n");
  /* invalid UTF-8 becomes U+FFFD, in the summary and for matching */
  write_text(root, "bad.txt",
             "abc\xff"
             "def\nok\n\xe2\x82"
             "A\n\xe0\x80z\n\xf0\x9f\x98\n");
  cleanup_free char *r3 = grep_rel(root, "abc.def", "bad.txt", false, true, 100, NULL);
  assert_string_equal(r3, "bad.txt:1:abc\xef\xbf\xbd"
                          "def\n");
  cleanup_free char *r4 = grep_rel(root, "\xef\xbf\xbd", "bad.txt", true, true, 100, NULL);
  assert_string_equal(r4, "bad.txt:1:abc\xef\xbf\xbd"
                          "def\n"
                          "bad.txt:3:\xef\xbf\xbd"
                          "A\n"
                          "bad.txt:4:\xef\xbf\xbd\xef\xbf\xbdz\n"
                          "bad.txt:5:\xef\xbf\xbd\n");
  /* multi-byte characters are one code point for '.' */
  write_text(root, "mb.txt",
             "a\xc3\xa9"
             "b\na\xe2\x82\xac\xe2\x82\xac"
             "b\n");
  cleanup_free char *r5 = grep_rel(root, "^a.b$", "mb.txt", false, true, 100, NULL);
  assert_string_equal(r5, "mb.txt:1:a\xc3\xa9"
                          "b\n");
}

static void test_grep_lines_and_anchors(void **state)
{
  const char *root = *state;
  write_text(root, "n.txt", "xfoo\nfoo\nfoox\n\nfoo");
  cleanup_free char *r1 = grep_rel(root, "^foo$", NULL, false, true, 100, NULL);
  assert_string_equal(r1, "n.txt:2:foo\nn.txt:5:foo\n");
  cleanup_free char *r2 = grep_rel(root, "^$", NULL, false, true, 100, NULL);
  assert_string_equal(r2, "n.txt:4:\n");
  /* a match may not run across lines, even if the regex could eat a '\n' */
  write_text(root, "n.txt", "a\nb\nab\na b\n");
  cleanup_free char *r3 = grep_rel(root, "a[[:space:]]*b", NULL, false, true, 100, NULL);
  assert_string_equal(r3, "n.txt:3:ab\nn.txt:4:a b\n");
  cleanup_free char *r4 = grep_rel(root, "a\\sb", NULL, false, true, 100, NULL);
  assert_string_equal(r4, "n.txt:4:a b\n");
  /* a file ending in '\n': no phantom empty line */
  write_text(root, "n.txt", "a\n");
  cleanup_free char *r5 = grep_rel(root, "", NULL, false, true, 100, NULL);
  assert_string_equal(r5, "n.txt:1:a\n");
  cleanup_free char *r5b = grep_rel(root, "^$", NULL, false, true, 100, NULL);
  assert_string_equal(r5b, "");
  write_text(root, "n.txt", "a\n\n");
  cleanup_free char *r5c = grep_rel(root, "^$", NULL, false, true, 100, NULL);
  assert_string_equal(r5c, "n.txt:2:\n");
  cleanup_free char *r6 = grep_rel(root, "x*", NULL, true, true, 100, NULL);
  assert_string_equal(r6, "");
  /* a pattern holding a '\n' never matches: lines do not contain one */
  write_text(root, "n.txt", "a\nb\n");
  cleanup_free char *r9 = grep_rel(root, "a\nb", NULL, true, true, 100, NULL);
  assert_string_equal(r9, "");
  cleanup_free char *r10 = grep_rel(root, "a\nb", NULL, false, false, 100, NULL);
  assert_string_equal(r10, "");
  /* several matches per line report the line once */
  write_text(root, "n.txt", "aaa\nb\naaa\n");
  cleanup_free char *r7 = grep_rel(root, "a", NULL, false, true, 100, NULL);
  assert_string_equal(r7, "n.txt:1:aaa\nn.txt:3:aaa\n");
  cleanup_free char *r8 = grep_rel(root, "A", NULL, true, false, 100, NULL);
  assert_string_equal(r8, "n.txt:1:aaa\nn.txt:3:aaa\n");
}

static void test_grep_single_file_root(void **state)
{
  const char *root = *state;
  write_text(root, "dir/notes.txt", "one\ntwo needle\nthree\nneedle four\n");
  cleanup_free char *file = join_path(root, "dir/notes.txt");
  sbx_grep_matches_t m = {0};
  sbx_error_t err = NULL;
  bool t = true;
  assert_int_equal(sbx__search_grep(file, "needle", "*.txt", false, false, 10, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 2);
  assert_string_equal(m.v[0].path, file);
  assert_int_equal(m.v[0].line_number, 2);
  assert_string_equal(m.v[0].line, "two needle");
  assert_int_equal(m.v[1].line_number, 4);
  assert_false(t);
  sbx__search_matches_free(&m);
  /* the glob is tested against the basename only */
  assert_int_equal(sbx__search_grep(file, "needle", "*.py", false, false, 10, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 0);
  assert_int_equal(sbx__search_grep(file, "needle", "dir/*.txt", false, false, 10, 0, &m, &t, &err),
                   0);
  assert_int_equal(m.n, 0);
  assert_int_equal(sbx__search_grep(file, "needle", "notes.txt", false, false, 10, 0, &m, &t, &err),
                   0);
  assert_int_equal(m.n, 2);
  sbx__search_matches_free(&m);
  /* limit+1 within one file */
  assert_int_equal(sbx__search_grep(file, "needle", NULL, false, false, 1, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 1);
  assert_true(t);
  sbx__search_matches_free(&m);
  assert_int_equal(sbx__search_grep(file, "needle", NULL, false, false, 2, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 2);
  assert_false(t);
  sbx__search_matches_free(&m);
  assert_int_equal(sbx__search_grep(file, "needle", NULL, false, false, 0, 0, &m, &t, &err), 0);
  assert_int_equal(m.n, 0);
  assert_true(t);
  sbx__search_matches_free(&m);
  assert_null(err);
}

static void test_grep_glob_filter(void **state)
{
  const char *root = *state;
  write_text(root, "src/a.py", "hit\n");
  write_text(root, "src/deep/b.py", "hit\n");
  write_text(root, "x/src/c.py", "hit\n");
  write_text(root, "src/d.txt", "hit\n");
  write_text(root, "e.py", "hit\n");
  cleanup_free char *r1 = grep_rel(root, "hit", "src/*.py", false, false, 100, NULL);
  assert_string_equal(r1, "src/a.py:1:hit\n");
  cleanup_free char *r2 = grep_rel(root, "hit", "src/**/*.py", false, false, 100, NULL);
  assert_string_equal(r2, "src/a.py:1:hit\nsrc/deep/b.py:1:hit\n");
  cleanup_free char *r3 = grep_rel(root, "hit", "*.py", false, false, 100, NULL);
  assert_string_equal(r3, "e.py:1:hit\nsrc/a.py:1:hit\nsrc/deep/b.py:1:hit\nx/src/c.py:1:hit\n");
  cleanup_free char *r4 = grep_rel(root, "hit", "**/src/*.py", false, false, 100, NULL);
  assert_string_equal(r4, "src/a.py:1:hit\nx/src/c.py:1:hit\n");
  cleanup_free char *r5 = grep_rel(root, "hit", "", false, false, 100, NULL); /* no filter */
  assert_string_equal(r5, "e.py:1:hit\nsrc/a.py:1:hit\nsrc/d.txt:1:hit\nsrc/deep/b.py:1:hit\n"
                          "x/src/c.py:1:hit\n");
  cleanup_free char *r6 = grep_rel(root, "hit", "/src/*.py", false, false, 100, NULL);
  assert_string_equal(r6, "");
}

static void test_grep_limit_plus_one(void **state)
{
  const char *root = *state;
  write_text(root, "a.txt", "m\nm\n");
  write_text(root, "b.txt", "m\n");
  bool t;
  cleanup_free char *r1 = grep_rel(root, "m", NULL, false, false, 3, &t);
  assert_string_equal(r1, "a.txt:1:m\na.txt:2:m\nb.txt:1:m\n");
  assert_false(t);
  cleanup_free char *r2 = grep_rel(root, "m", NULL, false, false, 2, &t);
  assert_string_equal(r2, "a.txt:1:m\na.txt:2:m\n");
  assert_true(t);
  cleanup_free char *r3 = grep_rel(root, "m", NULL, false, false, 0, &t);
  assert_string_equal(r3, "");
  assert_true(t);
  cleanup_free char *r4 = grep_rel(root, "zzz", NULL, false, false, 0, &t);
  assert_string_equal(r4, "");
  assert_false(t);
}

static void test_grep_api_direct(void **state)
{
  sbx_error_t err = NULL;
  sbx_grep_pattern_t *p = sbx__grep_pattern_new("b+c", false, false, &err);
  assert_non_null(p);
  assert_true(sbx__grep_pattern_match(p, "aBBc", 4));
  assert_false(sbx__grep_pattern_match(p, "aBB", 3));
  assert_true(sbx__grep_pattern_match(p, "xbc\r", 4));
  assert_false(sbx__grep_pattern_match(p, "xb\nc", 4));
  assert_true(sbx__grep_pattern_match(p, "b\0bc", 4)); /* the length, not the NUL, ends the line */
  sbx__grep_pattern_free(p);
  p = sbx__grep_pattern_new("c$", false, true, &err);
  assert_true(sbx__grep_pattern_match(p, "abc\r", 4)); /* a trailing \r is not part of the line */
  assert_false(sbx__grep_pattern_match(p, "abC", 3));
  sbx__grep_pattern_free(p);
  p = sbx__grep_pattern_new("Hello", true, false, &err);
  assert_true(sbx__grep_pattern_match(p, "say hELLO", 9));
  assert_false(sbx__grep_pattern_match(p, "say hELL", 8));
  sbx__grep_pattern_free(p);
  p = sbx__grep_pattern_new("\xff", true, true, &err); /* invalid UTF-8 reads as U+FFFD */
  assert_false(sbx__grep_pattern_match(p, "a\xff", 2));
  sbx__grep_pattern_free(p);
  sbx__grep_pattern_free(NULL);
  assert_null(err);

  char *s = sbx__grep_summarize_line("abc\r", 4);
  assert_string_equal(s, "abc");
  free(s);
  s = sbx__grep_summarize_line("", 0);
  assert_string_equal(s, "");
  free(s);
  s = sbx__grep_summarize_line("a\xc0\xaf"
                               "b",
                               4); /* overlong: two bytes, two U+FFFD */
  assert_string_equal(s, "a\xef\xbf\xbd\xef\xbf\xbd"
                         "b");
  free(s);
  s = sbx__grep_summarize_line("\xed\xa0\x80", 3); /* a surrogate: three U+FFFD */
  assert_string_equal(s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  free(s);
  s = sbx__grep_summarize_line("\xf4\x90\x80\x80", 4); /* above U+10FFFF */
  assert_string_equal(s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  free(s);
  s = sbx__grep_summarize_line("\xf0\x9f\x98\x80!", 5); /* valid 4-byte sequence */
  assert_string_equal(s, "\xf0\x9f\x98\x80!");
  free(s);
  /* 250 invalid bytes: 250 code points, cut to 197 U+FFFD + "..." */
  cleanup_free char *inv = repeat("\xff", 250);
  s = sbx__grep_summarize_line(inv, 250);
  cleanup_free char *f197 = repeat("\xef\xbf\xbd", 197);
  cleanup_free char *wantinv = xasprintf("%s...", f197);
  assert_string_equal(s, wantinv);
  free(s);
  cleanup_free char *inv2001 = repeat("\xff", 2001);
  assert_null(sbx__grep_summarize_line(inv2001, 2001));
  cleanup_free char *crlf2000 = xasprintf("%s\r", inv2001 + 1);
  s = sbx__grep_summarize_line(crlf2000, 2001); /* 2000 + the stripped \r */
  assert_non_null(s);
  free(s);

  sbx_grep_matches_t m = {0};
  sbx__search_matches_push(&m, "/p", 7, "line-extra", 4);
  assert_int_equal(m.n, 1);
  assert_string_equal(m.v[0].path, "/p");
  assert_int_equal(m.v[0].line_number, 7);
  assert_string_equal(m.v[0].line, "line");
  sbx__search_matches_free(&m);
  assert_null(m.v);
  assert_int_equal(m.n, 0);
}

/* The prefilters (required literal, C-locale regex for ASCII text, whole-buffer search) must not
 * change any answer: compare with plain regexec in C.UTF-8 on each line. */
static const char *const diff_patterns[] = {
    "abc",
    "a(bc)?d",
    "ab?c",
    "ab*c",
    "ab+c",
    "a{2}b",
    "(ab|cd)ef",
    "ab|cd",
    "x\\.y",
    "x.y",
    "[abc]def",
    "de[f]",
    "\\bword\\b",
    "\\<wo",
    "\\w+ing",
    "foo(bar)*baz",
    "^abc",
    "abc$",
    "a\\{b",
    "(a(b)c)d",
    "(a[)]b)cd",
    "[[:alpha:]]+_x",
    "\xc3\xa9+x",
    "\xc3\x9cn\xc3\xaf"
    "code",
    "(a)b\\1",
    "stra\xc3\x9f"
    "e",
    "KELVIN",
    "\xc5\xbf",
    "is",
    "\\`ab",
    "ab\\'",
    "[^a]bc",
    "a.*b.*c",
    "x{0,1}yz",
    "yz{1,2}",
    "\\(lit\\)",
    "\\.\\*",
    "\xc4\xb1",
    "I",
    "needle",
    "ne+dle",
    "n[e]edle",
    "need(le)",
    "need(le|x)",
    "[n]eedle",
    "",
    "^$",
    "e$",
    "^n",
    "[[:space:]]b",
    ".",
    "\\W",
    "nee.le",
    "NEEDLE",
    "(nee)dle",
    "s+k",
    "sk",
    "ss",
    "\\.",
    "[.]",
};

static const char *const diff_lines[] = {
    "abc",
    "abd",
    "acd",
    "abcd",
    "ad",
    "ac",
    "abbbc",
    "aab",
    "cdef",
    "abef",
    "x.y",
    "xzy",
    "adef",
    "word here",
    "swords",
    "running",
    "foobarbarbaz",
    "foobaz",
    "a{b",
    "a)bcd",
    "hello_x",
    "\xc3\xa9\xc3\xa9x",
    "\xc3\x9cN\xc3\x8f"
    "CODE",
    "aba",
    "STRASSE",
    "stra\xc3\x9f"
    "e",
    "kelvin",
    "\xe2\x84\xaa"
    "ELVIN",
    "\xc5\xbf",
    "S",
    "\xc4\xb0s",
    "\xc4\xb1",
    "I",
    "\xff"
    "abc",
    "ab\r",
    "xyz",
    "yzz",
    "(lit)",
    ".*",
    "",
    "needle",
    "NEEDLE",
    "nEeDlE x",
    "neeedle",
    "a needle b",
    "\xc5\xbfk",
    "SK",
    "sk",
    "\xe2\x80\x94 needle \xe2\x80\x94",
    "b",
    " b",
    "tab\tb",
    "\xc3\xa9",
    "end e",
    "n",
};

static bool ref_match(const char *pattern, bool cs, const char *line)
{
  cleanup_free char *clean = sbx__grep_summarize_line(line, strlen(line));
  assert_non_null(clean);
  locale_t loc = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t) 0);
  assert_true(loc != (locale_t) 0);
  locale_t old = uselocale(loc);
  regex_t re;
  assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | (cs ? 0 : REG_ICASE)), 0);
  bool r = regexec(&re, clean, 0, NULL, 0) == 0;
  regfree(&re);
  uselocale(old);
  freelocale(loc);
  return r;
}

static void test_grep_differential(void **state)
{
  const char *root = *state;
  /* one valid UTF-8 file without \r (whole-buffer paths), one with \r and bad bytes (lines) */
  sbx_buf_t clean = {0}, dirty = {0};
  size_t nclean = 0;
  int clean_no[ARRAY_SIZE(diff_lines)];
  for (size_t i = 0; i < ARRAY_SIZE(diff_lines); i++) {
    const char *l = diff_lines[i];
    bool is_clean = strchr(l, '\r') == NULL && strchr(l, '\xff') == NULL;
    clean_no[i] = is_clean ? (int) ++nclean : 0;
    if (is_clean) {
      sbx__buf_puts(&clean, l);
      sbx__buf_putc(&clean, '\n');
    }
    sbx__buf_puts(&dirty, l);
    sbx__buf_putc(&dirty, '\n');
  }
  write_bytes(root, "clean.txt", clean.data, clean.len);
  write_bytes(root, "dirty.txt", dirty.data, dirty.len);
  cleanup_free char *cpath = join_path(root, "clean.txt");
  cleanup_free char *dpath = join_path(root, "dirty.txt");
  for (int cs = 0; cs < 2; cs++) {
    for (size_t pi = 0; pi < ARRAY_SIZE(diff_patterns); pi++) {
      const char *pat = diff_patterns[pi];
      sbx_error_t err = NULL;
      sbx_grep_pattern_t *p = sbx__grep_pattern_new(pat, false, cs, &err);
      assert_non_null(p);
      sbx_buf_t want_clean = {0}, want_dirty = {0};
      for (size_t li = 0; li < ARRAY_SIZE(diff_lines); li++) {
        const char *l = diff_lines[li];
        bool want = ref_match(pat, cs, l);
        if (want != sbx__grep_pattern_match(p, l, strlen(l)))
          fail_msg("pattern /%s/ cs=%d line \"%s\": want %d", pat, cs, l, want);
        if (want && clean_no[li])
          sbx__buf_printf(&want_clean, "%d,", clean_no[li]);
        if (want)
          sbx__buf_printf(&want_dirty, "%zu,", li + 1);
      }
      sbx__grep_pattern_free(p);
      const char *files[2] = {cpath, dpath};
      sbx_buf_t *wants[2] = {&want_clean, &want_dirty};
      for (int f = 0; f < 2; f++) {
        sbx_grep_matches_t m = {0};
        bool t = true;
        assert_int_equal(sbx__search_grep(files[f], pat, NULL, false, cs, 1000, 0, &m, &t, &err),
                         0);
        sbx_buf_t got = {0};
        for (size_t i = 0; i < m.n; i++)
          sbx__buf_printf(&got, "%llu,", (unsigned long long) m.v[i].line_number);
        const char *g = got.data ? got.data : "";
        const char *w = wants[f]->data ? wants[f]->data : "";
        if (strcmp(g, w) != 0)
          fail_msg("grep /%s/ cs=%d %s: got %s want %s", pat, cs, files[f], g, w);
        sbx__buf_free(&got);
        sbx__search_matches_free(&m);
      }
      sbx__buf_free(&want_clean);
      sbx__buf_free(&want_dirty);
    }
  }
  sbx__buf_free(&clean);
  sbx__buf_free(&dirty);
}

static char tolower_ascii(char c)
{
  return c >= 'A' && c <= 'Z' ? (char) (c + 32) : c;
}

static bool naive_contains(const char *hay, const char *needle, bool icase)
{
  size_t n = strlen(hay), m = strlen(needle);
  for (size_t i = 0; i + m <= n; i++) {
    size_t j = 0;
    while (j < m && (icase ? tolower_ascii(hay[i + j]) == tolower_ascii(needle[j])
                           : hay[i + j] == needle[j]))
      j++;
    if (j == m)
      return true;
  }
  return false;
}

/* Fixed strings (memchr on the rarest byte, two streams when folding) against a naive search,
 * line by line and through whole-file grep. */
static void test_grep_literal_differential(void **state)
{
  const char *root = *state;
  const char *needles[] = {"q",   "Q",  "qq",  "zz",    "e",  "the", "THE",
                           "x_y", "_",  "a.b", "xyzzy", "ab", "aab", "abab",
                           "ba",  "Zq", "q z", "0",     "09", "end", "start"};
  const char *lines[] = {"qq",  "aqqa", "Q",      "The quick",  "x_y",      "X_Y",
                         "aab", "abab", "ababab", "bab",        "zq zq Zq", "0123456789",
                         "q z", "q  z", "end",    "start here", "xyzzy",    "XyZzY",
                         "a.b", "axb",  "",       "e",          "tHe end",  "abaab"};
  sbx_buf_t file = {0};
  for (size_t li = 0; li < ARRAY_SIZE(lines); li++) {
    sbx__buf_puts(&file, lines[li]);
    sbx__buf_putc(&file, '\n');
  }
  write_bytes(root, "lit.txt", file.data, file.len);
  sbx__buf_free(&file);
  cleanup_free char *path = join_path(root, "lit.txt");
  for (int cs = 0; cs < 2; cs++) {
    for (size_t ni = 0; ni < ARRAY_SIZE(needles); ni++) {
      sbx_error_t err = NULL;
      sbx_grep_pattern_t *p = sbx__grep_pattern_new(needles[ni], true, cs, &err);
      assert_non_null(p);
      sbx_buf_t want = {0}, got = {0};
      for (size_t li = 0; li < ARRAY_SIZE(lines); li++) {
        bool w = naive_contains(lines[li], needles[ni], !cs);
        if (w != sbx__grep_pattern_match(p, lines[li], strlen(lines[li])))
          fail_msg("literal \"%s\" cs=%d line \"%s\": want %d", needles[ni], cs, lines[li], w);
        if (w)
          sbx__buf_printf(&want, "%zu,", li + 1);
      }
      sbx__grep_pattern_free(p);
      sbx_grep_matches_t m = {0};
      bool t = true;
      assert_int_equal(sbx__search_grep(path, needles[ni], NULL, true, cs, 1000, 0, &m, &t, &err),
                       0);
      for (size_t i = 0; i < m.n; i++)
        sbx__buf_printf(&got, "%llu,", (unsigned long long) m.v[i].line_number);
      const char *g = got.data ? got.data : "", *wa = want.data ? want.data : "";
      if (strcmp(g, wa) != 0)
        fail_msg("grep literal \"%s\" cs=%d: got %s want %s", needles[ni], cs, g, wa);
      sbx__search_matches_free(&m);
      sbx__buf_free(&want);
      sbx__buf_free(&got);
    }
  }
}

static void test_grep_buffer_anchors(void **state)
{
  const char *root = *state;
  write_text(root, "a.txt", "foo x\nfoo y\nbar foo\n");
  /* GNU's \` and \' anchor the searched string: here, each line */
  cleanup_free char *r1 = grep_rel(root, "\\`foo", NULL, false, true, 100, NULL);
  assert_string_equal(r1, "a.txt:1:foo x\na.txt:2:foo y\n");
  cleanup_free char *r2 = grep_rel(root, "foo\\'", NULL, false, true, 100, NULL);
  assert_string_equal(r2, "a.txt:3:bar foo\n");
}

/* ------------------------------------------------------------------------------------------ */
/* list_dir                                                                                    */

static void test_list_dir(void **state)
{
  const char *root = *state;
  write_text(root, "b.txt", "x\n");
  write_text(root, "a/inner.txt", "x\n");
  write_text(root, "a/deeper/z.txt", "x\n");
  write_text(root, "a-b", "x\n");
  write_text(root, "a0", "x\n");
  write_text(root, "node_modules/x.js", "x\n");
  write_text(root, "a/build/out.o", "x\n");
  write_text(root, "app.log", "x\n");
  mkdirs(root, "empty");
  bool t = true;
  cleanup_free char *d1 = list_rel(root, 1, 100, &t);
  assert_string_equal(d1, "a-b\na/\na0\nb.txt\nempty/\n");
  assert_false(t);
  cleanup_free char *d2 = list_rel(root, 2, 100, &t);
  assert_string_equal(d2, "a-b\na/\na/deeper/\na/inner.txt\na0\nb.txt\nempty/\n");
  cleanup_free char *d3 = list_rel(root, 3, 100, &t);
  assert_string_equal(d3, "a-b\na/\na/deeper/\na/deeper/z.txt\na/inner.txt\na0\nb.txt\nempty/\n");
  cleanup_free char *d0 = list_rel(root, 0, 100, &t);
  assert_string_equal(d0, "");
  assert_false(t);
  /* limit+1 on the sorted output */
  cleanup_free char *c3 = list_rel(root, 3, 3, &t);
  assert_string_equal(c3, "a-b\na/\na/deeper/\n");
  assert_true(t);
  cleanup_free char *c8 = list_rel(root, 3, 8, &t);
  assert_false(t);
  cleanup_free char *c0 = list_rel(root, 3, 0, &t);
  assert_string_equal(c0, "");
  assert_true(t);
  /* root given with a trailing slash */
  cleanup_free char *slash = xasprintf("%s/", root);
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  assert_int_equal(sbx__search_list_dir(slash, 1, 100, 0, &v, &t, &err), 0);
  assert_int_equal(v.n, 5);
  cleanup_free char *want = xasprintf("%s/a/", root);
  assert_string_equal(v.v[1], want);
  sbx__strv_free(&v);
  /* the whole output is in strcmp order */
  assert_int_equal(sbx__search_list_dir(root, 10, 100, 0, &v, &t, &err), 0);
  for (size_t i = 1; i < v.n; i++)
    assert_true(strcmp(v.v[i - 1], v.v[i]) < 0);
  sbx__strv_free(&v);
}

static void test_list_dir_root_is_slash(void **state)
{
  sbx_strv_t v = {0};
  sbx_error_t err = NULL;
  bool t = false;
  assert_int_equal(sbx__search_list_dir("/", 1, 1000, 0, &v, &t, &err), 0);
  bool tmp = false;
  for (size_t i = 0; i < v.n; i++) {
    assert_true(v.v[i][0] == '/' && v.v[i][1] != '/');
    if (strcmp(v.v[i], "/tmp/") == 0)
      tmp = true;
  }
  assert_true(tmp);
  sbx__strv_free(&v);
}

/* Unreadable directories are skipped (only meaningful when not running as root). */
static void test_unreadable_dir(void **state)
{
  const char *root = *state;
  write_text(root, "ok/a.txt", "hit\n");
  write_text(root, "locked/b.txt", "hit\n");
  write_text(root, "secret.txt", "hit\n");
  cleanup_free char *locked = join_path(root, "locked");
  cleanup_free char *secret = join_path(root, "secret.txt");
  chmod(locked, 0);
  chmod(secret, 0);
  cleanup_free char *g = glob_rel(root, "*.txt", false, 100, NULL);
  cleanup_free char *m = grep_rel(root, "hit", NULL, false, false, 100, NULL);
  if (geteuid() != 0) {
    assert_string_equal(g, "secret.txt\nok/a.txt\n");
    assert_string_equal(m, "ok/a.txt:1:hit\n");
  } else {
    assert_string_equal(g, "secret.txt\nlocked/b.txt\nok/a.txt\n");
  }
  chmod(locked, 0755);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_path_matches_contract_examples),
      cmocka_unit_test(test_path_matches_doublestar),
      cmocka_unit_test(test_path_matches_edges),
      cmocka_unit_test(test_ignore_segments),
      cmocka_unit_test(test_ignore_equals_fnmatch),
      cmocka_unit_test_setup_teardown(test_ignore_in_walks, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_ignore_only_below_root, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_glob_order, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_glob_absolute_paths, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_glob_limit_plus_one, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_glob_node_modules_false_negative, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_symlinks_below_root, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_root_is_symlink, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_root_errors, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_deadline, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_max_depth_bound, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_literal_regex_case, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_literal_metachars, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_bad_regex, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_binary_and_size, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_line_lengths, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_summaries, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_utf8_crlf, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_lines_and_anchors, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_single_file_root, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_glob_filter, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_limit_plus_one, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_grep_api_direct),
      cmocka_unit_test_setup_teardown(test_grep_differential, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_buffer_anchors, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_grep_literal_differential, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_list_dir, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_deadline_inside_line, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_cancel_fd, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_list_dir_root_is_slash),
      cmocka_unit_test_setup_teardown(test_unreadable_dir, setup_tmp, teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
