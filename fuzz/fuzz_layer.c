/* libFuzzer target for layer extraction (src/lib/image/layer.c): the input is a layer (tar,
 * gzip or zstd) unpacked into a fresh scratch folder. It must unpack or fail with one one-line
 * error, and nothing may appear outside the folder: the folder sits inside a guard folder whose
 * only entry must stay the scratch folder. The whole image's budget is shared (and never
 * overspent), and the sparse writer that makes zeros holes is checked against the plain bytes:
 * the input, with 0xff standing for a 4 KiB run of zeros, written in pieces of an input-chosen
 * size, must read back the same. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char guard[64];

#define BUDGET (6u << 20)

static void sparse_check(const uint8_t *data, size_t size)
{
  if (size == 0)
    return;
  size_t step = (size_t) data[0] * 61u % 9000u + 1, n = 0;
  uint8_t *want = calloc(1, 1u << 20);
  if (want == NULL)
    abort();
  for (size_t i = 1; i < size && n < (1u << 20) - 4096; i++) {
    if (data[i] == 0xff)
      n += 4096; /* calloc's zeros */
    else
      want[n++] = data[i];
  }
  int fd = memfd_create("sparse", MFD_CLOEXEC);
  if (fd < 0)
    abort();
  uint64_t off = 0;
  for (size_t i = 0; i < n; i += step)
    if (sbx__write_sparse(fd, (const char *) want + i, n - i < step ? n - i : step, &off) < 0)
      abort();
  if (off != n || sbx__sparse_end(fd, off) < 0)
    abort();
  struct stat st;
  uint8_t *got = malloc(n + 1);
  if (got == NULL || fstat(fd, &st) < 0 || (size_t) st.st_size != n ||
      pread(fd, got, n + 1, 0) != (ssize_t) n || memcmp(got, want, n) != 0)
    abort();
  free(got);
  free(want);
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (guard[0] == '\0') {
    strcpy(guard, "/tmp/sbx-fuzz-layer-XXXXXX");
    if (mkdtemp(guard) == NULL)
      abort();
  }
  sbx_error_t err = NULL;
  if (sbx__image_dl(&err) < 0)
    abort();
  int in = memfd_create("layer", MFD_CLOEXEC);
  if (in < 0 || sbx__write_all(in, data, size) < 0 || lseek(in, 0, SEEK_SET) < 0)
    abort();
  int g = open(guard, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g < 0 || mkdirat(g, "root", 0755) < 0)
    abort();
  int root = openat(g, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    abort();
  struct sbx_layer_limits lim = {
      .max_bytes = 8u << 20, .max_entries = 4096, .max_image_bytes = BUDGET, .reserve_none = true};
  /* the budget starts part spent, as for a later layer of an image */
  struct sbx_image_budget budget = {.spent = size ? (uint64_t) data[0] << 14 : 0};
  struct sbx_layer_tally tally = {.budget = &budget};
  char diff[SBX_DIGEST_HEX + 1];
  int r = sbx__layer_extract(in, root, &lim, &tally, diff, &err);
  if (budget.spent > BUDGET)
    abort();
  if (r < 0) {
    if (err == NULL || strchr(err->msg, '\n'))
      abort();
    sbx_error_release(&err);
  } else if (err != NULL || strlen(diff) != SBX_DIGEST_HEX) {
    abort();
  }
  close(root);
  close(in);
  /* nothing next to the scratch folder */
  DIR *d = fdopendir(dup(g));
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, "root")) {
      fprintf(stderr, "escaped: %s\n", de->d_name);
      abort();
    }
  if (d)
    closedir(d);
  if (sbx__rm_rf_at(g, "root") < 0)
    abort();
  close(g);
  sparse_check(data, size);
  return 0;
}
