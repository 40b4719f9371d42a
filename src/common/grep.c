/* grep over files: see grep.h. */
#include "grep.h"
#include "text.h"
#include "walk.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *sbx__grep_summarize_line(const char *line, size_t len)
{
  if (line == NULL)
    len = 0;
  if (len > 0 && line[len - 1] == '\r')
    len--;
  const unsigned char *s = (const unsigned char *) line;
  sbx_buf_t b = {0};
  size_t count = 0, cut = 0; /* cut: output bytes after SUMMARY_CHARS - 3 code points */
  size_t i = 0;
  while (i < len) {
    uint32_t cp = s[i];
    size_t l = s[i] < 0x80 ? 1 : sbx__utf8_next(s + i, len - i, &cp);
    bool ok = cp != SBX_UTF8_BAD;
    count++;
    if (count > SBX_SEARCH_MAX_LINE_CHARS) {
      sbx__buf_free(&b);
      return NULL;
    }
    if (count <= SBX_SEARCH_SUMMARY_CHARS) {
      if (ok)
        sbx__buf_append(&b, line + i, l);
      else
        sbx__buf_append(&b, "\xEF\xBF\xBD", 3);
      if (count == SBX_SEARCH_SUMMARY_CHARS - 3)
        cut = b.len;
    }
    i += l;
  }
  if (count > SBX_SEARCH_SUMMARY_CHARS) {
    b.len = cut;
    sbx__buf_append(&b, "...", 3);
  }
  return sbx__buf_steal(&b);
}

void sbx__search_matches_push(sbx_grep_matches_t *m, const char *path, uint64_t line_number,
                              const char *line, size_t len)
{
  if (m->n + 1 > m->cap) {
    m->cap = m->cap ? m->cap * 2 : 16;
    m->v = xreallocarray(m->v, m->cap, sizeof *m->v);
  }
  sbx_grep_match_t *e = &m->v[m->n++];
  e->path = xstrdup(path);
  e->line_number = line_number;
  e->line = xstrndup(line ? line : "", line ? len : 0);
}

void sbx__search_matches_free(sbx_grep_matches_t *m)
{
  for (size_t i = 0; i < m->n; i++) {
    free(m->v[i].path);
    free(m->v[i].line);
  }
  free(m->v);
  m->v = NULL;
  m->n = m->cap = 0;
}

static void grep_matches_pop(sbx_grep_matches_t *m)
{
  if (m->n == 0)
    return;
  m->n--;
  free(m->v[m->n].path);
  free(m->v[m->n].line);
}

/* --- grep one file ------------------------------------------------------------------------ */

/* One match as a grep worker sends it to its walker; the last record says the file is done. */
#define WORKER_DONE UINT64_MAX
typedef struct {
  uint64_t line_no, off, len;
} worker_rec_t;

static void grep_emit(sbx_walker_t *w, const char *path, uint64_t line_no, const char *line,
                      size_t len)
{
  cleanup_free char *summary = sbx__grep_summarize_line(line, len);
  if (summary == NULL)
    return; /* over 2000 code points */
  if (w->worker_fd >= 0) {
    worker_rec_t r = {line_no, (uint64_t) (line - w->worker_buf), len};
    if (sbx__write_all(w->worker_fd, &r, sizeof r) < 0)
      _exit(1);
  } else {
    sbx__search_matches_push(w->out_matches, path, line_no, summary, strlen(summary));
  }
  if (++w->found >= w->limit)
    w->stop = true;
}

static size_t count_newlines(const char *s, size_t n)
{
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += s[i] == '\n';
  return c;
}

/* The end of the range of whole lines that starts at from and spans about span bytes: the
 * position of a '\n' (or len), never inside a line; at least the first line. */
static size_t lines_range_end(const char *buf, size_t len, size_t from, size_t span)
{
  if (len - from <= span)
    return len;
  const char *nl = memrchr(buf + from, '\n', span);
  if (nl == NULL)
    nl = memchr(buf + from + span, '\n', len - from - span);
  return nl ? (size_t) (nl - buf) : len;
}

/* The first line of buf[from..to) that matches on its own, given that the range as a whole
 * matches; SIZE_MAX if none does (a match can cross a '\n': [[:space:]] holds it). A line that
 * matches on its own makes every range holding it match, so halving finds it in O(log lines)
 * regexecs when matches stay within lines, and visits each line at most once otherwise. The
 * recursion is as deep as log2 of the lines in a range (at most 18 for 256 KiB). */
