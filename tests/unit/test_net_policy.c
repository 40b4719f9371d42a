/* Unit tests for src/net/policy.c (the egress policy model) and src/net/store.c (policy.json):
 * the exact semantics of parsing, merging, deleting and deciding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../../src/net/policy.h"
#include "../../src/net/store.h"
#include "util.h"

static sbx_net_policy_t *parse(const char *s)
{
  sbx_error_t err = NULL;
  sbx_net_policy_t *p = sbx__net_policy_parse(s, strlen(s), "networkPolicy", &err);
  if (p == NULL)
    fail_msg("`%s`: %s", s, err->msg);
  return p;
}

static void refused(const char *s, const char *why)
{
  sbx_error_t err = NULL;
  sbx_net_policy_t *p = sbx__net_policy_parse(s, strlen(s), "networkPolicy", &err);
  if (p) {
    sbx__net_policy_free(p);
    fail_msg("`%s` parsed", s);
  }
  assert_int_equal(err->kind, SBX_E_INVALID);
  if (strstr(err->msg, why) == NULL)
    fail_msg("`%s`: `%s` lacks `%s`", s, err->msg, why);
  sbx_error_release(&err);
}

static void serializes(const char *in, const char *out)
{
  sbx_net_policy_t *p = parse(in);
  char *s = sbx__net_policy_serialize(p);
  assert_string_equal(s, out);
  /* what we write reads back as the same */
  sbx_net_policy_t *q = parse(s);
  char *s2 = sbx__net_policy_serialize(q);
  assert_string_equal(s2, out);
  free(s);
  free(s2);
  sbx__net_policy_free(p);
  sbx__net_policy_free(q);
}

static void test_parse_shapes(void **state)
{
  (void) state;
  serializes("null", "{\"defaultAction\":\"deny\",\"egress\":[]}");
  serializes("{}", "{\"defaultAction\":\"deny\",\"egress\":[]}");
  serializes("{\"defaultAction\":\"allow\"}", "{\"defaultAction\":\"allow\",\"egress\":[]}");
  serializes(
      "{\"egress\":[{\"action\":\"allow\",\"target\":\"PyPI.org.\"}]}",
      "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":\"pypi.org\"}]}");
  /* canonical address forms; host bits of a CIDR cleared */
  serializes("{\"defaultAction\":\"allow\",\"egress\":["
             "{\"action\":\"deny\",\"target\":\"10.1.2.3/8\"},"
             "{\"action\":\"allow\",\"target\":\"2001:DB8:0:0::1\"},"
             "{\"action\":\"allow\",\"target\":\"2001:db8::ff/64\"},"
             "{\"action\":\"allow\",\"target\":\"*.Pythonhosted.org\"}]}",
             "{\"defaultAction\":\"allow\",\"egress\":["
             "{\"action\":\"deny\",\"target\":\"10.0.0.0/8\"},"
             "{\"action\":\"allow\",\"target\":\"2001:db8::1\"},"
             "{\"action\":\"allow\",\"target\":\"2001:db8::/64\"},"
             "{\"action\":\"allow\",\"target\":\"*.pythonhosted.org\"}]}");
  /* DeerFlow's modes */
  serializes("{\"mode\":\"open\"}", "{\"defaultAction\":\"allow\",\"egress\":[]}");
  serializes("{\"mode\":\"isolated\"}", "{\"defaultAction\":\"deny\",\"egress\":[]}");
  serializes(
      "{\"mode\":\"allowlist\",\"allowlist\":[\"pypi.org\",\"*.cdn.test\",\"PYPI.org\"]}",
      "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":\"pypi.org\"},"
      "{\"action\":\"allow\",\"target\":\"*.cdn.test\"}]}");
}

