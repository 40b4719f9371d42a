/* Unit tests for src/lib/config.c: defaults, typing, $VAR resolution, safety limits, exact
 * error messages and the dump round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <fcntl.h>

#include <sbx/config.h>

#include "util.h"

static struct sbx_config *load(const char *yaml)
{
  sbx_error_t err = NULL;
  struct sbx_config *cfg = sbx_config_load_string("t.yaml", yaml, strlen(yaml), &err);
  if (cfg == NULL) {
    print_error("unexpected error: %s\n", err ? err->msg : "(none)");
    sbx_error_release(&err);
    fail();
  }
  assert_null(err);
  return cfg;
}

static void expect_error(const char *yaml, const char *msg)
{
  sbx_error_t err = NULL;
  struct sbx_config *cfg = sbx_config_load_string("t.yaml", yaml, strlen(yaml), &err);
  assert_null(cfg);
  assert_non_null(err);
  assert_int_equal(err->kind, SBX_E_CONFIG);
  assert_string_equal(err->msg, msg);
  sbx_error_release(&err);
}

static int clear_env(void **state)
{
  unsetenv("OPEN_SANDBOX_API_KEY");
  unsetenv("OPEN_SANDBOX_DOMAIN");
  unsetenv("SBX_TEST_VAR");
  unsetenv("SBX_TEST_MISSING");
  return 0;
}

static void check_defaults(const struct sbx_config *cfg)
{
  assert_string_equal(cfg->use, "linux");
  assert_string_equal(cfg->image, "host");
  assert_int_equal(cfg->replicas, 3);
  assert_int_equal(cfg->idle_timeout, 600);
  assert_true(cfg->bash_command_timeout == 600);
  assert_int_equal(cfg->n_environment, 0);
  assert_int_equal(cfg->memory_mib, 1024);
  assert_true(cfg->cpus == 0);
  assert_int_equal(cfg->pids, 1024);
  assert_string_equal(cfg->network, "none");
  assert_string_equal(cfg->cgroup_manager, "auto");
  assert_true(cfg->cgroup_required);
  assert_int_equal(cfg->n_mounts, 0);
  assert_int_equal(cfg->output_max_bytes, 10485760);
  assert_int_equal(cfg->bash_output_max_chars, 20000);
  assert_int_equal(cfg->read_file_output_max_chars, 50000);
  assert_int_equal(cfg->ls_output_max_chars, 20000);
  assert_int_equal(cfg->tmp_size_mib, 1024);
  assert_int_equal(cfg->home_size_mib, 256);
  assert_int_equal(cfg->disk_mib, 0);
  assert_int_equal(cfg->image_max_mib, 32768);
  assert_int_equal(cfg->image_min_free_mib, 1024);
  assert_int_equal(cfg->health_check_timeout, 10);
  assert_true(cfg->health_check_skip_seconds == 0);
  assert_int_equal(cfg->max_sandboxes, 64);
  assert_int_equal(cfg->max_sandboxes_per_user, 32);
  assert_true(cfg->memory_overcommit == 4);
  assert_int_equal(cfg->max_connections, 1024);
  assert_int_equal(cfg->max_connections_per_address, 256);
  assert_int_equal(cfg->connections_reserve, 64);
  assert_true(cfg->head_timeout == 10);
  assert_int_equal(cfg->spares, 0);
  assert_null(cfg->api_key);
  assert_string_equal(cfg->domain, "localhost:8080");
  assert_string_equal(cfg->protocol, "http");
  assert_true(cfg->request_timeout == 30);
  assert_true(cfg->ready_timeout == 30);
  assert_false(cfg->use_server_proxy);
  assert_int_equal(cfg->sandbox_timeout, 14400);
  assert_string_equal(cfg->listen, "127.0.0.1:8080");
  assert_null(cfg->server_api_key);
  assert_int_equal(cfg->n_volume_roots, 0);
  assert_int_equal(cfg->max_sandbox_timeout, 86400);
  assert_int_equal(cfg->n_images, 0);
}

static void test_defaults(void **state)
{
  struct sbx_config *cfg = sbx_config_new_default();
  check_defaults(cfg);
  assert_null(cfg->path);
  sbx_config_free(cfg);

  static const char *const empties[] = {
      "", "# only a comment\n", "---\n", "~\n", "sandbox:\n", "sandbox: {}\nsbxd:\n",
  };
  for (size_t i = 0; i < ARRAY_SIZE(empties); i++) {
    cfg = load(empties[i]);
    check_defaults(cfg);
    assert_string_equal(cfg->path, "t.yaml");
    sbx_config_free(cfg);
  }

  cfg = sbx_config_load_string(NULL, NULL, 0, NULL);
  assert_non_null(cfg);
  check_defaults(cfg);
  assert_null(cfg->path);
  sbx_config_free(cfg);
}

static void test_defaults_from_env(void **state)
{
  setenv("OPEN_SANDBOX_API_KEY", "$ecret", 1);
  setenv("OPEN_SANDBOX_DOMAIN", "os.example:9000", 1);
  struct sbx_config *cfg = sbx_config_new_default();
  assert_string_equal(cfg->api_key, "$ecret");
  assert_string_equal(cfg->domain, "os.example:9000");
  assert_string_equal(cfg->server_api_key, "$ecret");
  sbx_config_free(cfg);

  cfg = load("sandbox:\n  api_key: filekey\n  domain: \"\"\nsbxd:\n  api_key: server\n");
  assert_string_equal(cfg->api_key, "filekey");
  assert_string_equal(cfg->domain, "os.example:9000");
  assert_string_equal(cfg->server_api_key, "server");
  sbx_config_free(cfg);

  setenv("OPEN_SANDBOX_API_KEY", "", 1);
  unsetenv("OPEN_SANDBOX_DOMAIN");
  cfg = sbx_config_new_default();
  assert_null(cfg->api_key);
  assert_null(cfg->server_api_key);
  assert_string_equal(cfg->domain, "localhost:8080");
  sbx_config_free(cfg);
  clear_env(state);
}

static void test_full(void **state)
{
  struct sbx_config *cfg = load("sandbox:\n"
                                "  use: linux\n"
                                "  image: alpine\n"
                                "  replicas: 5\n"
                                "  idle_timeout: 0\n"
                                "  bash_command_timeout: 1.5e2\n"
                                "  environment:\n"
                                "    PYTHONUNBUFFERED: \"1\"\n"
                                "    NUM: 42\n"
                                "    FLAG: yes\n"
                                "    EMPTY:\n"
                                "    _x9: 'two words'\n"
                                "  memory_mib: 0\n"
                                "  cpus: 0.5\n"
                                "  pids: +64\n"
                                "  network: host\n"
                                "  mounts:\n"
                                "    - host_path: /tmp\n"
                                "      container_path: //data/./in/\n"
                                "      read_only: On\n"
                                "    - {host_path: /, container_path: /mnt/skills}\n"
                                "  output_max_bytes: 1024\n"
                                "  bash_output_max_chars: 0\n"
                                "  read_file_output_max_chars: 7\n"
                                "  ls_output_max_chars: 8\n"
                                "  tmp_size_mib: 64\n"
                                "  home_size_mib: 32\n"
                                "  disk_mib: 2048\n"
                                "  health_check_timeout: 3\n"
                                "  max_sandboxes: 0\n"
                                "  max_sandboxes_per_user: 5\n"
                                "  memory_overcommit: 1.5\n"
                                "  allow_host_bash: true\n"
                                "  protocol: https\n"
                                "  request_timeout: 5\n"
                                "  ready_timeout: .25\n"
                                "  use_server_proxy: TRUE\n"
                                "  sandbox_timeout: 0\n"
                                "sbxd:\n"
                                "  listen: '[::1]:9090'\n"
                                "  volume_roots: [/srv/data/, /home]\n"
                                "  max_sandbox_timeout: 3600\n"
                                "  max_connections: 100\n"
                                "  max_connections_per_address: 0\n"
                                "  connections_reserve: 10\n"
                                "  head_timeout: 2.5\n"
                                "  images:\n"
                                "    python:3.11: host\n"
                                "    'ubuntu:22.04': host\n");
  assert_string_equal(cfg->use, "linux");
  assert_string_equal(cfg->image, "alpine");
  assert_int_equal(cfg->replicas, 5);
  assert_int_equal(cfg->idle_timeout, 0);
  assert_true(cfg->bash_command_timeout == 150);
  assert_int_equal(cfg->n_environment, 5);
  assert_string_equal(cfg->environment[0].key, "PYTHONUNBUFFERED");
  assert_string_equal(cfg->environment[0].value, "1");
  assert_false(cfg->environment[0].secret);
  assert_string_equal(cfg->environment[1].value, "42");
  assert_string_equal(cfg->environment[2].value, "yes");
  assert_string_equal(cfg->environment[3].key, "EMPTY");
  assert_string_equal(cfg->environment[3].value, "");
  assert_string_equal(cfg->environment[4].key, "_x9");
  assert_string_equal(cfg->environment[4].value, "two words");
  assert_int_equal(cfg->memory_mib, 0);
  assert_true(cfg->cpus == 0.5);
  assert_int_equal(cfg->pids, 64);
  assert_int_equal(cfg->max_sandboxes, 0);
  assert_int_equal(cfg->max_sandboxes_per_user, 5);
  assert_true(cfg->memory_overcommit == 1.5);
  assert_int_equal(cfg->max_connections, 100);
  assert_int_equal(cfg->max_connections_per_address, 0);
  assert_int_equal(cfg->connections_reserve, 10);
  assert_true(cfg->head_timeout == 2.5);
  assert_string_equal(cfg->network, "host");
  assert_int_equal(cfg->n_mounts, 2);
  assert_string_equal(cfg->mounts[0].host_path, "/tmp");
  assert_string_equal(cfg->mounts[0].container_path, "/data/in");
  assert_true(cfg->mounts[0].read_only);
  assert_string_equal(cfg->mounts[1].host_path, "/");
  assert_string_equal(cfg->mounts[1].container_path, "/mnt/skills");
  assert_false(cfg->mounts[1].read_only);
  assert_int_equal(cfg->output_max_bytes, 1024);
  assert_int_equal(cfg->bash_output_max_chars, 0);
  assert_int_equal(cfg->read_file_output_max_chars, 7);
  assert_int_equal(cfg->ls_output_max_chars, 8);
  assert_int_equal(cfg->tmp_size_mib, 64);
  assert_int_equal(cfg->home_size_mib, 32);
  assert_int_equal(cfg->disk_mib, 2048);
  assert_int_equal(cfg->health_check_timeout, 3);
  assert_string_equal(cfg->protocol, "https");
  assert_true(cfg->request_timeout == 5);
  assert_true(cfg->ready_timeout == 0.25);
  assert_true(cfg->use_server_proxy);
  assert_int_equal(cfg->sandbox_timeout, 0);
  assert_string_equal(cfg->listen, "[::1]:9090");
  assert_int_equal(cfg->n_volume_roots, 2);
  assert_string_equal(cfg->volume_roots[0], "/srv/data");
  assert_string_equal(cfg->volume_roots[1], "/home");
  assert_null(cfg->volume_roots[2]);
  assert_int_equal(cfg->max_sandbox_timeout, 3600);
  assert_int_equal(cfg->n_images, 2);
  assert_string_equal(cfg->images[0].name, "python:3.11");
  assert_string_equal(cfg->images[0].target, "host");
  assert_string_equal(cfg->images[1].name, "ubuntu:22.04");
  assert_string_equal(cfg->images[1].target, "host");
  sbx_config_free(cfg);
}

static void test_opensandbox(void **state)
{
  struct sbx_config *cfg =
      load("sandbox:\n  use: deerflow.community.opensandbox:OpenSandboxProvider\n");
  assert_string_equal(cfg->use, "opensandbox");
  assert_string_equal(cfg->image, "python:3.11");
  sbx_config_free(cfg);

  cfg = load("sandbox:\n  use: opensandbox\n  image: python:3.12-slim\n");
  assert_string_equal(cfg->use, "opensandbox");
  assert_string_equal(cfg->image, "python:3.12-slim");
  sbx_config_free(cfg);

  expect_error("sandbox:\n  use: boxlite\n",
               "t.yaml:2: sandbox.use: unknown backend 'boxlite' (known: linux, opensandbox)");
  expect_error("sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n",
               "t.yaml:2: sandbox.use: unknown backend "
               "'deerflow.sandbox.local:LocalSandboxProvider' (known: linux, opensandbox)");
  expect_error("sandbox:\n  use: ''\n",
               "t.yaml:2: sandbox.use: unknown backend '' (known: linux, opensandbox)");
}

static void test_deerflow_keys_ignored(void **state)
{
  struct sbx_config *cfg = load("config_version: 3\n"
                                "models:\n"
                                "  - name: gpt\n"
                                "    use: langchain_openai:ChatOpenAI\n"
                                "    api_key: $SBX_TEST_MISSING\n"
                                "    weird: [1, {a: b}, ~]\n"
                                "tools:\n"
                                "  - {name: web_search, group: web}\n"
                                "? [complex, key]\n"
                                ": value\n"
                                "sandbox:\n"
                                "  use: deerflow.community.opensandbox:OpenSandboxProvider\n"
                                "  allow_host_bash: false\n"
                                "  replicas: 2\n"
                                "memory:\n"
                                "  enabled: true\n");
  assert_string_equal(cfg->use, "opensandbox");
  assert_int_equal(cfg->replicas, 2);
  sbx_config_free(cfg);
}

/* DeerFlow's sandbox.network mapping (its PR #5152) beside sbx's string form */
static void test_deerflow_network_mapping(void **state)
{
  (void) state;
  struct sbx_config *cfg = load("sandbox:\n  network: {mode: isolated}\n");
  assert_string_equal(cfg->network, "none");
  assert_null(cfg->network_policy);
  sbx_config_free(cfg);
  cfg = load("sandbox:\n  network:\n    mode: open\n");
  assert_string_equal(cfg->network, "egress");
  assert_string_equal(cfg->network_policy, "{\"defaultAction\":\"allow\",\"egress\":[]}");
  sbx_config_free(cfg);
  cfg = load("sandbox:\n  network:\n    mode: allowlist\n    approval: prompt\n"
             "    allowlist: [PyPI.org, '*.pythonhosted.org']\n");
  assert_string_equal(cfg->network, "egress");
  assert_string_equal(cfg->network_policy,
                      "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":"
                      "\"pypi.org\"},{\"action\":\"allow\",\"target\":\"*.pythonhosted.org\"}]}");
  sbx_config_free(cfg);
  /* the list's other names (DeerFlow's own key could not be confirmed) */
  for (int i = 0; i < 2; i++) {
    cfg = load(i == 0 ? "sandbox:\n  network: {mode: allowlist, allow: [a.test]}\n"
                      : "sandbox:\n  network: {mode: allowlist, domains: [a.test]}\n");
    assert_string_equal(cfg->network_policy, "{\"defaultAction\":\"deny\",\"egress\":[{"
                                             "\"action\":\"allow\",\"target\":\"a.test\"}]}");
    sbx_config_free(cfg);
  }
  /* the string form is unchanged */
  cfg = load("sandbox:\n  network: egress\n");
  assert_string_equal(cfg->network, "egress");
  assert_null(cfg->network_policy);
  sbx_config_free(cfg);
  expect_error("sandbox:\n  network: {mode: closed}\n",
               "t.yaml:2: sandbox.network: mode: `closed` is not \"open\", \"isolated\" or "
               "\"allowlist\"");
  expect_error("sandbox:\n  network: {allowlist: [a.test]}\n",
               "t.yaml:2: sandbox.network.mode: missing: open, isolated or allowlist");
  expect_error("sandbox:\n  network: {mode: allowlist, proxy: x}\n",
               "t.yaml:2: sandbox.network.proxy: unknown key (mode, allowlist, allow, domains, "
               "approval)");
  expect_error("sandbox:\n  network: {mode: open, allowlist: [a.test]}\n",
               "t.yaml:2: sandbox.network: allowlist: only with mode \"allowlist\" (mode is open)");
  expect_error("sandbox:\n  network: {mode: allowlist, allowlist: a.test}\n",
               "t.yaml:2: sandbox.network.allowlist: expected a list of domains, got 'a.test'");
  expect_error("sandbox:\n  network: {mode: allowlist, allowlist: ['bad name!']}\n",
               "t.yaml:2: sandbox.network: allowlist[0]: `bad name!`: not a domain, wildcard, IP "
               "or CIDR (a character outside [a-z0-9-_.])");
  /* one policy, not two */
  expect_error("sandbox:\n  network: {mode: open}\n  network_policy: {defaultAction: deny}\n",
               "t.yaml:3: sandbox.network_policy: sandbox.network (a mapping) sets the egress "
               "policy already: keep one");
  expect_error("sandbox:\n  network_policy: {defaultAction: deny}\n  network: {mode: open}\n",
               "t.yaml:3: sandbox.network: a mapping sets the egress policy and so does "
               "sandbox.network_policy: keep one");
}

