/* libFuzzer target for TLV payloads (src/common/proto.c) and for libsbx's decoding of what
 * sbx-init sends back (src/backends/linux/host/agent_client.c, included here to reach its static
 * decoders). sbx-init runs inside the sandbox: the host must treat every reply as untrusted
 * bytes.
 *
 * Input: a TLV payload. Oracles:
 * - sbx__tlv_valid agrees with a walk by sbx__tlv_next; sbx__tlv_find returns the first field of
 *   a tag; typed getters agree with the raw field (u64: exactly 8 bytes, little endian;
 *   strings: a copy without NUL bytes) and report absent fields with the default;
 * - sbx__error_from_frame always gives an error whose kind is in range and whose message is a
 *   NUL-terminated string;
 * - the reply decoders (list/glob items, grep matches, stat records, file infos) accept or
 *   refuse without crashing, and what they accept has NUL-free strings.
 *
 * Run: fuzz/run.sh, or build-fuzz/fuzz/fuzz_tlv fuzz/corpus/tlv */
#include "../src/backends/linux/host/agent_client.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* agent_client.c's grep decoder frees through the public function (src/lib/backend.c, not linked
 * here): the same few lines. */
void sbx_grep_matches_free(struct sbx_grep_match *m, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    free(m[i].path);
    free(m[i].line);
  }
  free(m);
}

static uint64_t le64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static void check_getters(const uint8_t *data, size_t size, uint16_t tag)
{
  sbx_tlv_t f;
  int found = sbx__tlv_find(data, size, tag, &f);
  uint64_t u = 0;
  int ru = sbx__tlv_get_u64(data, size, tag, 77, &u);
  char *s = NULL;
  int rs = sbx__tlv_get_str(data, size, tag, &s);
  if (found < 0) {
    if (ru >= 0 || rs >= 0)
      abort();
    return;
  }
  if (found == 0) {
    if (ru != 0 || u != 77 || rs != 0 || s != NULL || sbx__tlv_has(data, size, tag))
      abort();
    return;
  }
  if (!sbx__tlv_has(data, size, tag))
    abort();
  if (f.len == 8 ? (ru != 1 || u != le64(f.data)) : ru != -1)
    abort();
  bool has_nul = memchr(f.data, '\0', f.len) != NULL;
  if (has_nul ? (rs != -1 || s != NULL)
              : (rs != 1 || s == NULL || strlen(s) != f.len || memcmp(s, f.data, f.len) != 0))
    abort();
  free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  /* the walk and validity */
  sbx_tlv_reader_t r;
  sbx_tlv_t f;
  int ret;
  size_t fields = 0;
  sbx__tlv_reader_init(&r, data, size);
  while ((ret = sbx__tlv_next(&r, &f)) > 0) {
    if (f.data < data || f.data + f.len > data + size)
      abort();
    fields++;
  }
  if ((ret == 0) != sbx__tlv_valid(data, size))
    abort();
  (void) fields;

  /* getters for a few tags, including ones the payload uses */
  check_getters(data, size, SBX_T_PATH);
  check_getters(data, size, SBX_T_MSG);
  check_getters(data, size, SBX_T_CODE);
  if (size >= 2)
    check_getters(data, size, (uint16_t) (data[0] | data[1] << 8));

  /* an ERR frame from sbx-init */
  sbx_error_t err = NULL;
  if (sbx__error_from_frame(data, size, &err) != -1 || err == NULL || err->msg == NULL ||
      err->kind <= 0 || err->kind >= SBX_E_KIND_MAX)
    abort();
  (void) strlen(err->msg);
  sbx_error_release(&err);

  /* libsbx's reply decoders, as items_request feeds them (one ITEM field each) */
  sbx_strv_t strs = {0};
  struct grep_acc ga = {0};
  struct info_acc ia = {0};
  sbx__tlv_reader_init(&r, data, size);
  while (sbx__tlv_next(&r, &f) > 0) {
    if (push_string(&strs, f.data, f.len) == 0 && strlen(strs.v[strs.n - 1]) != f.len)
      abort();
    if (push_match(&ga, f.data, f.len) == 0) {
      struct sbx_grep_match *m = &ga.v[ga.n - 1];
      if (m->path == NULL || m->line == NULL)
        abort();
    }
    push_info(&ia, f.data, f.len);
  }
  struct sbx_file_info info;
  if (info_from_tlv(data, size, &info) == 0 && info.path != NULL)
    abort();
  sbx__strv_free(&strs);
  sbx_grep_matches_free(ga.v, ga.n);
  sbx_file_infos_free(ia.v, ia.n);
  return 0;
}
