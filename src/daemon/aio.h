/* agent-infra/sandbox's "all-in-one" sandbox API (the routes DeerFlow's AioSandbox and the
 * agent_sandbox SDK use), served per box below /aio/{id}/{token} (aio.c: context and files,
 * aio_shell.c: shell and bash). */
#ifndef SBXD_AIO_H
#define SBXD_AIO_H

#include "http.h"

struct box;

/* The base URL of b's AIO API as clients reach it at host: http://host/aio/<id>/<token>. */
char *sbxd_aio_url(const char *host, struct box *b);

/* The envelope every AIO answer has: {success, message, data} (steals data; NULL: null). */
enum MHD_Result aio_ok(struct req *r, json_t *data);
/* FastAPI's 422 for a body field: {"detail": [{type, loc: ["body", field], msg}]}. */
enum MHD_Result aio_invalid(struct req *r, const char *field, const char *msg);
/* The body as a JSON object, or an answer (422) in *ret. */
json_t *aio_body(struct req *r, enum MHD_Result *ret);

/* context and files (aio.c) */
enum MHD_Result h_aio_context(struct req *r);
enum MHD_Result h_aio_file_read(struct req *r);
enum MHD_Result h_aio_file_write(struct req *r);
enum MHD_Result h_aio_file_download(struct req *r);
enum MHD_Result h_aio_file_list(struct req *r);
enum MHD_Result h_aio_file_find(struct req *r);
enum MHD_Result h_aio_file_grep(struct req *r);
/* shell sessions and bash.exec (aio_shell.c) */
enum MHD_Result h_aio_shell_exec(struct req *r);
enum MHD_Result h_aio_shell_session_create(struct req *r);
enum MHD_Result h_aio_shell_sessions(struct req *r);
enum MHD_Result h_aio_shell_session_delete(struct req *r);
enum MHD_Result h_aio_shell_view(struct req *r);
enum MHD_Result h_aio_shell_wait(struct req *r);
enum MHD_Result h_aio_shell_kill(struct req *r);
enum MHD_Result h_aio_bash_exec(struct req *r);

#endif