static void test_parse_errors(void **state)
{
  (void) state;
  refused("[", "networkPolicy: not JSON");
  refused("[]", "networkPolicy: must be an object");
  refused("{\"defaultAction\":\"maybe\"}",
          "networkPolicy.defaultAction: must be \"allow\" or \"deny\"");
  refused("{\"defaultAction\":\"ALLOW\"}", "networkPolicy.defaultAction");
  refused("{\"ingress\":[]}", "networkPolicy.ingress: unknown field");
  refused("{\"egress\":{}}", "networkPolicy.egress: must be an array");
  refused("{\"egress\":[1]}", "networkPolicy.egress[0]: must be an object");
  refused("{\"egress\":[{\"action\":\"allow\"}]}", "networkPolicy.egress[0].target: missing");
  refused("{\"egress\":[{\"target\":\"a.b\"}]}", "networkPolicy.egress[0].action: missing");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.b\",\"port\":1}]}",
          "networkPolicy.egress[0].port: unknown field");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"ok.test\"},{\"action\":\"allow\","
          "\"target\":\"\"}]}",
          "networkPolicy.egress[1].target: empty target");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"a..b\"}]}", "empty label");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.*.b\"}]}", "'*' only as a leading");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"*\"}]}", "`*`");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"-a.b\"}]}", "'-'");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"a b\"}]}", "outside");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/33\"}]}",
          "prefix length must be 0..32");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/\"}]}", "prefix length");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0/8\"}]}",
          "CIDR with a bad address");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"::1/129\"}]}", "0..128");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"1.2.3.256\"}]}", "not a valid IP");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"fe80::1%eth0\"}]}", "not an IPv6");
  refused("{\"egress\":[{\"action\":\"allow\",\"target\":\"a\\u0000b\"}]}", "NUL");
  refused("{\"mode\":\"open\",\"defaultAction\":\"deny\"}", "not both");
  refused("{\"mode\":\"sometimes\"}", "networkPolicy: mode: `sometimes`");
  refused("{\"mode\":\"open\",\"allowlist\":[\"a.b\"]}", "only with mode \"allowlist\"");
  refused("{\"mode\":\"allowlist\",\"allowlist\":[\"a..b\"]}", "networkPolicy: allowlist[0]");
  refused("{\"mode\":\"allowlist\",\"allowlist\":[3]}",
          "networkPolicy.allowlist[0]: must be a string");
  /* bounds: a 254-character name, and one rule too many */
  char name[300];
  memset(name, 'a', sizeof name);
  for (int i = 63; i < 254; i += 64)
    name[i] = '.';
  name[254] = '\0';
  char *body = xasprintf("{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", name);
  refused(body, "longer than 253");
  free(body);
  name[253] = '\0';
  body = xasprintf("{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", name);
  sbx__net_policy_free(parse(body));
  free(body);
  sbx_buf_t b = {0};
  sbx__buf_puts(&b, "{\"egress\":[");
  for (int i = 0; i <= SBX_NET_MAX_RULES; i++)
    sbx__buf_printf(&b, "%s{\"action\":\"allow\",\"target\":\"h%d.test\"}", i ? "," : "", i);
  sbx__buf_puts(&b, "]}");
  refused(b.data, "4097 rules, at most 4096");
  sbx__buf_free(&b);
}

static struct sbx_net_addr A(const char *s) {
  struct sbx_net_addr a;
  if (!sbx__net_addr_parse(s, &a))
    fail_msg("%s", s);
  return a;
}

static void
name_is(const sbx_net_policy_t *p, const char *name, int action, const char *why)
{
  struct sbx_net_decision d;
  sbx__net_policy_decide_name(p, name, &d);
  if (d.action != action || strcmp(d.why, why) != 0)
    fail_msg("%s: %s (%s), expected %s (%s)", name, d.action ? "allow" : "deny", d.why,
             action ? "allow" : "deny", why);
}

static void addr_is(const sbx_net_policy_t *p, const char *addr, int action, const char *why)
{
  struct sbx_net_decision d;
  struct sbx_net_addr host[] = {A("192.0.2.7"), A("2001:db8:1::7")};
  struct sbx_net_addr a = A(addr);
  sbx__net_policy_decide_addr(p, &a, host, ARRAY_SIZE(host), NULL, &d);
  if (d.action != action || strcmp(d.why, why) != 0)
    fail_msg("%s: %s (%s), expected %s (%s)", addr, d.action ? "allow" : "deny", d.why,
             action ? "allow" : "deny", why);
}