static void test_unknown_key(void **state)
{
  expect_error("sandbox:\n  replicas: 2\n  bogus: 1\n", "t.yaml:3: sandbox.bogus: unknown key");
  expect_error("models: []\nsbxd:\n\n  port: 80\n", "t.yaml:4: sbxd.port: unknown key");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: /x\n"
               "      mode: ro\n",
               "t.yaml:5: sandbox.mounts[0].mode: unknown key");
  expect_error("sandbox:\n  health_check_skipseconds: 0\n",
               "t.yaml:2: sandbox.health_check_skipseconds: unknown key");
  /* BoxLite's key is known: a number, not negative */
  const char *ok = "sandbox:\n  health_check_skip_seconds: 2.5\n";
  struct sbx_config *cfg = sbx_config_load_string("t.yaml", ok, strlen(ok), NULL);
  assert_non_null(cfg);
  assert_true(cfg->health_check_skip_seconds == 2.5);
  sbx_config_free(cfg);
  sbx_error_t err = NULL;
  const char *neg = "sandbox:\n  health_check_skip_seconds: -1\n";
  assert_null(sbx_config_load_string("t.yaml", neg, strlen(neg), &err));
  assert_non_null(err);
  sbx_error_release(&err);
  /* spares: 0 (default) to 64 */
  const char *spares = "sandbox:\n  spares: 4\n";
  cfg = sbx_config_load_string("t.yaml", spares, strlen(spares), NULL);
  assert_non_null(cfg);
  assert_int_equal(cfg->spares, 4);
  sbx_config_free(cfg);
  expect_error("sandbox:\n  spares: 65\n",
               "t.yaml:2: sandbox.spares: must be at most 64, got '65'");
  expect_error("sandbox:\n  spares: -1\n",
               "t.yaml:2: sandbox.spares: must be non-negative, got '-1'");
  expect_error("sandbox:\n  spares: two\n",
               "t.yaml:2: sandbox.spares: expected an integer, got 'two'");
}

