/* execd's /files and /directories routes (files.c; the upload is upload.h). */
#ifndef SBXD_FILES_H
#define SBXD_FILES_H

#include "http.h"

enum MHD_Result h_files_info(struct req *r);
enum MHD_Result h_files_delete(struct req *r);
enum MHD_Result h_files_mv(struct req *r);
enum MHD_Result h_files_permissions(struct req *r);
enum MHD_Result h_files_search(struct req *r);
enum MHD_Result h_files_replace(struct req *r);
enum MHD_Result h_files_download(struct req *r);
enum MHD_Result h_dir_list(struct req *r);
enum MHD_Result h_dir_make(struct req *r);
enum MHD_Result h_dir_remove(struct req *r);

#endif