static void test_decide_names(void **state)
{
  (void) state;
  sbx_net_policy_t *p = parse("{\"defaultAction\":\"deny\",\"egress\":["
                              "{\"action\":\"deny\",\"target\":\"bad.cdn.test\"},"
                              "{\"action\":\"allow\",\"target\":\"*.cdn.test\"},"
                              "{\"action\":\"allow\",\"target\":\"pypi.test\"},"
                              "{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"}]}");
  name_is(p, "pypi.test", SBX_NET_ALLOW, "allow pypi.test");
  name_is(p, "PyPI.Test.", SBX_NET_ALLOW, "allow pypi.test");
  name_is(p, "www.pypi.test", SBX_NET_DENY, "default"); /* a domain rule is that name only */
  name_is(p, "a.cdn.test", SBX_NET_ALLOW, "allow *.cdn.test");
  name_is(p, "a.b.cdn.test", SBX_NET_ALLOW, "allow *.cdn.test");
  name_is(p, "cdn.test", SBX_NET_DENY, "default"); /* the wildcard is below, not the name */
  name_is(p, "xcdn.test", SBX_NET_DENY, "default");
  name_is(p, "bad.cdn.test", SBX_NET_DENY, "deny bad.cdn.test"); /* first rule wins */
  name_is(p, "10.0.0.1", SBX_NET_DENY, "default");               /* names only meet domain rules */
  name_is(p, "", SBX_NET_DENY, "default");
  sbx__net_policy_free(p);
  /* an overlong name is denied even under default allow (a truncated one could match a
   * wildcard it is not below) */
  p = parse("{\"defaultAction\":\"allow\"}");
  char longname[400];
  memset(longname, 'a', sizeof longname);
  memcpy(longname + 380, ".cdn.test", 10);
  name_is(p, longname, SBX_NET_DENY, "invalid name: longer than 253 characters");
  sbx__net_policy_free(p);
  /* order matters: the wildcard first shadows the deny */
  p = parse("{\"defaultAction\":\"allow\",\"egress\":[{\"action\":\"allow\",\"target\":"
            "\"*.cdn.test\"},{\"action\":\"deny\",\"target\":\"bad.cdn.test\"},{\"action\":"
            "\"deny\",\"target\":\"evil.test\"}]}");
  name_is(p, "bad.cdn.test", SBX_NET_ALLOW, "allow *.cdn.test");
  name_is(p, "evil.test", SBX_NET_DENY, "deny evil.test");
  name_is(p, "anything.else", SBX_NET_ALLOW, "default");
  sbx__net_policy_free(p);
}

static void test_decide_addrs(void **state)
{
  (void) state;
  /* default allow: the always-denied set still holds */
  sbx_net_policy_t *p = parse("{\"defaultAction\":\"allow\",\"egress\":["
                              "{\"action\":\"allow\",\"target\":\"*.internal.test\"}]}");
  addr_is(p, "198.51.100.1", SBX_NET_ALLOW, "default");
  addr_is(p, "2001:db8:2::1", SBX_NET_ALLOW, "default");
  addr_is(p, "127.0.0.1", SBX_NET_DENY, "always-denied: 127.0.0.0/8");
  addr_is(p, "::1", SBX_NET_DENY, "always-denied: ::1/128");
  addr_is(p, "10.2.3.4", SBX_NET_DENY, "always-denied: 10.0.0.0/8");
  addr_is(p, "172.31.255.255", SBX_NET_DENY, "always-denied: 172.16.0.0/12");
  addr_is(p, "172.32.0.1", SBX_NET_ALLOW, "default");
  addr_is(p, "192.168.1.1", SBX_NET_DENY, "always-denied: 192.168.0.0/16");
  addr_is(p, "100.64.0.1", SBX_NET_DENY, "always-denied: 100.64.0.0/10");
  addr_is(p, "100.127.255.255", SBX_NET_DENY, "always-denied: 100.64.0.0/10");
  addr_is(p, "100.128.0.1", SBX_NET_ALLOW, "default");
  addr_is(p, "169.254.169.254", SBX_NET_DENY, "always-denied: 169.254.169.254/32");
  addr_is(p, "169.254.1.1", SBX_NET_DENY, "always-denied: 169.254.0.0/16");
  addr_is(p, "fd00:ec2::254", SBX_NET_DENY, "always-denied: fd00:ec2::254/128");
  addr_is(p, "fd12::1", SBX_NET_DENY, "always-denied: fc00::/7");
  addr_is(p, "fe80::1", SBX_NET_DENY, "always-denied: fe80::/10");
  addr_is(p, "0.0.0.0", SBX_NET_DENY, "always-denied: 0.0.0.0/8");
  addr_is(p, "::", SBX_NET_DENY, "always-denied: ::/128");
  addr_is(p, "192.0.2.7", SBX_NET_DENY, "always-denied: host 192.0.2.7");
  addr_is(p, "2001:db8:1::7", SBX_NET_DENY, "always-denied: host 2001:db8:1::7");
  addr_is(p, "::ffff:10.0.0.1", SBX_NET_DENY, "always-denied: 10.0.0.0/8"); /* mapped */
  addr_is(p, "::ffff:192.0.2.7", SBX_NET_DENY, "always-denied: host 192.0.2.7");
  sbx__net_policy_free(p);
  /* explicit IP/CIDR rules override the set (and decide in order) */
  p = parse("{\"defaultAction\":\"deny\",\"egress\":["
            "{\"action\":\"deny\",\"target\":\"10.9.0.0/16\"},"
            "{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"},"
            "{\"action\":\"allow\",\"target\":\"169.254.169.254\"},"
            "{\"action\":\"allow\",\"target\":\"198.51.100.0/24\"},"
            "{\"action\":\"deny\",\"target\":\"198.51.100.9\"},"
            "{\"action\":\"allow\",\"target\":\"192.0.2.7\"}]}");
  addr_is(p, "10.1.1.1", SBX_NET_ALLOW, "allow 10.0.0.0/8");
  addr_is(p, "10.9.1.1", SBX_NET_DENY, "deny 10.9.0.0/16");
  addr_is(p, "169.254.169.254", SBX_NET_ALLOW, "allow 169.254.169.254");
  addr_is(p, "198.51.100.9", SBX_NET_ALLOW, "allow 198.51.100.0/24");
  addr_is(p, "198.51.101.1", SBX_NET_DENY, "default");
  addr_is(p, "192.0.2.7", SBX_NET_ALLOW, "allow 192.0.2.7");
  addr_is(p, "::ffff:10.1.1.1", SBX_NET_ALLOW, "allow 10.0.0.0/8");
  sbx__net_policy_free(p);
}