static void test_wrong_type(void **state)
{
  expect_error("sandbox:\n  replicas: abc\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got 'abc'");
  expect_error("sandbox:\n  replicas: 1.5\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got '1.5'");
  expect_error("sandbox:\n  replicas: \"3\"\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got a quoted string '3'");
  expect_error("sandbox:\n  replicas: [3]\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got a list");
  expect_error("sandbox:\n  replicas:\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got null");
  expect_error("sandbox:\n  replicas: 0x10\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got '0x10'");
  expect_error("sandbox:\n  cpus: nan\n", "t.yaml:2: sandbox.cpus: expected a number, got 'nan'");
  expect_error("sandbox:\n  cpus: .inf\n", "t.yaml:2: sandbox.cpus: expected a number, got '.inf'");
  expect_error("sandbox:\n  cpus: 1.5x\n", "t.yaml:2: sandbox.cpus: expected a number, got '1.5x'");
  expect_error("sandbox:\n  cpus: ' 1'\n",
               "t.yaml:2: sandbox.cpus: expected a number, got a quoted string ' 1'");
  expect_error("sandbox:\n  use_server_proxy: maybe\n",
               "t.yaml:2: sandbox.use_server_proxy: expected a boolean (true/false, yes/no, "
               "on/off), got 'maybe'");
  expect_error("sandbox:\n  allow_host_bash: 'true'\n",
               "t.yaml:2: sandbox.allow_host_bash: expected a boolean (true/false, yes/no, "
               "on/off), got a quoted string 'true'");
  expect_error("sandbox:\n  image: {a: b}\n",
               "t.yaml:2: sandbox.image: expected a string, got a mapping");
  expect_error("sandbox:\n  image:\n", "t.yaml:2: sandbox.image: expected a string, got null");
  expect_error("sandbox:\n  image: ''\n", "t.yaml:2: sandbox.image: must not be empty");
  expect_error("sandbox:\n  environment: 5\n",
               "t.yaml:2: sandbox.environment: expected a mapping, got '5'");
  expect_error("sandbox:\n  environment:\n    A: [1]\n",
               "t.yaml:3: sandbox.environment.A: expected a string, got a list");
  expect_error("sandbox:\n  mounts: {}\n",
               "t.yaml:2: sandbox.mounts: expected a list, got a mapping");
  expect_error("sandbox:\n  mounts: [/tmp]\n",
               "t.yaml:2: sandbox.mounts[0]: expected a mapping, got '/tmp'");
  expect_error("sandbox: [1]\n", "t.yaml:1: sandbox: expected a mapping, got a list");
  expect_error("sandbox:\n  network: bridge\n",
               "t.yaml:2: sandbox.network: must be 'none', 'egress' or 'host', got 'bridge'");
  expect_error("sandbox:\n  cgroup_manager: systemd-ish\n",
               "t.yaml:2: sandbox.cgroup_manager: must be 'auto', 'cgroupfs', 'systemd' or "
               "'none', got 'systemd-ish'");
  expect_error("sandbox:\n  cgroup_slice: ../x.slice\n",
               "t.yaml:2: sandbox.cgroup_slice: must be a systemd slice name (letters, digits, "
               "':', '_', '.', '-', ending in .slice), got '../x.slice'");
  expect_error(
      "sandbox:\n  cgroup_required: maybe\n",
      "t.yaml:2: sandbox.cgroup_required: expected a boolean (true/false, yes/no, on/off), "
      "got 'maybe'");
  expect_error("sandbox:\n  protocol: ftp\n",
               "t.yaml:2: sandbox.protocol: must be 'http' or 'https', got 'ftp'");
  expect_error("sbxd:\n  listen: localhost\n",
               "t.yaml:2: sbxd.listen: must be host:port, got 'localhost'");
  expect_error("sbxd:\n  listen: 'h:99999'\n",
               "t.yaml:2: sbxd.listen: must be host:port, got 'h:99999'");
  expect_error("sbxd:\n  volume_roots: [srv]\n",
               "t.yaml:2: sbxd.volume_roots[0]: must be an absolute path, got 'srv'");
  expect_error("sbxd:\n  volume_roots:\n    - /srv/../etc\n",
               "t.yaml:3: sbxd.volume_roots[0]: must not contain '..' segments, got "
               "'/srv/../etc'");
  expect_error("sbxd:\n  images: [host]\n",
               "t.yaml:2: sbxd.images: expected a mapping, got a list");
  expect_error("sbxd:\n  images:\n    python:3.11: debian:12\n",
               "t.yaml:3: sbxd.images.python:3.11: must be 'host' (the only image of the linux "
               "backend), got 'debian:12'");
  expect_error("sbxd:\n  images:\n    python:3.11: [host]\n",
               "t.yaml:3: sbxd.images.python:3.11: expected a string, got a list");
  expect_error("sbxd:\n  images:\n    '': host\n",
               "t.yaml:3: sbxd.images: image names must be non-empty strings");
  expect_error("[1, 2]\n", "t.yaml:1: top level must be a mapping, got a list");
  expect_error("just text\n", "t.yaml:1: top level must be a mapping, got 'just text'");
  expect_error("sandbox:\n  environment:\n    [a]: b\n",
               "t.yaml:3: sandbox.environment: keys must be strings");
}

