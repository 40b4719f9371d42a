/* Response bodies produced by other threads: an event stream fed by a worker and drained by
 * MHD, and a body read from a file descriptor; and the one loop that sends bytes to a socket. */
#ifndef SBXD_STREAM_H
#define SBXD_STREAM_H

#include <jansson.h>
#include <microhttpd.h>
#include <sbx/sbx.h>
#include <stdbool.h>
#include <stdint.h>

#define SBXD_STREAM_QUEUE (8u << 20) /* event bytes kept for a slow client */
#define SBXD_PING_INTERVAL_MS 3000

struct stream;
struct stream *stream_new(void);
void stream_unref(struct stream *s);
/* Appends one event (JSON object; type and timestamp are added first) as "{...}\n\n". */
void stream_event(struct stream *s, const char *type, json_t *fields);
void stream_raw(struct stream *s, const char *data, size_t len);
/* No more events (the response ends when the queue is drained). */
void stream_finish(struct stream *s);
bool stream_detached(struct stream *s);
/* The response draining s (takes a reference); pings every SBXD_PING_INTERVAL_MS if ping. */
struct MHD_Response *stream_response(struct stream *s, bool ping);
/* Start handshake: the worker reports start (or failure) once; the handler waits for it. */
void stream_started(struct stream *s);
void stream_failed(struct stream *s, sbx_error_t *err); /* takes err */
/* Waits for the handshake; returns 0 when started, -1 with *err when failed. */
int stream_wait_start(struct stream *s, sbx_error_t *err);

/* A response body read from a file descriptor (a pipe fed by a worker): size bytes, or
 * MHD_SIZE_UNKNOWN. The fd is closed with the response. */
struct MHD_Response *fd_response(int fd, uint64_t size);

/* Sends all n bytes to a socket (never SIGPIPE), waiting at most timeout_ms for room each time
 * (-1: blocking sends, no limit); 0, or -1 when the peer is gone or too slow. */
int sbxd_send_all(int fd, const char *d, size_t n, int timeout_ms);

/* A foreground command's client: while the command runs, a thread watches the request's
 * connection, and a client that closed it (or vanished) gets the command's process group
 * killed (SIGKILL), as a killed `sbx exec` does, and on_gone called (under the watch's lock).
 * sbxd_watch_command is an on_start callback (arg: the watch) that names the command; a
 * client gone before it started has it killed then. NULL (no watch) where none could be made.
 * sbxd_watch_stop ends the watch and says whether the client went away. */
struct sbxd_watch;
struct sbxd_watch *sbxd_watch_start(struct MHD_Connection *conn, sbx_sandbox_t *sb,
                                    void (*on_gone)(void *arg), void *arg);
int sbxd_watch_command(void *arg, const char *id);
bool sbxd_watch_stop(struct sbxd_watch *w);

#endif
