/* A command (or a bash session's run) whose output is execd's event stream (jobs.c), and the
 * small things execd's handlers share. */
#ifndef SBXD_JOBS_H
#define SBXD_JOBS_H

#include "http.h"

struct box;
struct stream;

struct job {
  struct box *b;
  struct stream *s;
  char *command;
  char *cwd;
  sbx_strv_t env;
  sbx_strv_t argv;
  double timeout;
  bool no_timeout, background, merge;
  struct sbxd_lines out, err;
  bool started;
  char cmd_id[65];
  char session[37]; /* a session run */
  char *state_file;
  /* a run that exited (not one that failed to run), before its terminal event */
  void (*on_exit)(struct job *j);
  struct sbxd_watch *watch; /* a foreground command's client (stream.h) */
};

void job_free(struct job *j);
/* Starts the job on r->box and answers with its event stream, or with the error that kept the
 * command from starting (a bad working directory is a 400, as in execd). Takes j. */
enum MHD_Result job_run(struct req *r, struct job *j);

/* execd's 400: {INVALID_REQUEST_BODY, prefix + detail}. */
enum MHD_Result execd_bad_request(struct req *r, const char *prefix, const char *detail);
/* execd's words for a signal ("killed"), or NULL. */
const char *signal_word(int sig);
/* execd's timeout in ms (absent or 0: none); -1 on a bad value. */
int parse_timeout(json_t *t, double *secs, bool *none);
/* The bytes of a memfd (from its start). */
int read_memfd(int fd, sbx_buf_t *out);

#endif
