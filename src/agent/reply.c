/* sbx-init's answers (reply.h). */
#include "reply.h"

#define ITEMS_BATCH (512u << 10)

int agent_reply_error(struct agent_conn *c, sbx_error_t *err)
{
  int r = -1;
  if (err && *err) {
    r = sbx__frame_send_error(c->fd, c->req, (*err)->kind, (*err)->status, (*err)->msg);
    sbx_error_release(err);
  }
  return r;
}

int agent_reply_ok(struct agent_conn *c, const sbx_tlv_writer_t *w)
{
  if (w)
    return sbx__frame_send_tlv(c->fd, SBX_MSG_OK, c->req, w);
  return sbx__frame_send(c->fd, SBX_MSG_OK, c->req, NULL, 0);
}

int agent_items_add(agent_items_t *items, const void *data, size_t len)
{
  if (items->failed < 0)
    return -1;
  sbx__tlv_put(&items->w, SBX_T_ITEM, data, len);
  if (items->w.buf.len >= ITEMS_BATCH) {
    if (sbx__frame_send_tlv(items->c->fd, SBX_MSG_ITEMS, items->c->req, &items->w) < 0)
      items->failed = -1;
    items->w.buf.len = 0;
  }
  return items->failed;
}

int agent_items_finish(agent_items_t *items, bool truncated)
{
  if (items->failed == 0 && items->w.buf.len > 0 &&
      sbx__frame_send_tlv(items->c->fd, SBX_MSG_ITEMS, items->c->req, &items->w) < 0)
    items->failed = -1;
  sbx__tlv_free(&items->w);
  if (items->failed < 0)
    return -1;
  sbx_tlv_writer_t ok = {0};
  sbx__tlv_put_u64(&ok, SBX_T_TRUNCATED, truncated);
  int ret = agent_reply_ok(items->c, &ok);
  sbx__tlv_free(&ok);
  return ret;
}
