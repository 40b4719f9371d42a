/* Unit tests for the linux backend's host layer: the systemd manager's D-Bus reply decoder
 * (cgroup-systemd.c), the cgroup record (cgroup.c), the kernel probes (kernel.c) and the maps
 * of idmapped folders (ids.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "linux.h"

/* A D-Bus message built by hand (little endian), independent of the code under test. */
struct msg {
  uint8_t b[512];
  size_t n;
};

static void m_pad(struct msg *m, size_t a)
{
  while (m->n % a)
    m->b[m->n++] = 0;
}

static void m_u32(struct msg *m, uint32_t v)
{
  m_pad(m, 4);
  memcpy(m->b + m->n, &v, 4);
  m->n += 4;
}

static void m_str(struct msg *m, const char *s, size_t len)
{
  m_u32(m, (uint32_t) len);
  memcpy(m->b + m->n, s, len);
  m->n += len;
  m->b[m->n++] = 0;
}

static void m_sig(struct msg *m, const char *s)
{
  m->b[m->n++] = (uint8_t) strlen(s);
  memcpy(m->b + m->n, s, strlen(s) + 1);
  m->n += strlen(s) + 1;
}

/* type 2 (return) or 3 (error) answering reply_to; err_name and text for an error */
static void build(struct msg *m, uint8_t type, uint32_t reply_to, const char *err_name,
                  size_t err_name_len, const char *text)
{
  memset(m, 0, sizeof *m);
  m->b[0] = 'l';
  m->b[1] = type;
  m->b[3] = 1;
  m->n = 16;
  if (err_name) {
    m_pad(m, 8);
    m->b[m->n++] = 4;
    m_sig(m, "s");
    m_str(m, err_name, err_name_len);
  }
  m_pad(m, 8);
  m->b[m->n++] = 5;
  m_sig(m, "u");
  m_u32(m, reply_to);
  m_pad(m, 8);
  m->b[m->n++] = 8;
  m_sig(m, "g");
  m_sig(m, type == 3 ? "s" : "o");
  uint32_t fields = (uint32_t) (m->n - 16);
  m_pad(m, 8);
  size_t body_at = m->n;
  m_str(m, text, strlen(text));
  uint32_t body = (uint32_t) (m->n - body_at), serial = 9;
  memcpy(m->b + 4, &body, 4);
  memcpy(m->b + 8, &serial, 4);
  memcpy(m->b + 12, &fields, 4);
}

static void test_dbus_reply(void **state)
{
  (void) state;
  struct msg m;
  char *error = NULL;
  build(&m, 2, 1, NULL, 0, "/org/freedesktop/systemd1/job/7");
  assert_int_equal(sbx__dbus_message_size(m.b, m.n), m.n);
  assert_int_equal(sbx__dbus_parse_reply(m.b, m.n, 1, &error), 0);
  assert_null(error);
  /* another call's reply, or a truncated one */
  assert_int_equal(sbx__dbus_parse_reply(m.b, m.n, 2, &error), 1);
  assert_int_equal(sbx__dbus_parse_reply(m.b, m.n - 1, 1, &error), -1);
  assert_int_equal(sbx__dbus_message_size(m.b, 15), 0);
  /* big endian ('B') is not what we ask for */
  m.b[0] = 'B';
  assert_int_equal(sbx__dbus_message_size(m.b, m.n), 0);

  const char *name = "org.freedesktop.systemd1.UnitExists";
  build(&m, 3, 1, name, strlen(name), "Unit sbx-a.scope already exists.");
  assert_int_equal(sbx__dbus_parse_reply(m.b, m.n, 1, &error), 0);
  assert_string_equal(error,
                      "org.freedesktop.systemd1.UnitExists: Unit sbx-a.scope already exists.");
  free(error);
  /* a NUL inside a string is malformed (the fuzzer found an empty error text that way) */
  build(&m, 3, 1, "\0\0x", 3, "m");
  assert_int_equal(sbx__dbus_parse_reply(m.b, m.n, 1, &error), -1);
  assert_null(error);
}

static void test_cgroup_record(void **state)
{
  (void) state;
  struct sbx_cgroup cg = {0};
  cg.none = strdup("create cgroup `x`: Read-only file system\n(more)");
  char *text = sbx__cgroup_format(&cg);
  assert_string_equal(text, "none=create cgroup `x`: Read-only file system (more)\n");
  sbx__cgroup_free(&cg);
  struct sbx_cgroup back;
  assert_int_equal(sbx__cgroup_parse(text, &back), 0);
  for (int i = 0; i < SBX_CG_MAX; i++)
    assert_null(back.path[i]);
  sbx__cgroup_free(&back);
  free(text);
  /* unified: one path in every slot; a path outside the cgroup mount is never trusted */
  assert_int_equal(
      sbx__cgroup_parse("unified=/sys/fs/cgroup/sbx.slice/sbx-a-1.scope\nmemory=/tmp/x\n", &back),
      0);
  assert_true(back.unified);
  assert_string_equal(back.path[SBX_CG_FREEZER], "/sys/fs/cgroup/sbx.slice/sbx-a-1.scope");
  sbx__cgroup_free(&back);
  assert_int_equal(sbx__cgroup_parse("memory=/sys/fs/cgroup/memory/../../etc\n", &back), 0);
  assert_null(back.path[SBX_CG_MEMORY]);
  sbx__cgroup_free(&back);
}

