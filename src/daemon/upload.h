/* execd's POST /files/upload (upload.c): a streaming route (it runs when the head arrives and
 * consumes the body as it comes). */
#ifndef SBXD_UPLOAD_H
#define SBXD_UPLOAD_H

#include "http.h"

enum MHD_Result h_files_upload(struct req *r);

#endif
