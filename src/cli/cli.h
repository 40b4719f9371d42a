/* The sbx CLI: global options, then one verb (one file each, crun style). */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <sbx/sbx.h>
#include <stdbool.h>
#include <stdio.h>

enum { EXIT_OP_ERROR = 1, EXIT_USAGE = 2 };

struct cli {
  const char *home;
  const char *config_path;
  struct sbx_config *cfg;
  sbx_provider_t *provider;
  const char *verb;
};

struct cli_scope {
  const char *user;
  const char *thread;
};

struct cli_verb {
  const char *name;
  int (*fn)(struct cli *c, int argc, char **argv);
  const char *summary;
};

/* Loads the configuration and opens the pool (with a rate-limited reaper pass). */
int cli_open(struct cli *c);
/* For a verb that only reads (ps, images, gc): as cli_open where the state directory exists;
 * where it does not, loads the configuration only, creates nothing and returns CLI_NO_HOME
 * (the verb reports an empty pool). */
#define CLI_NO_HOME (-3)
int cli_open_existing(struct cli *c);
/* After a verb, once c->provider is freed: if spares are configured and missing, starts a
 * detached process that makes them (the CLI does not wait for it). */
void cli_refill_spares(struct cli *c, bool missing);
/* Prints "sbx: <message>" and returns EXIT_OP_ERROR. Releases err. */
int cli_fail(sbx_error_t *err);
/* Prints "sbx VERB: <message>" plus a hint and returns EXIT_USAGE. */
int cli_usage_error(struct cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses an integer argument; false if it is not one. */
bool cli_parse_long(const char *s, long long *out);
bool cli_parse_seconds(const char *s, double *out);
/* Checks the scope options of a sandbox verb. */
/* A usage error (exit 2) for a user or thread id that is not one: starting with '-' (an option
 * taken for a value), or not matching the scope's patterns. NULL ones are not checked. */
int cli_scope_names_check(struct cli *c, const char *user, const char *thread);
int cli_scope_check(struct cli *c, struct cli_scope *s);
/* Acquires the scope's sandbox (creating it on first use). */
sbx_sandbox_t *cli_acquire(struct cli *c, struct cli_scope *s, sbx_error_t *err);
/* A JSON string from bytes that may not be UTF-8 (invalid sequences replaced). */
json_t *cli_json_string(const char *s, size_t len);
int cli_print_json(json_t *j); /* prints, newline, decref */
/* Joins argv[from..] with spaces (the command after "--"). */
char *cli_join(int argc, char **argv, int from);

#define CLI_SCOPE_OPTIONS                                                                          \
  {"thread", required_argument, NULL, 't'},                                                        \
  {                                                                                                \
    "user", required_argument, NULL, 'u'                                                           \
  }

/* Parses a verb's options: -t/-u (if s is non-NULL) and --help are handled here, the others
 * (extra, a NULL-terminated table whose short letters are in extra_short) go to on_opt, which
 * returns 0 or an exit status. Then exactly n_pos positionals must remain (-1: at least one,
 * the rest after "--"; -2: any number, the verb checks). Returns 0 to go on, CLI_DONE after --help,
 * or an exit status. */
#define CLI_DONE (-1)
int cli_parse(struct cli *c, int argc, char **argv, const char *usage, struct cli_scope *s,
              const struct option *extra, const char *extra_short,
              int (*on_opt)(struct cli *c, int ch, const char *arg, void *ctx), void *ctx,
              int n_pos);

/* For a verb on one sandbox given by scope or by id: `-t THREAD [-u USER]` or one positional
 * ID (16 hex digits); fills s (thread NULL when given by id) and id. Else as cli_parse. */
int cli_parse_target(struct cli *c, int argc, char **argv, const char *usage,
                     const struct option *extra, const char *extra_short,
                     int (*on_opt)(struct cli *c, int ch, const char *arg, void *ctx), void *ctx,
                     struct cli_scope *s, char id[17]);

/* Says on stderr that the target of cli_parse_target has no sandbox (what: "" or "running "),
 * in terms of its thread when given by scope, with the eviction that ended it if one is on
 * record (taken: forgotten after this, as the next exec would); returns EXIT_OP_ERROR. */
int cli_no_sandbox(struct cli *c, const struct cli_scope *s, const char *id, const char *what,
                   bool take);

int cmd_exec(struct cli *c, int argc, char **argv);
int cmd_run(struct cli *c, int argc, char **argv);
int cmd_read(struct cli *c, int argc, char **argv);
int cmd_write(struct cli *c, int argc, char **argv);
int cmd_upload(struct cli *c, int argc, char **argv);
int cmd_download(struct cli *c, int argc, char **argv);
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_glob(struct cli *c, int argc, char **argv);
int cmd_grep(struct cli *c, int argc, char **argv);
int cmd_ps(struct cli *c, int argc, char **argv);
int cmd_release(struct cli *c, int argc, char **argv);
int cmd_rm(struct cli *c, int argc, char **argv);
int cmd_gc(struct cli *c, int argc, char **argv);
int cmd_down(struct cli *c, int argc, char **argv);
int cmd_config(struct cli *c, int argc, char **argv);
int cmd_mcp(struct cli *c, int argc, char **argv);
int cmd_image(struct cli *c, int argc, char **argv);
int cmd_images(struct cli *c, int argc, char **argv);
int cmd_rmi(struct cli *c, int argc, char **argv);
int cmd_doctor(struct cli *c, int argc, char **argv);
int cmd_pull(struct cli *c, int argc, char **argv);
int cmd_attach(struct cli *c, int argc, char **argv);
int cmd_net(struct cli *c, int argc, char **argv);
int cmd_commit(struct cli *c, int argc, char **argv);
int cmd_inspect(struct cli *c, int argc, char **argv);
int cmd_kill(struct cli *c, int argc, char **argv);
int cmd_pause(struct cli *c, int argc, char **argv);
int cmd_unpause(struct cli *c, int argc, char **argv);
int cmd_stats(struct cli *c, int argc, char **argv);

/* Opens the pool, acquires the scope's sandbox, runs fn on it and releases it. fn returns an
 * exit status. */
int cli_with_sandbox(struct cli *c, struct cli_scope *s, int (*fn)(sbx_sandbox_t *, void *),
                     void *arg);

/* interactive.c: a command fed from our stdin (tty: on a terminal in the sandbox); returns
 * its exit status as cli_run_command does. timeout <= 0: none. */
int cli_run_interactive(struct cli *c, sbx_sandbox_t *sb, const char *command,
                        const char *const *argv, const char *const *env, size_t n_env,
                        double timeout, bool tty);
/* Our terminal in raw mode (restored at exit too); false when stdin is not one. */
bool cli_tty_make_raw(void);
void cli_tty_restore(void);
/* Our terminal's size (24 x 80 when unknown). */
void cli_window_size(unsigned *rows, unsigned *cols);
int cmd_shell(struct cli *c, int argc, char **argv);
/* shared by exec and run */
int cli_run_command(struct cli *c, sbx_sandbox_t *sb, const char *command, const char *const *env,
                    size_t n_env, double timeout, bool json);

#endif
