/* sbx image import|ls|rm|prune, sbx images, sbx rmi: the image store (docs/images.md). */
#include "cli.h"

#include "../lib/image/image.h"
#include "util.h"

#include <string.h>
#include <time.h>

static const char usage_import[] =
    "Usage: sbx image import [--name NAME] [--platform OS/ARCH[/VARIANT]] [--max-size MIB]\n"
    "                        [--max-entries N] PATH\n"
    "\n"
    "Imports the images of PATH into the store ($SBX_HOME/images): a docker-archive (docker\n"
    "save, one or more images), an oci-archive, or an OCI image layout directory. Every blob is\n"
    "checked against its digest; layers may be tar, gzip or zstd. Prints the names stored.\n"
    "\n"
    "  --name NAME        store the image under NAME (one image only)\n"
    "  --platform P       pick this platform of a manifest list (default: this host's)\n"
    "  --max-size MIB     refuse an image, layer or archive that unpacks to more than\n"
    "                     this (default: sandbox.image_max_mib, 32768, for the whole\n"
    "                     image, and sandbox.image_layer_max_mib, 16384, for a layer)\n"
    "  --max-entries N    refuse a layer with more entries (default:\n"
    "                     sandbox.image_layer_max_entries, 1000000)\n";
static const char usage_images[] =
    "Usage: sbx images [--json]\n"
    "\n"
    "Lists the images of the store: name, manifest digest, size (compressed layers), creation\n"
    "time, and how many sandboxes (and spares) use it. `host` (the host's /usr, read-only) is\n"
    "always there and not listed.\n";
static const char usage_rmi[] =
    "Usage: sbx rmi [--force] NAME...\n"
    "\n"
    "Removes the names from the store (a name or a digest prefix of 12+ hex digits). Refused\n"
    "while a sandbox uses the image, unless --force (the sandbox keeps its layers until it is\n"
    "gone). `sbx image prune` then frees the disk.\n";
static const char usage_prune[] =
    "Usage: sbx image prune\n"
    "\n"
    "Deletes the blobs and layers no image and no sandbox refers to, and what killed imports\n"
    "left behind. Prints what it freed.\n";
static const char usage_image[] =
    "Usage: sbx image import|ls|rm|prune ...\n"
    "\n"
    "  import PATH   add the images of a docker-archive, oci-archive or OCI layout\n"
    "  ls            list the images (same as `sbx images`)\n"
    "  rm NAME...    remove images (same as `sbx rmi`)\n"
    "  prune         free unreferenced blobs and layers\n"
    "\n"
    "`sbx image VERB --help` for a verb.\n";

static int flag_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  *(bool *) ctx = true;
  return 0;
}

static int import_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct sbx_image_import_opts *o = ctx;
  long long v;
  switch (ch) {
  case 'n':
    o->name = arg;
    return 0;
  case 'p':
    o->platform = arg;
    return 0;
  case 's':
    if (!cli_parse_long(arg, &v) || v <= 0)
      return cli_usage_error(c, "--max-size needs a positive number of MiB, got '%s'", arg);
    o->limits.max_bytes = (uint64_t) v << 20;
    return 0;
  default:
    if (!cli_parse_long(arg, &v) || v <= 0)
      return cli_usage_error(c, "--max-entries needs a positive number, got '%s'", arg);
    o->limits.max_entries = (uint64_t) v;
    return 0;
  }
}

static int image_import(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                       {"platform", required_argument, NULL, 'p'},
                                       {"max-size", required_argument, NULL, 's'},
                                       {"max-entries", required_argument, NULL, 'E'},
                                       {NULL, 0, NULL, 0}};
  struct sbx_image_import_opts o = {0};
  int r = cli_parse(c, argc, argv, usage_import, NULL, opts, "", import_opt, &o, 1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  /* --max-size caps the layer and the whole image for this import */
  struct sbx_layer_limits cfg_lim;
  sbx__image_limits_from_config(c->cfg, &cfg_lim);
  uint64_t size = o.limits.max_bytes, entries = o.limits.max_entries;
  o.limits = cfg_lim;
  if (size)
    o.limits.max_bytes = o.limits.max_image_bytes = size;
  if (entries)
    o.limits.max_entries = entries;
  sbx_strv_t names = {0};
  sbx_error_t err = NULL;
  if (sbx__image_import(c->home, argv[optind], &o, &names, &err) < 0) {
    sbx__strv_free(&names);
    return cli_fail(&err);
  }
  for (size_t i = 0; i < names.n; i++)
    printf("%s\n", names.v[i]);
  sbx__strv_free(&names);
  return 0;
}

static int image_list(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  bool json = false;
  int r = cli_parse(c, argc, argv, usage_images, NULL, opts, "", flag_opt, &json, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open_existing(c)) != 0 && r != CLI_NO_HOME)
    return r;
  struct sbx_image_info *v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (r == 0 && sbx__image_list(c->home, &v, &n, &err) < 0)
    return cli_fail(&err);
  r = 0;
  if (json) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:s, s:f, s:i}", "name", v[i].name,
                                         "digest", v[i].digest, "size", (json_int_t) v[i].size,
                                         "created", v[i].created, "imported", v[i].imported,
                                         "in_use", v[i].in_use));
    r = cli_print_json(json_pack("{s:o}", "images", a));
  } else {
    printf("%-32s  %-19s  %10s  %-20s  %s\n", "NAME", "DIGEST", "SIZE", "CREATED", "IN USE");
    for (size_t i = 0; i < n; i++)
      printf("%-32s  %-19.19s  %8.1fMB  %-20.19s  %d\n", v[i].name, v[i].digest,
             (double) v[i].size / 1e6, *v[i].created ? v[i].created : "-", v[i].in_use);
  }
  sbx__image_info_free(v, n);
  return r;
}

static int image_rm(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"force", no_argument, NULL, 'f'}, {NULL, 0, NULL, 0}};
  bool force = false;
  int r = cli_parse(c, argc, argv, usage_rmi, NULL, opts, "f", flag_opt, &force, -1);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  for (int i = optind; i < argc; i++) {
    sbx_error_t err = NULL;
    if (sbx__image_remove(c->home, argv[i], force, &err) < 0)
      r = cli_fail(&err);
    else
      printf("removed %s\n", argv[i]);
  }
  return r;
}

static int image_prune(struct cli *c, int argc, char **argv)
{
  int r = cli_parse(c, argc, argv, usage_prune, NULL, NULL, NULL, NULL, NULL, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  uint64_t freed;
  int removed;
  sbx_error_t err = NULL;
  if (sbx__image_prune(c->home, &freed, &removed, &err) < 0)
    return cli_fail(&err);
  printf("removed %d blobs, layers and work folders, freed %.1f MB\n", removed,
         (double) freed / 1e6);
  return 0;
}

int cmd_image(struct cli *c, int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(usage_image, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  static const struct {
    const char *name;
    int (*fn)(struct cli *, int, char **);
  } subs[] = {{"import", image_import},
              {"ls", image_list},
              {"list", image_list},
              {"rm", image_rm},
              {"prune", image_prune}};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++)
    if (strcmp(argv[1], subs[i].name) == 0) {
      c->verb = subs[i].name;
      return subs[i].fn(c, argc - 1, argv + 1);
    }
  fprintf(stderr, "sbx image: unknown verb '%s'\n%s", argv[1], usage_image);
  return EXIT_USAGE;
}

int cmd_images(struct cli *c, int argc, char **argv)
{
  return image_list(c, argc, argv);
}

int cmd_rmi(struct cli *c, int argc, char **argv)
{
  return image_rm(c, argc, argv);
}
