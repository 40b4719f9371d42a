/* The thread that keeps the configured spares ready (sandbox.spares). */
#ifndef SBXD_SPARES_H
#define SBXD_SPARES_H

/* Starts it when the configuration asks for spares; 0, or -1 when it could not. */
int sbxd_spares_start(void);
/* Wakes it (a create may have taken a spare). */
void sbxd_spares_kick(void);
/* Stops and joins it (srv.stopping is already set). */
void sbxd_spares_stop(void);

#endif