static size_t first_matching_line(sbx_walker_t *w, const char *buf, size_t from, size_t to,
                                  bool ascii)
{
  if (memchr(buf + from, '\n', to - from) == NULL)
    return from; /* one line, and it matches */
  if (sbx__walk_deadline_passed(w))
    return SIZE_MAX;
  size_t half = from + (to - from) / 2;
  const char *mid = memchr(buf + half, '\n', to - half);
  if (mid == NULL)
    mid = memrchr(buf + from, '\n', half - from);
  size_t m = (size_t) (mid - buf);
  if (sbx__grep_regex_run(w->gp, ascii, buf, from, m)) {
    size_t r = first_matching_line(w, buf, from, m, ascii);
    if (r != SIZE_MAX || w->stop)
      return r;
  }
  if (sbx__grep_regex_run(w->gp, ascii, buf, m + 1, to))
    return first_matching_line(w, buf, m + 1, to, ascii);
  return SIZE_MAX;
}

#define GREP_SPAN_MIN 4096
#define GREP_SPAN_MAX (256 * 1024)

/* Whole-buffer search, for well-formed UTF-8 without '\r' and a pattern without '\n': find the
 * next candidate in the buffer (the literal or the regex's required literal), then report the
 * line holding it if the line matches on its own. A regex without one is run over ranges of
 * whole lines growing from 4 KiB to 256 KiB while they do not match (a range that matches is
 * halved down to its first matching line), so the deadline is looked at between regexecs. Same
 * answers as line by line, without a regexec per line. */
static void grep_buffer_fast(sbx_walker_t *w, const char *path, const char *buf, size_t len,
                             bool ascii)
{
  sbx_grep_pattern_t *p = w->gp;
  const sbx_needle_t *nd =
      p->kind == SBX_GREP_PK_LITERAL ? &p->lit : sbx__grep_pattern_must(p, ascii);
  size_t from = 0, counted = 0, span = GREP_SPAN_MIN;
  uint64_t line_no = 1;
  while (from < len && !w->stop) {
    size_t ls;
    if (nd) {
      ssize_t hit = sbx__needle_find(nd, buf + from, len - from);
      if (hit < 0)
        return;
      size_t pos = from + (size_t) hit;
      const char *nl = pos > from ? memrchr(buf + from, '\n', pos - from) : NULL;
      ls = nl ? (size_t) (nl - buf) + 1 : from;
    } else {
      size_t to = lines_range_end(buf, len, from, span);
      ls = sbx__grep_regex_run(p, ascii, buf, from, to)
               ? first_matching_line(w, buf, from, to, ascii)
               : SIZE_MAX;
      if (ls == SIZE_MAX) {
        if (w->stop)
          return;
        from = to + 1;
        span = span < GREP_SPAN_MAX ? span * 2 : span;
        if (sbx__walk_deadline_passed(w))
          return;
        continue;
      }
      span = GREP_SPAN_MIN;
    }
    if (ls >= len)
      return; /* the empty "line" after a final '\n' is not a line */
    const char *end = memchr(buf + ls, '\n', len - ls);
    size_t le = end ? (size_t) (end - buf) : len;
    /* a candidate of a needle: run the regex on the line (the halving found a matching one) */
    bool ok = p->kind == SBX_GREP_PK_LITERAL || !nd || sbx__grep_regex_run(p, ascii, buf, ls, le);
    line_no += count_newlines(buf + counted, ls - counted);
    counted = ls;
    if (ok)
      grep_emit(w, path, line_no, buf + ls, le - ls); /* skips lines over 2000 code points */
    from = le + 1;
    if ((++w->ops & 1023) == 0 && sbx__walk_deadline_passed(w))
      return;
  }
}

/* Line by line: files with '\r' or ill-formed UTF-8, or a pattern holding a '\n'. */
static void grep_buffer_lines(sbx_walker_t *w, const char *path, const char *buf, size_t len)
{
  uint64_t line_no = 0;
  size_t pos = 0;
  while (pos < len && !w->stop) {
    const char *end = memchr(buf + pos, '\n', len - pos);
    size_t le = end ? (size_t) (end - buf) : len;
    const char *line = buf + pos;
    size_t n = le - pos;
    line_no++;
    pos = le + 1;
    if ((line_no & 255) == 0 && sbx__walk_deadline_passed(w))
      return;
    size_t stripped = n > 0 && line[n - 1] == '\r' ? n - 1 : n;
    if (stripped > SBX_SEARCH_MAX_LINE_CHARS &&
        sbx__utf8_count_lossy(line, stripped) > SBX_SEARCH_MAX_LINE_CHARS)
      continue;
    if (sbx__grep_pattern_match(w->gp, line, n))
      grep_emit(w, path, line_no, line, n);
  }
}

