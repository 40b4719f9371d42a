/* libFuzzer target for layer extraction (src/lib/image/layer.c): the input is a layer (tar,
 * gzip or zstd) unpacked into a fresh scratch folder. It must unpack or fail with one one-line
 * error, and nothing may appear outside the folder: the folder sits inside a guard folder whose
 * only entry must stay the scratch folder. */
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
  struct sbx_layer_limits lim = {.max_bytes = 8u << 20, .max_entries = 4096};
  char diff[SBX_DIGEST_HEX + 1];
  int r = sbx__layer_extract(in, root, &lim, NULL, diff, &err);
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
  return 0;
}