static void test_nulls_are_empty(void **state)
{
  struct sbx_config *cfg =
      load("sandbox:\n  environment:\n  mounts: ~\nsbxd:\n  volume_roots:\n  images:\n");
  assert_int_equal(cfg->n_environment, 0);
  assert_int_equal(cfg->n_mounts, 0);
  assert_int_equal(cfg->n_volume_roots, 0);
  assert_int_equal(cfg->n_images, 0);
  sbx_config_free(cfg);
}

static void test_ranges(void **state)
{
  expect_error("sandbox:\n  idle_timeout: -1\n",
               "t.yaml:2: sandbox.idle_timeout: must be non-negative, got '-1'");
  expect_error("sandbox:\n  replicas: 0\n",
               "t.yaml:2: sandbox.replicas: must be positive, got '0'");
  expect_error("sandbox:\n  replicas: -3\n",
               "t.yaml:2: sandbox.replicas: must be positive, got '-3'");
  expect_error("sandbox:\n  bash_command_timeout: 0\n",
               "t.yaml:2: sandbox.bash_command_timeout: must be positive, got '0'");
  expect_error("sandbox:\n  cpus: -0.5\n",
               "t.yaml:2: sandbox.cpus: must be non-negative, got '-0.5'");
  expect_error("sandbox:\n  request_timeout: 0.0\n",
               "t.yaml:2: sandbox.request_timeout: must be positive, got '0.0'");
  expect_error("sandbox:\n\n  sandbox_timeout: -5\n",
               "t.yaml:3: sandbox.sandbox_timeout: sandbox.sandbox_timeout must be non-negative");
  expect_error("sandbox:\n  sandbox_timeout: -99999999999999999999\n",
               "t.yaml:2: sandbox.sandbox_timeout: sandbox.sandbox_timeout must be non-negative");
  expect_error("sandbox:\n  replicas: 2147483648\n",
               "t.yaml:2: sandbox.replicas: must be at most 2147483647, got '2147483648'");
  expect_error("sandbox:\n  bash_output_max_chars: 99999999999999999999\n",
               "t.yaml:2: sandbox.bash_output_max_chars: must be at most 9223372036854775807, "
               "got '99999999999999999999'");
  expect_error("sandbox:\n  ready_timeout: 1e300\n",
               "t.yaml:2: sandbox.ready_timeout: must be at most 2147483647, got '1e300'");
  expect_error("sandbox:\n  ready_timeout: 1e999\n",
               "t.yaml:2: sandbox.ready_timeout: must be at most 2147483647, got '1e999'");
  expect_error("sandbox:\n  output_max_bytes: 0\n",
               "t.yaml:2: sandbox.output_max_bytes: must be positive, got '0'");
  expect_error("sandbox:\n  disk_mib: -1\n",
               "t.yaml:2: sandbox.disk_mib: must be non-negative, got '-1'");
  expect_error("sandbox:\n  disk_mib: 8796093022208\n",
               "t.yaml:2: sandbox.disk_mib: must be at most 8796093022207, got '8796093022208'");
  expect_error("sandbox:\n  image_max_mib: 0\n",
               "t.yaml:2: sandbox.image_max_mib: must be positive, got '0'");
  expect_error("sandbox:\n  image_min_free_mib: -1\n",
               "t.yaml:2: sandbox.image_min_free_mib: must be non-negative, got '-1'");
  expect_error("sbxd:\n  max_sandbox_timeout: 0\n",
               "t.yaml:2: sbxd.max_sandbox_timeout: must be positive, got '0'");

  struct sbx_config *cfg = load("sandbox:\n  replicas: 2147483647\n  pids: 0\n  cpus: -0\n");
  assert_int_equal(cfg->replicas, 2147483647);
  assert_int_equal(cfg->pids, 0);
  assert_true(cfg->cpus == 0);
  sbx_config_free(cfg);
}

