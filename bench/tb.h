/* tb: the benchmark timing helper. A case is either a process (fork + exec + waitpid, timed
 * wall clock) or an in-process builtin (a name starting with '@', timed around one call). */
#ifndef SBX_BENCH_TB_H
#define SBX_BENCH_TB_H

#include <stddef.h>

struct tb_builtin {
  const char *name;  /* "@sbx-exec" */
  const char *usage; /* the arguments after the name */
  int min_args;
  /* Called once before the warm-up rounds with the arguments after the name; returns the
   * case's state or NULL (then *errmsg, malloc'ed, says why). */
  void *(*setup)(int argc, char **argv, char **errmsg);
  /* One timed run; idx counts the runs of this case (warm-up included). 0 = success,
   * TB_TIMEOUT = timed out (recorded as a censored sample), anything else = failure. */
  int (*run)(void *st, unsigned long idx, char **errmsg);
  /* Optional: called after each run, outside the timed interval (cleanup). */
  void (*after)(void *st, unsigned long idx);
  void (*teardown)(void *st);
};

const struct tb_builtin *tb_builtin_find(const char *name);
void tb_builtins_usage(void);

/* The per-run timeout (-t): builtins that wait on something external (sbxd) bound their waits
 * by it and return TB_TIMEOUT when it passes. */
extern double tb_run_timeout_s;
#define TB_TIMEOUT (-1)

double tb_now_ms(void);
/* printf into a malloc'ed string (aborts on allocation failure). */
char *tb_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