static void grep_buffer(sbx_walker_t *w, const char *path, const char *buf, size_t len, int cls)
{
  if (cls != SBX_TEXT_INVALID && !w->gp->line_by_line && memchr(buf, '\r', len) == NULL)
    grep_buffer_fast(w, path, buf, len, cls == SBX_TEXT_ASCII);
  else
    grep_buffer_lines(w, path, buf, len);
}

/* Back-references: glibc matches them by backtracking, exponentially in the line's length (one
 * regexec of (.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x on a 300-byte line runs for hours), and nothing
 * inside regexec can be interrupted. So a file is searched by a forked child that streams a
 * record per matching line; this side reads them and kills the child at the deadline, when the
 * caller goes away (the search is then timed out: truncated) or at the limit. A child that
 * cannot be made, or dies, leaves the answer incomplete (truncated), never wrong. */
static void grep_in_worker(sbx_walker_t *w, const char *path, const char *buf, size_t len, int cls)
{
  const sbx_needle_t *nd =
      cls == SBX_TEXT_INVALID ? NULL : sbx__grep_pattern_must(w->gp, cls == SBX_TEXT_ASCII);
  if (nd && sbx__needle_find(nd, buf, len) < 0)
    return; /* no candidate (the needle is matched as in grep_buffer_fast) */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    w->incomplete = true;
    return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    w->incomplete = true;
    return;
  }
  if (pid == 0) {
    close(sv[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the forking thread ending kills it too */
    w->worker_fd = sv[1];
    w->worker_buf = buf;
    w->deadline_ms = 0;
    w->cancel_fd = -1;
    grep_buffer(w, path, buf, len, cls);
    worker_rec_t fin = {WORKER_DONE, 0, 0};
    if (sbx__write_all(sv[1], &fin, sizeof fin) < 0)
      _exit(1);
    for (;;)
      pause(); /* killed by the walker: nothing of the search's state to tear down */
  }
  close(sv[1]);
  worker_rec_t rec;
  size_t got = 0;
  bool done = false;
  while (!w->stop && !sbx__walk_deadline_passed(w)) {
    int wait_ms = -1;
    if (w->cancel_fd >= 0)
      wait_ms = SBX_WALK_POLL_MS;
    if (w->deadline_ms) {
      uint64_t now = sbx__now_ms(), left = w->deadline_ms > now ? w->deadline_ms - now : 0;
      if (wait_ms < 0 || left < (uint64_t) wait_ms)
        wait_ms = (int) (left < INT_MAX ? left : INT_MAX);
    }
    struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
    int n = poll(&pfd, 1, wait_ms);
    if (n <= 0)
      continue; /* (EINTR, or time to look at the deadline) */
    ssize_t r = read(sv[0], (char *) &rec + got, sizeof rec - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break; /* the child died before its last record */
    got += (size_t) r;
    if (got < sizeof rec)
      continue;
    got = 0;
    if (rec.line_no == WORKER_DONE) {
      done = true;
      break;
    }
    if (rec.off > len || rec.len > len - rec.off) {
      break; /* not from our child: drop it, incomplete */
    }
    grep_emit(w, path, rec.line_no, buf + rec.off, (size_t) rec.len);
  }
  kill(pid, SIGKILL);
  close(sv[0]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  if (!done && !w->stop)
    w->incomplete = true;
}

/* Searches an open file (taken over). */
static void grep_fd(sbx_walker_t *w, int fd, const char *path)
{
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SBX_SEARCH_MAX_FILE_BYTES) {
    close(fd);
    return;
  }
  /* Read the whole file (at most MAX+1 bytes, to see one that grew past the cap) into the
   * reusable buffer, leaving room for a NUL. */
  const size_t max_cap = (size_t) SBX_SEARCH_MAX_FILE_BYTES + 2;
  size_t want = (size_t) st.st_size;
  size_t len = 0;
  bool failed = false;
  if (w->fbuf_cap < want + 2) {
    size_t cap = want + 2 < 64 * 1024 ? 64 * 1024 : want + 2;
    w->fbuf = xrealloc(w->fbuf, cap);
    w->fbuf_cap = cap;
  }
  while (len < max_cap - 1) {
    if (len + 1 >= w->fbuf_cap) {
      size_t cap = w->fbuf_cap * 2 < max_cap ? w->fbuf_cap * 2 : max_cap;
      w->fbuf = xrealloc(w->fbuf, cap);
      w->fbuf_cap = cap;
    }
    size_t room = w->fbuf_cap - 1 - len;
    if (len + room > max_cap - 1)
      room = max_cap - 1 - len;
    ssize_t r = read(fd, w->fbuf + len, room);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      failed = true; /* unreadable = binary: skipped */
      break;
    }
    if (r == 0)
      break;
    len += (size_t) r;
    if (len == want && (size_t) r < room)
      break; /* what fstat reported, in full with room to spare: EOF */
  }
  close(fd);
  if (failed || len > SBX_SEARCH_MAX_FILE_BYTES || len == 0)
    return;
  char *buf = w->fbuf;
  buf[len] = '\0';
  if (memchr(buf, '\0', len < SBX_SEARCH_BINARY_PROBE ? len : SBX_SEARCH_BINARY_PROBE))
    return;
  int cls = sbx__text_class(buf, len);
  if (w->gp->backrefs)
    grep_in_worker(w, path, buf, len, cls);
  else
    grep_buffer(w, path, buf, len, cls);
}

static void grep_file_at(sbx_walker_t *w, int dir_fd, const char *name, const char *path)
{
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (sbx__walk_resource_errno(errno))
      w->incomplete = true;
    return;
  }
  grep_fd(w, fd, path);
}