static void test_bad_env_key(void **state)
{
  expect_error("sandbox:\n  environment:\n    OK: 1\n    1BAD: x\n",
               "t.yaml:4: sandbox.environment: extra_env key '1BAD' is not a valid POSIX "
               "environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)");
  expect_error("sandbox:\n  environment:\n    \"A-B\": x\n",
               "t.yaml:3: sandbox.environment: extra_env key 'A-B' is not a valid POSIX "
               "environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)");
  expect_error("sandbox:\n  environment:\n    \"A\\nB\": x\n",
               "t.yaml:3: sandbox.environment: extra_env key 'A\\x0aB' is not a valid POSIX "
               "environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)");
  expect_error("sandbox:\n  environment:\n    \"\": x\n",
               "t.yaml:3: sandbox.environment: extra_env key '' is not a valid POSIX "
               "environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)");
}

static void test_missing_var(void **state)
{
  expect_error("sandbox:\n  environment:\n    TOKEN: $SBX_TEST_MISSING\n",
               "t.yaml:3: sandbox.environment.TOKEN: Environment variable SBX_TEST_MISSING not "
               "found for config value $SBX_TEST_MISSING");
  expect_error("sandbox:\n  api_key: \"$SBX_TEST_MISSING\"\n",
               "t.yaml:2: sandbox.api_key: Environment variable SBX_TEST_MISSING not found for "
               "config value $SBX_TEST_MISSING");
  expect_error("sandbox:\n  mounts:\n    - host_path: $SBX_TEST_MISSING\n      container_path: "
               "/x\n",
               "t.yaml:3: sandbox.mounts[0].host_path: Environment variable SBX_TEST_MISSING "
               "not found for config value $SBX_TEST_MISSING");
  expect_error("sandbox:\n  replicas: $SBX_TEST_MISSING\n",
               "t.yaml:2: sandbox.replicas: Environment variable SBX_TEST_MISSING not found for "
               "config value $SBX_TEST_MISSING");
}