static void test_decide_pinned(void **state)
{
  (void) state;
  /* an allowed name's answer: the name's decision replaces the default, but never opens the
   * always-denied set (DNS rebinding to a private address) and an IP/CIDR deny still wins */
  sbx_net_policy_t *p = parse("{\"defaultAction\":\"deny\",\"egress\":["
                              "{\"action\":\"allow\",\"target\":\"pypi.test\"},"
                              "{\"action\":\"deny\",\"target\":\"203.0.113.0/24\"}]}");
  struct sbx_net_decision n, d;
  sbx__net_policy_decide_name(p, "pypi.test", &n);
  struct sbx_net_addr a = A("198.51.100.5"), priv = A("192.168.0.5"), bad = A("203.0.113.9");
  sbx__net_policy_decide_addr(p, &a, NULL, 0, &n, &d);
  assert_int_equal(d.action, SBX_NET_ALLOW);
  assert_string_equal(d.why, "allow pypi.test");
  assert_ptr_equal(d.rule, &p->rules[0]);
  sbx__net_policy_decide_addr(p, &priv, NULL, 0, &n, &d);
  assert_int_equal(d.action, SBX_NET_DENY);
  assert_string_equal(d.why, "always-denied: 192.168.0.0/16");
  assert_null(d.rule);
  sbx__net_policy_decide_addr(p, &bad, NULL, 0, &n, &d);
  assert_int_equal(d.action, SBX_NET_DENY);
  assert_string_equal(d.why, "deny 203.0.113.0/24");
  sbx__net_policy_decide_addr(p, &a, NULL, 0, NULL, &d);
  assert_int_equal(d.action, SBX_NET_DENY);
  assert_string_equal(d.why, "default");
  sbx__net_policy_free(p);
}

static struct sbx_net_rule *rules(const char *s, size_t *n)
{
  json_t *j = json_loads(s, 0, NULL);
  assert_non_null(j);
  struct sbx_net_rule *r = NULL;
  sbx_error_t err = NULL;
  if (sbx__net_rules_from_json(j, "body", &r, n, &err) < 0)
    fail_msg("%s", err->msg);
  json_decref(j);
  return r;
}

static void policy_is(const sbx_net_policy_t *p, const char *want)
{
  char *s = sbx__net_policy_serialize(p);
  assert_string_equal(s, want);
  free(s);
}

