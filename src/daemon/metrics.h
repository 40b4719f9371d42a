/* execd's metrics (metrics.c): one sample, or a sample a second as a stream. */
#ifndef SBXD_METRICS_H
#define SBXD_METRICS_H

#include "http.h"

enum MHD_Result h_metrics(struct req *r);
enum MHD_Result h_metrics_watch(struct req *r);

#endif