static void test_var_resolution(void **state)
{
  setenv("SBX_TEST_VAR", "$HOME-literal", 1);
  setenv("SBX_TEST_EMPTY", "", 1);
  setenv("SBX_TEST_NUM", "7", 1);
  setenv("SBX_TEST_DIR", "/tmp", 1);
  struct sbx_config *cfg = load("sandbox:\n"
                                "  replicas: $SBX_TEST_NUM\n"
                                "  image: $SBX_TEST_VAR\n"
                                "  api_key: $SBX_TEST_VAR\n"
                                "  environment:\n"
                                "    SECRET_ONE: $SBX_TEST_VAR\n"
                                "    QUOTED: \"$SBX_TEST_NUM\"\n"
                                "    EMPTY: $SBX_TEST_EMPTY\n"
                                "    PLAIN: no$dollar\n"
                                "  mounts:\n"
                                "    - host_path: $SBX_TEST_DIR\n"
                                "      container_path: /work\n"
                                "sbxd:\n"
                                "  api_key: $SBX_TEST_EMPTY\n");
  assert_int_equal(cfg->replicas, 7);
  assert_string_equal(cfg->image, "$HOME-literal");
  assert_string_equal(cfg->api_key, "$HOME-literal");
  assert_string_equal(cfg->environment[0].value, "$HOME-literal");
  assert_true(cfg->environment[0].secret);
  assert_string_equal(cfg->environment[1].value, "7");
  assert_true(cfg->environment[1].secret);
  assert_string_equal(cfg->environment[2].value, "");
  assert_true(cfg->environment[2].secret);
  assert_string_equal(cfg->environment[3].value, "no$dollar");
  assert_false(cfg->environment[3].secret);
  assert_string_equal(cfg->mounts[0].host_path, "/tmp");
  assert_null(cfg->server_api_key);
  sbx_config_free(cfg);

  setenv("SBX_TEST_NUM", "abc", 1);
  expect_error("sandbox:\n  replicas: $SBX_TEST_NUM\n",
               "t.yaml:2: sandbox.replicas: expected an integer, got 'abc' (from $SBX_TEST_NUM)");
  unsetenv("SBX_TEST_VAR");
  unsetenv("SBX_TEST_EMPTY");
  unsetenv("SBX_TEST_NUM");
  unsetenv("SBX_TEST_DIR");
}

static void test_mounts(void **state)
{
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: "
               "/mnt/user-data/outputs\n",
               "t.yaml:4: sandbox.mounts[0].container_path: must not be /mnt/user-data or under "
               "it, got '/mnt/user-data/outputs'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: "
               "//mnt/./user-data/\n",
               "t.yaml:4: sandbox.mounts[0].container_path: must not be /mnt/user-data or under "
               "it, got '/mnt/user-data'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: /x/../mnt\n",
               "t.yaml:4: sandbox.mounts[0].container_path: must not contain '..' segments, got "
               "'/x/../mnt'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: /.\n",
               "t.yaml:4: sandbox.mounts[0].container_path: must not be '/'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n      container_path: data\n",
               "t.yaml:4: sandbox.mounts[0].container_path: must be an absolute path, got 'data'");
  expect_error("sandbox:\n  mounts:\n    - host_path: tmp\n      container_path: /data\n",
               "t.yaml:3: sandbox.mounts[0].host_path: must be an absolute path, got 'tmp'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /nonexistent/sbx-test\n"
               "      container_path: /data\n",
               "t.yaml:3: sandbox.mounts[0].host_path: '/nonexistent/sbx-test' does not exist");
  expect_error("sandbox:\n  mounts:\n    - container_path: /data\n",
               "t.yaml:3: sandbox.mounts[0]: missing required key 'host_path'");
  expect_error("sandbox:\n  mounts:\n    - host_path: /tmp\n",
               "t.yaml:3: sandbox.mounts[0]: missing required key 'container_path'");
  expect_error("sandbox:\n  mounts:\n    - {host_path: /tmp, container_path: /d}\n"
               "    - {host_path: /, container_path: /d/}\n",
               "t.yaml:4: sandbox.mounts[1].container_path: '/d' is already used by "
               "sandbox.mounts[0]");
  expect_error("sandbox:\n  mounts:\n    - {host_path: /tmp, container_path: /d, read_only: 1}\n",
               "t.yaml:3: sandbox.mounts[0].read_only: expected a boolean (true/false, yes/no, "
               "on/off), got '1'");
}

