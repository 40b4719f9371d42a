/* sbx download: a file under /mnt/user-data to stdout or a local file. */
#include "cli.h"

#include "util.h"

#include <fcntl.h>
#include <string.h>

static const char usage[] =
    "Usage: sbx download -t THREAD [-u USER] PATH [-o FILE]\n"
    "\n"
    "Copies PATH, which must be under /mnt/user-data (no `..`), to stdout or to FILE. Files over\n"
    "104857600 bytes (100 MiB) are refused. FILE is only replaced once the copy is complete.\n";

struct args {
  const char *path;
  const char *out;
};

static int run(sbx_sandbox_t *sb, void *arg)
{
  struct args *a = arg;
  sbx_error_t err = NULL;
  if (a->out == NULL || strcmp(a->out, "-") == 0)
    return sbx_download_to_fd(sb, a->path, 1, &err) < 0 ? cli_fail(&err) : 0;
  cleanup_free char *tmp = xasprintf("%s.sbx-download.tmp", a->out);
  cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "sbx: cannot write `%s`: %s\n", tmp, strerror(errno));
    return EXIT_OP_ERROR;
  }
  if (sbx_download_to_fd(sb, a->path, fd, &err) < 0) {
    unlink(tmp);
    return cli_fail(&err);
  }
  if (fsync(fd) < 0 || rename(tmp, a->out) < 0) {
    fprintf(stderr, "sbx: cannot write `%s`: %s\n", a->out, strerror(errno));
    unlink(tmp);
    return EXIT_OP_ERROR;
  }
  return 0;
}

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch;
  ((struct args *) ctx)->out = arg;
  return 0;
}

int cmd_download(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  struct args a = {0};
  int r = cli_parse(c, argc, argv, usage, &s, opts, "o:", on_opt, &a, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  a.path = argv[optind];
  return cli_with_sandbox(c, &s, run, &a);
}
