#!/bin/bash
# The guest's job (boot.sh's command): checks.sh, then the integration suite against the release
# build, as root:  suite.sh SOURCE_DIR BUILD_DIR quick|full
#   quick  the linux backend's contract, limits and lifecycle tests plus test_hosts.py (the
#          subset CI runs: under TCG ~7x slower than on the host)
#   full   the whole integration suite
set -u
src=$1 build=$2 mode=${3:-quick}
[[ -d /run/systemd/system ]] && systemd-analyze 2>/dev/null | head -1
rc=0
bash "$src/tests/guest/checks.sh" "$build" || rc=1
case $mode in
  quick) tests=(tests/integration/test_lifecycle.py tests/integration/test_exec.py
                tests/integration/test_hosts.py "tests/integration/test_sbxd_http.py::test_spares_make_creates_fast_and_keep_managed_semantics") ;;
  full) tests=(tests/integration) ;;
  *) echo "suite.sh: unknown mode $mode" >&2; exit 2 ;;
esac
cd "$src"
SBX_BUILD=$build SBX_SOURCE=$src /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  -o cache_dir=/tmp/pytest-cache --junitxml=/mnt/out/junit.xml "${tests[@]}" || rc=1
echo "suite.sh: $mode rc $rc"
exit $rc