static void test_aliases(void **state)
{
  expect_error("base: &b {replicas: 2}\nsandbox: *b\n",
               "t.yaml:1: base: aliases are not supported");
  expect_error("sandbox:\n  image: &img alpine\n",
               "t.yaml:2: sandbox.image: aliases are not supported");
  expect_error("x: [1, 2]\nmodels:\n  - name: a\n  - *a\n",
               "t.yaml:4: models[1]: aliases are not supported");
  expect_error("sandbox:\n  <<: *defaults\n", "t.yaml:2: sandbox.<<: aliases are not supported");
}

static void test_duplicates(void **state)
{
  expect_error("sandbox:\n  replicas: 2\n  image: x\n  replicas: 3\n",
               "t.yaml:4: sandbox.replicas: duplicate key");
  expect_error("sandbox: {}\nother: 1\nsandbox: {}\n", "t.yaml:3: sandbox: duplicate key");
  expect_error("sandbox:\n  environment:\n    B: 1\n    A: 2\n    B: 3\n    A: 4\n",
               "t.yaml:5: sandbox.environment.B: duplicate key");
  expect_error("models:\n  - {a: 1, \"a\": 2}\n", "t.yaml:2: models[0].a: duplicate key");
}

static void test_syntax_errors(void **state)
{
  expect_error("sandbox:\n  replicas: [1, 2\n",
               "t.yaml:3:1: YAML syntax error: did not find expected ',' or ']'");
  expect_error("sandbox:\n  a: b\n c: d\n",
               "t.yaml:3:2: YAML syntax error: did not find expected key");
  expect_error("sandbox:\n  image: \"unterminated\n",
               "t.yaml:3:1: YAML syntax error: found unexpected end of stream");
  expect_error("sandbox:\n\tx: 1\n",
               "t.yaml:2:1: YAML syntax error: found character that cannot start any token");
  expect_error("a: 1\n\x01\n", "t.yaml:2:1: YAML syntax error: control characters are not allowed");
  expect_error("a: 1\n---\nb: 2\n", "t.yaml:2: multiple YAML documents are not supported");
}

static void test_limits(void **state)
{
  /* 32 levels of nesting (the top-level mapping is the first) are accepted, 33 are not. */
  sbx_buf_t b = {0};
  for (int i = 0; i < 31; i++)
    sbx__buf_putc(&b, '[');
  for (int i = 0; i < 31; i++)
    sbx__buf_putc(&b, ']');
  cleanup_free char *ok = xasprintf("deep: %s\n", b.data);
  sbx__buf_free(&b);
  struct sbx_config *cfg = load(ok);
  sbx_config_free(cfg);
  for (int i = 0; i < 40; i++)
    sbx__buf_putc(&b, '[');
  cleanup_free char *deep = xasprintf("deep: %s\n", b.data);
  sbx__buf_free(&b);
  expect_error(deep, "t.yaml:1: deep[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]"
                     "[0][0][0][0][0][0][0][0][0][0][0]: nesting too deep (max 32 levels)");

  size_t big = 1024 * 1024 + 1;
  char *text = xmalloc(big + 1);
  memset(text, '#', big);
  text[big] = '\0';
  sbx_error_t err = NULL;
  assert_null(sbx_config_load_string("t.yaml", text, big, &err));
  assert_string_equal(err->msg, "t.yaml:1: file too large (max 1048576 bytes)");
  sbx_error_release(&err);
  text[0] = '\n';
  cfg = sbx_config_load_string("t.yaml", text, big - 1, &err);
  assert_non_null(cfg);
  sbx_config_free(cfg);
  free(text);

  expect_error("sandbox:\n  image: \"a\\0b\"\n",
               "t.yaml:2: sandbox.image: must not contain NUL characters");
}

static void test_load_file(void **state)
{
  char path[] = "/tmp/sbx-test-config-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *yaml = "sandbox:\n  replicas: 4\n  bogus: 1\n";
  assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t) strlen(yaml));
  close(fd);

  sbx_error_t err = NULL;
  assert_null(sbx_config_load(path, &err));
  cleanup_free char *want = xasprintf("%s:3: sandbox.bogus: unknown key", path);
  assert_string_equal(err->msg, want);
  sbx_error_release(&err);

  fd = open(path, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, yaml, 22), 22);
  close(fd);
  struct sbx_config *cfg = sbx_config_load(path, &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->replicas, 4);
  assert_string_equal(cfg->path, path);
  sbx_config_free(cfg);
  unlink(path);

  assert_null(sbx_config_load("/nonexistent/sbx.yaml", &err));
  assert_string_equal(
      err->msg, "/nonexistent/sbx.yaml: cannot read configuration: No such file or directory");
  assert_int_equal(err->kind, SBX_E_CONFIG);
  sbx_error_release(&err);
}

