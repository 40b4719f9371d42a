/* DeerFlow's sandbox contract as JSON (contract.c, docs/contract-http.md). */
#ifndef SBXD_CONTRACT_H
#define SBXD_CONTRACT_H

#include "http.h"

enum MHD_Result h_contract_acquire(struct req *r);
enum MHD_Result h_contract_release(struct req *r);
/* POST /sandboxes/{id}/contract/<op> */
enum MHD_Result h_contract_execute(struct req *r);
enum MHD_Result h_contract_read(struct req *r);
enum MHD_Result h_contract_write(struct req *r);
enum MHD_Result h_contract_update(struct req *r);
enum MHD_Result h_contract_download(struct req *r);
enum MHD_Result h_contract_list_dir(struct req *r);
enum MHD_Result h_contract_glob(struct req *r);
enum MHD_Result h_contract_grep(struct req *r);

#endif
