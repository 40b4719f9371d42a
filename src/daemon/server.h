/* The listener: libmicrohttpd's callbacks, the request's life (request id, body collection up
 * to the route's cap or into its streaming consumer, the access log line), start and stop. */
#ifndef SBXD_SERVER_H
#define SBXD_SERVER_H

#include <stdbool.h>

bool sbxd_listen_is_loopback(const char *listen);
/* Listens on srv.listen, which becomes the address actually bound (before any request). */
int sbxd_server_start(void);
void sbxd_server_stop(void);
/* The connections being served now (0 when not listening). */
unsigned sbxd_server_connections(void);
/* listen is HOST:PORT or [V6]:PORT, HOST an address or `localhost` (127.0.0.1) */
bool sbxd_listen_valid(const char *listen);

#endif