static void test_merge(void **state)
{
  (void) state;
  sbx_net_policy_t *p = parse("{\"defaultAction\":\"deny\",\"egress\":["
                              "{\"action\":\"allow\",\"target\":\"a.test\"},"
                              "{\"action\":\"deny\",\"target\":\"b.test\"},"
                              "{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"}]}");
  size_t n;
  /* incoming first; within the patch the first for a target wins; targets compared
   * normalized (B.TEST. is b.test, 10.1.0.0/8 is 10.0.0.0/8) */
  struct sbx_net_rule *in = rules("[{\"action\":\"allow\",\"target\":\"B.TEST.\"},"
                                  "{\"action\":\"deny\",\"target\":\"b.test\"},"
                                  "{\"action\":\"deny\",\"target\":\"10.1.0.0/8\"},"
                                  "{\"action\":\"allow\",\"target\":\"c.test\"}]",
                                  &n);
  sbx_error_t err = NULL;
  assert_int_equal(sbx__net_policy_merge(p, in, n, &err), 0);
  sbx__net_rules_free(in, n);
  policy_is(p, "{\"defaultAction\":\"deny\",\"egress\":["
               "{\"action\":\"allow\",\"target\":\"b.test\"},"
               "{\"action\":\"deny\",\"target\":\"10.0.0.0/8\"},"
               "{\"action\":\"allow\",\"target\":\"c.test\"},"
               "{\"action\":\"allow\",\"target\":\"a.test\"}]}");
  assert_string_equal(sbx__net_policy_mode(p), "enforcing");
  /* delete: normalized match, unknown ignored, count returned */
  const char *del[] = {"A.test", "nope.test", "10.0.0.0/8"};
  assert_int_equal(sbx__net_policy_remove(p, del, 3, &err), 2);
  policy_is(p, "{\"defaultAction\":\"deny\",\"egress\":["
               "{\"action\":\"allow\",\"target\":\"b.test\"},"
               "{\"action\":\"allow\",\"target\":\"c.test\"}]}");
  const char *bad[] = {"ok.test", "a..b"};
  assert_int_equal(sbx__net_policy_remove(p, bad, 2, &err), -1);
  assert_non_null(strstr(err->msg, "target 1"));
  sbx_error_release(&err);
  assert_int_equal(p->n, 2); /* unchanged */
  const char *all[] = {"b.test", "c.test"};
  assert_int_equal(sbx__net_policy_remove(p, all, 2, &err), 2);
  assert_string_equal(sbx__net_policy_mode(p), "deny_all");
  p->default_action = SBX_NET_ALLOW;
  assert_string_equal(sbx__net_policy_mode(p), "allow_all");
  sbx__net_policy_free(p);
}

static void test_merge_bound(void **state)
{
  (void) state;
  sbx_net_policy_t *p = sbx__net_policy_new(SBX_NET_DENY);
  struct sbx_net_rule *in = xreallocarray(NULL, SBX_NET_MAX_RULES, sizeof *in);
  sbx_error_t err = NULL;
  for (int i = 0; i < SBX_NET_MAX_RULES; i++) {
    char t[32];
    snprintf(t, sizeof t, "h%d.test", i);
    in[i].action = SBX_NET_ALLOW;
    assert_int_equal(sbx__net_target_parse(t, &in[i], &err), 0);
  }
  assert_int_equal(sbx__net_policy_merge(p, in, SBX_NET_MAX_RULES, &err), 0);
  assert_int_equal(p->n, SBX_NET_MAX_RULES);
  /* an existing target again fits; a new one does not, and changes nothing */
  assert_int_equal(sbx__net_policy_merge(p, in + 5, 1, &err), 0);
  assert_int_equal(p->n, SBX_NET_MAX_RULES);
  assert_string_equal(p->rules[0].target, "h5.test");
  struct sbx_net_rule extra = {.action = SBX_NET_DENY};
  assert_int_equal(sbx__net_target_parse("new.test", &extra, &err), 0);
  assert_int_equal(sbx__net_policy_merge(p, &extra, 1, &err), -1);
  assert_non_null(strstr(err->msg, "4097 rules, at most 4096"));
  sbx_error_release(&err);
  assert_int_equal(p->n, SBX_NET_MAX_RULES);
  assert_string_equal(p->rules[0].target, "h5.test");
  sbx__net_rule_clear(&extra);
  sbx__net_rules_free(in, SBX_NET_MAX_RULES);
  sbx__net_policy_free(p);
}