static void test_dump_round_trip(void **state)
{
  setenv("SBX_TEST_VAR", "$tarts-with-dollar", 1);
  struct sbx_config *cfg = load("sandbox:\n"
                                "  use: opensandbox\n"
                                "  replicas: 9\n"
                                "  bash_command_timeout: 0.1\n"
                                "  cpus: 1.25\n"
                                "  environment:\n"
                                "    FROM_VAR: $SBX_TEST_VAR\n"
                                "    OPENAI_API_KEY: sk-plain\n"
                                "    db_password: hunter2\n"
                                "    GITHUB_TOKEN: t\n"
                                "    MY_SECRET_X: s\n"
                                "    AWS_CREDENTIALS: c\n"
                                "    VISIBLE: \"quote\\\" back\\\\slash\\ttab\\nnl é\"\n"
                                "    NUMBERISH: 0012\n"
                                "  mounts:\n"
                                "    - host_path: /tmp\n"
                                "      container_path: /data\n"
                                "      read_only: yes\n"
                                "  api_key: topsecret\n"
                                "  domain: os.internal:8080\n"
                                "  use_server_proxy: on\n"
                                "sbxd:\n"
                                "  listen: 0.0.0.0:7000\n"
                                "  api_key: serverkey\n"
                                "  volume_roots: [/srv]\n"
                                "  images: {python:3.11: host, \"we\\\"ird\": host}\n");
  char *dump = sbx_config_dump(cfg);
  assert_non_null(dump);
  assert_null(strstr(dump, "topsecret"));
  assert_null(strstr(dump, "serverkey"));
  assert_null(strstr(dump, "sk-plain"));
  assert_null(strstr(dump, "hunter2"));
  assert_null(strstr(dump, "tarts-with-dollar"));
  assert_non_null(strstr(dump, "  api_key: \"***\"\n"));
  assert_non_null(strstr(dump, "    \"db_password\": \"***\"\n"));

  sbx_error_t err = NULL;
  struct sbx_config *again = sbx_config_load_string("dump", dump, strlen(dump), &err);
  if (again == NULL)
    print_error("%s\n---\n%s\n", err->msg, dump);
  assert_non_null(again);
  assert_string_equal(again->use, cfg->use);
  assert_string_equal(again->image, "python:3.11");
  assert_int_equal(again->replicas, 9);
  assert_true(again->bash_command_timeout == 0.1);
  assert_true(again->cpus == 1.25);
  assert_int_equal(again->n_environment, cfg->n_environment);
  for (size_t i = 0; i < cfg->n_environment; i++) {
    assert_string_equal(again->environment[i].key, cfg->environment[i].key);
    bool masked = i < 6;
    assert_string_equal(again->environment[i].value, masked ? "***" : cfg->environment[i].value);
    assert_false(again->environment[i].secret);
  }
  assert_string_equal(again->environment[6].value, "quote\" back\\slash\ttab\nnl é");
  assert_string_equal(again->environment[7].value, "0012");
  assert_int_equal(again->n_mounts, 1);
  assert_string_equal(again->mounts[0].host_path, "/tmp");
  assert_string_equal(again->mounts[0].container_path, "/data");
  assert_true(again->mounts[0].read_only);
  assert_string_equal(again->api_key, "***");
  assert_string_equal(again->domain, "os.internal:8080");
  assert_string_equal(again->protocol, "http");
  assert_true(again->use_server_proxy);
  assert_int_equal(again->sandbox_timeout, cfg->sandbox_timeout);
  assert_int_equal(again->memory_mib, cfg->memory_mib);
  assert_int_equal(again->output_max_bytes, cfg->output_max_bytes);
  assert_string_equal(again->listen, "0.0.0.0:7000");
  assert_string_equal(again->server_api_key, "***");
  assert_int_equal(again->n_volume_roots, 1);
  assert_string_equal(again->volume_roots[0], "/srv");
  assert_int_equal(again->max_sandbox_timeout, 86400);
  assert_int_equal(again->n_images, 2);
  assert_string_equal(again->images[0].name, "python:3.11");
  assert_string_equal(again->images[1].name, "we\"ird");
  assert_string_equal(again->images[1].target, "host");

  /* A dump of the dump is identical apart from the source comment. */
  char *dump2 = sbx_config_dump(again);
  const char *body1 = strstr(dump, "\nsandbox:"), *body2 = strstr(dump2, "\nsandbox:");
  assert_non_null(body1);
  assert_non_null(body2);
  assert_string_equal(body1, body2);
  free(dump2);
  sbx_config_free(again);
  free(dump);
  sbx_config_free(cfg);
  unsetenv("SBX_TEST_VAR");

  /* Defaults round-trip too, with no api_key lines at all. */
  cfg = sbx_config_new_default();
  dump = sbx_config_dump(cfg);
  assert_null(strstr(dump, "api_key"));
  again = sbx_config_load_string("dump", dump, strlen(dump), &err);
  assert_non_null(again);
  check_defaults(again);
  sbx_config_free(again);
  free(dump);
  sbx_config_free(cfg);
  assert_null(sbx_config_dump(NULL));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_defaults, clear_env),
      cmocka_unit_test_setup(test_defaults_from_env, clear_env),
      cmocka_unit_test_setup(test_full, clear_env),
      cmocka_unit_test_setup(test_opensandbox, clear_env),
      cmocka_unit_test_setup(test_deerflow_keys_ignored, clear_env),
      cmocka_unit_test_setup(test_deerflow_network_mapping, clear_env),
      cmocka_unit_test_setup(test_unknown_key, clear_env),
      cmocka_unit_test_setup(test_wrong_type, clear_env),
      cmocka_unit_test_setup(test_nulls_are_empty, clear_env),
      cmocka_unit_test_setup(test_ranges, clear_env),
      cmocka_unit_test_setup(test_bad_env_key, clear_env),
      cmocka_unit_test_setup(test_missing_var, clear_env),
      cmocka_unit_test_setup(test_var_resolution, clear_env),
      cmocka_unit_test_setup(test_mounts, clear_env),
      cmocka_unit_test_setup(test_aliases, clear_env),
      cmocka_unit_test_setup(test_duplicates, clear_env),
      cmocka_unit_test_setup(test_syntax_errors, clear_env),
      cmocka_unit_test_setup(test_limits, clear_env),
      cmocka_unit_test_setup(test_load_file, clear_env),
      cmocka_unit_test_setup(test_dump_round_trip, clear_env),
  };
  return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