static void test_kernel_probes(void **state)
{
  (void) state;
  /* the check fails exactly when a required call is missing, naming it */
  bool complete = true;
  for (int i = 0; i < SBX_KF_MAX; i++)
    if (sbx__kfeatures[i].required && !sbx__kernel_has(i))
      complete = false;
  sbx_error_t err = NULL;
  assert_int_equal(sbx__kernel_check(&err), complete ? 0 : -1);
  assert_true(complete ? err == NULL : strstr(err->msg, "lacks") != NULL);
  sbx_error_release(&err);
  /* the machines this runs on are above the floor (docs/hosts.md), but valgrind (memcheck)
   * answers ENOSYS for calls it does not know */
  const char *preload = getenv("LD_PRELOAD");
  if (preload == NULL || strstr(preload, "vgpreload") == NULL)
    assert_true(complete);
  assert_true(sbx__kernel_at_least(5, 9));
  assert_false(sbx__kernel_at_least(999, 0));
  assert_false(sbx__kernel_has(SBX_KF_MAX));
  for (int i = 0; i < SBX_KF_MAX; i++)
    assert_non_null(sbx__kfeatures[i].name);
  char *rel = sbx__kernel_release();
  assert_true(strlen(rel) > 0);
  free(rel);
}

/* What the kernel demands of a map (ranges disjoint on both sides) and what ids.c promises:
 * the owner is the sandbox's root, every id of the range is mapped once, and every other
 * on-disk id is SBX_UID_BASE + (its id inside), the owner's slot swapped with SBX_UID_BASE,
 * except the foreign owner's slot: host root (0) is SBX_FOREIGN_ID inside unless it owns the
 * top. */
static void check_map(uint32_t owner, uint32_t base, bool foreign)
{
  char buf[256];
  int len = sbx__idmap_format(buf, sizeof buf, owner, base, foreign);
  assert_true(len > 0 && (size_t) len < sizeof buf && buf[len - 1] == '\n');
  static uint8_t seen[SBX_UID_COUNT];
  memset(seen, 0, sizeof seen);
  uint64_t lines[8][3];
  int n = 0;
  for (const char *p = buf; *p; n++) {
    unsigned long long a, b, c;
    int used = 0;
    assert_true(n < 8);
    assert_int_equal(sscanf(p, "%llu %llu %llu\n%n", &a, &b, &c, &used), 3);
    lines[n][0] = a, lines[n][1] = b, lines[n][2] = c;
    p += used;
  }
  for (int i = 0; i < n; i++) {
    uint64_t disk = lines[i][0], in = lines[i][1] - base, cnt = lines[i][2];
    assert_true(cnt > 0 && in + cnt <= SBX_UID_COUNT);
    for (int k = 0; k < i; k++) /* disjoint on disk */
      assert_true(disk + cnt <= lines[k][0] || lines[k][0] + lines[k][2] <= disk);
    for (uint64_t j = 0; j < cnt; j++) {
      assert_int_equal(seen[in + j], 0);
      seen[in + j] = 1;
      uint64_t want = in + j == 0                                         ? owner
                      : foreign && owner != 0 && in + j == SBX_FOREIGN_ID ? 0
                      : owner > SBX_UID_BASE && owner - SBX_UID_BASE == in + j
                          ? SBX_UID_BASE
                          : SBX_UID_BASE + in + j;
      assert_int_equal(disk + j, want);
    }
  }
  for (uint32_t j = 0; j < SBX_UID_COUNT; j++)
    assert_int_equal(seen[j], 1);
}

static void test_idmap_format(void **state)
{
  (void) state;
  const uint32_t owners[] = {0,      1000,   SBX_UID_BASE, SBX_UID_BASE + 1, SBX_UID_BASE + 1000,
                             165534, 165535, 165536,       4294967294u};
  for (size_t i = 0; i < sizeof owners / sizeof owners[0]; i++)
    for (int f = 0; f < 2; f++)
      check_map(owners[i], 0x10000000u, f);
  char buf[256];
  sbx__idmap_format(buf, sizeof buf, SBX_UID_BASE, 0x10000000u, true);
  /* as before for libsbx's folders, but host root's files are nobody's (65534) inside */
  assert_string_equal(buf, "100000 268435456 65534\n0 268500990 1\n165535 268500991 1\n");
  sbx__idmap_format(buf, sizeof buf, 1000, 0x10000000u, true);
  assert_string_equal(buf, "1000 268435456 1\n100001 268435457 65533\n0 268500990 1\n"
                           "165535 268500991 1\n");
  sbx__idmap_format(buf, sizeof buf, 0, 0x10000000u, true); /* root's top: root inside */
  assert_string_equal(buf, "0 268435456 1\n100001 268435457 65535\n");
  sbx__idmap_format(buf, sizeof buf, SBX_UID_BASE, 0x10000000u, false); /* a spare's */
  assert_string_equal(buf, "100000 268435456 65536\n");
  sbx__idmap_format(buf, sizeof buf, 1000, 0x10000000u, false);
  assert_string_equal(buf, "1000 268435456 1\n100001 268435457 65535\n");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dbus_reply),
      cmocka_unit_test(test_cgroup_record),
      cmocka_unit_test(test_kernel_probes),
      cmocka_unit_test(test_idmap_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
