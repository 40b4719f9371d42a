#!/usr/bin/env bash
# The sbxd and exec suites (tests/integration/test_sbxd_http.py, test_exec.py and the SDK tests)
# over the ThreadSanitizer build (make tsan). Every TSan report, from sbxd, the sbx CLI or
# sbx-init, fails the run, whether or not the test that provoked it noticed: the reports go to
# files (log_path) that are checked at the end, not to a stderr some harness may not read.
# sbx-init runs inside the sandbox, where the report folder does not exist: it is started
# through a wrapper ($SBX_INIT) that points its stderr, which it keeps for its whole life and
# its commands never see, at a file of the host, and its reports go there.
#
#   tests/tsan/run.sh          (SBX_BUILD: the TSan build folder, default ./build-tsan;
#                               TSAN_PYTEST_ARGS: extra pytest arguments, e.g. "-k exec";
#                               TSAN_SUITES: other pytest files instead of the two;
#                               TSAN_KEEP=1 keeps the report folder)
set -uo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
B=$(realpath "${SBX_BUILD:-build-tsan}")
if ! nm "$B/sbxd" 2>/dev/null | grep " __tsan_init$" >/dev/null; then
  echo "tsan: $B/sbxd is not a ThreadSanitizer build (make tsan)" >&2
  exit 1
fi
R=$(mktemp -d /tmp/sbx-tsan.XXXXXX)
trap '[ -n "${TSAN_KEEP:-}" ] && echo "tsan: kept $R" || rm -rf "$R"' EXIT
# halt_on_error=0: one run lists every race (the report files decide); second_deadlock_stack
# makes lock-order reports show both acquisitions.
export TSAN_OPTIONS="log_path=$R/report suppressions=$SRC/tests/tsan/suppressions.txt halt_on_error=0 second_deadlock_stack=1 history_size=4"
# Positive control: a racy program, same options: its report must land in $R.
cc -std=c17 -g -fsanitize=thread tests/tsan/race.c -o "$R/race" -lpthread
"$R/race" >/dev/null 2>&1
if ! grep -qs '^WARNING: ThreadSanitizer: data race' "$R"/report.*; then
  echo "tsan: FAIL the positive control's race was not reported in $R" >&2
  exit 1
fi
rm -f "$R"/report.* "$R/race"
# verbosity=1: each sbx-init announces itself, so the run can tell its stderr reached us.
# ulimit -f: a test may start the CLI with a small file size limit (test_exec.py's
# test_resource_limits_do_not_depend_on_the_launcher: 1 MB), which the launcher inherits until it
# sets its own: once this run's sbx-init.stderr had grown past it, the append below killed the
# launcher with SIGXFSZ before it read its request ("Connection reset by peer"), in a full run
# only. The sandbox's own limits are set by the launcher whatever ours are.
cat >"$R/sbx-init" <<EOS
#!/bin/sh
ulimit -f unlimited 2>/dev/null
exec 2>>"$R/sbx-init.stderr"
TSAN_OPTIONS="\$TSAN_OPTIONS log_path=stderr verbosity=1" exec "$B/sbx-init" "\$@"
EOS
chmod 0755 "$R/sbx-init"
# sbx-net is looked for next to sbx-init (or in $SBX_NET): the build's own
export SBX_BUILD=$B SBX_SOURCE=$SRC SBX_INIT=$R/sbx-init SBX_NET=$B/sbx-net
fails=0
"${PYTHON3:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider ${TSAN_PYTEST_ARGS:-} \
  ${TSAN_SUITES:-tests/integration/test_sbxd_http.py tests/integration/test_exec.py} ||
  fails=$((fails + 1))
tests/sdk/run.sh || fails=$((fails + 1))
reports=$(find "$R" -name 'report.*' -type f | sort)
if ! grep -qs 'Running under ThreadSanitizer' "$R/sbx-init.stderr"; then
  echo "tsan: no sbx-init ran under ThreadSanitizer with its stderr in $R" >&2
  fails=$((fails + 1))
fi
if grep -Eqs 'WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|ThreadSanitizer: CHECK failed|Dying' \
  "$R/sbx-init.stderr"; then
  reports="$reports $R/sbx-init.stderr"
fi
if [ -n "$reports" ]; then
  n=$(cat $reports | grep -c '^WARNING: ThreadSanitizer')
  echo "tsan: $n report(s):"
  for f in $reports; do
    echo "--- $(basename "$f")"
    grep -v -e 'Installed the sigaction' -e 'Running under ThreadSanitizer' "$f"
  done
  fails=$((fails + 1))
fi
if [ "$fails" -ne 0 ]; then
  echo "tsan: FAIL"
  exit 1
fi
echo "tsan: ok (no reports)"