static int add_rule(sbx_net_policy_t *p, void *data, sbx_error_t *err)
{
  struct sbx_net_rule r = {.action = SBX_NET_ALLOW};
  if (sbx__net_target_parse(data, &r, err) < 0)
    return -1;
  int rc = sbx__net_policy_merge(p, &r, 1, err);
  sbx__net_rule_clear(&r);
  return rc;
}

static void test_store(void **state)
{
  (void) state;
  char dir[] = "/tmp/sbx-net-store-XXXXXX";
  assert_non_null(mkdtemp(dir));
  sbx_error_t err = NULL;
  assert_null(sbx__net_store_read(dir, &err));
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  assert_non_null(strstr(err->msg, "no egress policy"));
  sbx_error_release(&err);
  /* without create, a sandbox with no policy stays without */
  assert_int_equal(sbx__net_store_update(dir, false, add_rule, (char[]){"a.test"}, NULL, &err), -1);
  assert_int_equal(err->kind, SBX_E_NOT_FOUND);
  sbx_error_release(&err);
  /* a failing edit writes nothing */
  assert_int_equal(sbx__net_store_update(dir, true, add_rule, (char[]){"a..b"}, NULL, &err), -1);
  assert_int_equal(err->kind, SBX_E_INVALID);
  sbx_error_release(&err);
  char *path = xasprintf("%s/net/policy.json", dir);
  struct stat st;
  assert_int_equal(stat(path, &st), -1);
  /* concurrent writers under the lock: no update is lost */
  enum { WRITERS = 8 };
  pid_t pids[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char t[32];
      snprintf(t, sizeof t, "w%d.test", i);
      _exit(sbx__net_store_update(dir, true, add_rule, t, NULL, NULL) == 0 ? 0 : 1);
    }
  }
  for (int i = 0; i < WRITERS; i++) {
    int ws;
    assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
    assert_int_equal(ws, 0);
  }
  sbx_net_policy_t *p = sbx__net_store_read(dir, &err);
  assert_non_null(p);
  assert_int_equal(p->n, WRITERS);
  assert_int_equal(p->default_action, SBX_NET_DENY);
  sbx__net_policy_free(p);
  /* a broken file is an error naming it, not a silent default */
  assert_int_equal(sbx__write_file_at(AT_FDCWD, path, "{\"egress\":5}", 12, 0600, false), 0);
  assert_null(sbx__net_store_read(dir, &err));
  assert_non_null(strstr(err->msg, "net/policy.json.egress: must be an array"));
  sbx_error_release(&err);
  /* counters and the denied log */
  struct sbx_net_counters c = {.denied_connections = 3, .denied_lookups = 5}, r = {0};
  assert_int_equal(sbx__net_counters_write(dir, &c, &err), 0);
  assert_int_equal(sbx__net_counters_read(dir, &r, &err), 0);
  assert_int_equal(r.denied_connections, 3);
  assert_int_equal(r.denied_lookups, 5);
  assert_int_equal(sbx__net_denied_log(dir, "sb1", "lookup", "evil.test", "default", &err), 0);
  assert_int_equal(
      sbx__net_denied_log(dir, "sb1", "connect", "10.0.0.1:80", "always-denied: 10.0.0.0/8", &err),
      0);
  char *log = xasprintf("%s/net/denied.log", dir);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(sbx__read_file_at(AT_FDCWD, log, 1 << 20, &text, &len), 0);
  char *nl = strchr(text, '\n');
  assert_non_null(nl);
  json_t *j = json_loadb(text, (size_t) (nl - text), 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "target")), "evil.test");
  assert_string_equal(json_string_value(json_object_get(j, "kind")), "lookup");
  assert_string_equal(json_string_value(json_object_get(j, "sandbox")), "sb1");
  json_decref(j);
  assert_non_null(strstr(nl + 1, "\"rule\":\"always-denied: 10.0.0.0/8\""));
  free(text);
  free(log);
  free(path);
  sbx__rm_rf_at(AT_FDCWD, dir);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_shapes),  cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_decide_names),  cmocka_unit_test(test_decide_addrs),
      cmocka_unit_test(test_decide_pinned), cmocka_unit_test(test_merge),
      cmocka_unit_test(test_merge_bound),   cmocka_unit_test(test_store),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