int sbx__search_grep(const char *root, const char *pattern, const char *glob, bool literal,
                     bool case_sensitive, size_t max_results, uint64_t deadline_ms,
                     sbx_grep_matches_t *out, bool *truncated, sbx_error_t *err)
{
  if (truncated)
    *truncated = false;
  sbx_grep_pattern_t *gp = sbx__grep_pattern_new(pattern, literal, case_sensitive, err);
  if (gp == NULL)
    return -1;
  if (root == NULL || root[0] == '\0') {
    sbx__grep_pattern_free(gp);
    return sbx__error_setf(err, ENOENT, SBX_E_NOT_FOUND, "path not found: %s", root ? root : "");
  }
  int fd = sbx__search_open_root(root, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    sbx__grep_pattern_free(gp);
    if (e == ENOENT || e == ENOTDIR)
      return sbx__error_setf(err, e, SBX_E_NOT_FOUND, "path not found: %s", root);
    return sbx__make_error(err, e, sbx__errno_kind(e), "cannot open %s", root);
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    sbx__grep_pattern_free(gp);
    return sbx__make_error(err, e, sbx__errno_kind(e), "cannot stat %s", root);
  }
  /* An empty glob filters nothing (DeerFlow: `if glob and not path_matches(...)`). */
  bool filter = glob != NULL && glob[0] != '\0';
  sbx_pathpat_t pp;
  sbx__pathpat_init(&pp, filter ? glob : NULL);
  sbx_walker_t w;
  sbx__walker_init(&w, SBX_WALK_GREP, deadline_ms);
  w.pat = filter ? &pp : NULL;
  w.gp = gp;
  w.grep_file = grep_file_at;
  w.limit = sbx__walk_limit_plus_one(max_results);
  w.out_matches = out;
  if (S_ISDIR(st.st_mode)) {
    if (!(filter && pp.never)) {
      sbx__walker_set_base(&w, root);
      sbx__walk_run(&w, fd);
      fd = -1;
    }
  } else if (S_ISREG(st.st_mode)) {
    const char *base = strrchr(root, '/');
    base = base ? base + 1 : root;
    if (!filter || sbx__path_matches(glob, base)) {
      grep_fd(&w, fd, root);
      fd = -1;
    }
  }
  if (fd >= 0)
    close(fd);
  bool t = w.timed_out || w.incomplete;
  if (w.found > max_results) {
    t = true;
    while (w.found > max_results) {
      grep_matches_pop(out);
      w.found--;
    }
  }
  sbx__walker_fini(&w);
  sbx__pathpat_fini(&pp);
  sbx__grep_pattern_free(gp);
  if (truncated)
    *truncated = t;
  return 0;
}
