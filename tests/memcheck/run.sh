#!/usr/bin/env bash
# valgrind memcheck over the plain (non-sanitizer) build, which ASan cannot share a process
# with: every unit-test binary; the sbx CLI's verbs on a scratch home, on their success and
# error paths; and sbxd serving a short HTTP session (lifecycle, commands, files, metrics),
# stopped with SIGTERM. Fails on any memcheck error or any definitely or indirectly lost block.
#
#   tests/memcheck/run.sh            (SBX_BUILD: the build folder, default ./build)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=$(realpath "${SBX_BUILD:-build}")
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed (make deps)" >&2; exit 1; }
VG=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
  --show-leak-kinds=definite,indirect)
W=$(mktemp -d /tmp/sbx-memcheck.XXXXXX)
H=$W/home
SBXD_PID=
cleanup() {
  [ -n "$SBXD_PID" ] && kill -9 "$SBXD_PID" 2>/dev/null
  "$B/sbx" --home "$H" down >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
export SBX_INIT=$B/sbx-init
fails=0
# With -q, memcheck's findings are the log's "==PID==" lines; "--PID--" lines are valgrind's own
# notes (it does not know pidfd_open: sbx falls back to kill, which is tested elsewhere).
reported() { grep -q '^==[0-9]*==' "$1"; }
# check EXPECTED_STATUS DESCRIPTION CMD...: runs CMD under memcheck (stdin from $W/in)
check() {
  local want=$1 what=$2
  shift 2
  local rc=0
  "${VG[@]}" --log-file="$W/vg.log" "$@" <"$W/in" >"$W/out" 2>"$W/err" || rc=$?
  if [ "$rc" = 99 ] || reported "$W/vg.log" || [ "$rc" != "$want" ]; then
    echo "memcheck: FAIL $what (exit $rc, expected $want)"
    cat "$W/vg.log" "$W/err" | head -60
    fails=$((fails + 1))
  else
    echo "memcheck: ok   $what"
  fi
}
echo "some text" >"$W/in"

for t in "$B"/tests/test_*; do
  check 0 "unit $(basename "$t")" "$t"
done

S=("$B/sbx" --home "$H")
check 0 "sbx exec (create)" "${S[@]}" exec -t m -- 'echo hi; echo err >&2'
check 3 "sbx exec (warm, exit 3)" "${S[@]}" exec -t m -e K=V --json -- 'echo $K; exit 3'
check 124 "sbx exec (timeout)" "${S[@]}" exec -t m --timeout 1 -- 'sleep 5'
check 0 "sbx write" "${S[@]}" write -t m /mnt/user-data/workspace/a/b.txt
check 0 "sbx write --append" "${S[@]}" write -t m --append /mnt/user-data/workspace/a/b.txt
check 0 "sbx upload" "${S[@]}" upload -t m /mnt/user-data/workspace/bin.dat
check 0 "sbx read" "${S[@]}" read -t m /mnt/user-data/workspace/a/b.txt --start 2 --end 9
check 1 "sbx read (missing)" "${S[@]}" read -t m /mnt/user-data/workspace/none
check 1 "sbx read (traversal)" "${S[@]}" read -t m /mnt/user-data/../etc/passwd
check 0 "sbx download" "${S[@]}" download -t m /mnt/user-data/workspace/bin.dat -o "$W/dl"
check 0 "sbx ls" "${S[@]}" ls -t m /mnt/user-data --json
check 0 "sbx glob" "${S[@]}" glob -t m /mnt/user-data '**/*.txt' --json
check 0 "sbx grep" "${S[@]}" grep -t m /mnt/user-data 'so.e' --json
check 1 "sbx grep (bad regex)" "${S[@]}" grep -t m /mnt/user-data '('
check 0 "sbx ps" "${S[@]}" ps --json
check 0 "sbx release" "${S[@]}" release -t m
check 0 "sbx gc" "${S[@]}" gc
check 0 "sbx run" "${S[@]}" run -- true
# sbx mcp: an MCP session over stdio (tools, resources, bad lines); the end of input cancels
# what still runs (its command killed) and parks the sandbox
cp "$W/in" "$W/in.keep"
cat >"$W/in" <<'MCP'
{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"vg","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/mnt/user-data/outputs/r.md","content":"# r"}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"grep","arguments":{"path":"/mnt/user-data","pattern":"so.e"}}}
{"jsonrpc":"2.0","id":5,"method":"resources/list"}
{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"sleep 30"},"_meta":{"progressToken":1}}}
{not json
{"jsonrpc":"2.0","id":7,"method":"nope"}
{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}
MCP
check 0 "sbx mcp" "${S[@]}" mcp -t m
mv "$W/in.keep" "$W/in"
check 0 "sbx rm" "${S[@]}" rm -t m
check 2 "sbx (usage error)" "${S[@]}" exec -- true
check 1 "sbx pull (bad reference)" "${S[@]}" pull 'Bad/Ref'
check 1 "sbx pull (nothing listening)" "${S[@]}" pull 127.0.0.1:1/x:1
printf 'sandbox:\n  replicas: -1\n' >"$W/bad.yaml"
check 1 "sbx config check (bad)" "${S[@]}" --config "$W/bad.yaml" config check
printf 'sandbox:\n  environment:\n    TOKEN: $HOME\n  registries:\n    x.io: {username: u, password: $HOME}\n  registry_mirrors: [m.io]\n' >"$W/good.yaml"
check 0 "sbx config show" "${S[@]}" --config "$W/good.yaml" config show
check 0 "sbx down" "${S[@]}" down

# sbxd: a short session over HTTP, then SIGTERM; memcheck reports when it exits
"${VG[@]}" --log-file="$W/vg-sbxd.log" "$B/sbxd" --home "$H" --listen 127.0.0.1:0 2>"$W/sbxd.err" &
SBXD_PID=$!
rc=0
/usr/bin/python3 - "$W/sbxd.err" <<'PY' || rc=$?
import http.client, json, re, sys, time
deadline = time.time() + 60
port = None
while port is None and time.time() < deadline:
    m = re.search(r'"listening".*?127\.0\.0\.1:(\d+)', open(sys.argv[1]).read())
    port = int(m.group(1)) if m else time.sleep(0.2)
assert port, "sbxd did not start under valgrind"
def req(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
    c.request(method, path, body, h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data
st, d = req("POST", "/v1/sandboxes", {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
            "resourceLimits": {"cpu": "1", "memory": "512Mi"}, "timeout": 600, "metadata": {"k": "v"}})
assert st == 202, d
sid = json.loads(d)["id"]
st, d = req("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)
tok = {"X-EXECD-ACCESS-TOKEN": json.loads(d)["headers"]["X-EXECD-ACCESS-TOKEN"]}
p = "/direct/%s/44772" % sid
st, d = req("POST", p + "/command", {"command": "echo out; echo err >&2; exit 2"}, tok)
assert st == 200 and b'"error"' in d, d
st, d = req("POST", p + "/command", {"command": "sleep 5", "timeout": 500}, tok)
assert st == 200, d
b = "--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\":\"/tmp/f.txt\"}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nline1\nline2\n\r\n--B--\r\n"
st, d = req("POST", p + "/files/upload", b, dict(tok, **{"Content-Type": "multipart/form-data; boundary=B"}))
assert st == 200, d
st, d = req("GET", p + "/files/download?path=/tmp/f.txt", None, dict(tok, Range="bytes=0-3"))
assert st == 206 and d == b"line", d
for path in ("/files/info?path=/tmp/f.txt", "/files/search?path=/tmp&pattern=*.txt",
             "/directories/list?path=/tmp&depth=1", "/metrics", "/ping", "/files/info?path=/none"):
    req("GET", p + path, None, tok)
for path in ("/v1/sandboxes?metadata=k%3Dv", "/v1/sandboxes?metadata=%3Dx", "/v1/sandboxes/" + sid,
             "/v1/sandboxes/nope", "/health"):
    req("GET", path)
req("POST", "/v1/contract/acquire", {"user": "u", "thread": "t"})
st, d = req("POST", "/v1/sandboxes", b"{not json")
assert 400 <= st < 500, d
# MCP at /mcp: a session, a tool call answered with JSON and one streamed with progress, a bad
# message, then DELETE
ini = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
       "capabilities": {}, "clientInfo": {"name": "vg", "version": "1"}}}
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
c.request("POST", "/mcp", json.dumps(ini), {"Content-Type": "application/json", "Sbx-Thread": "mcp"})
r = c.getresponse()
r.read()
assert r.status == 200
mh = {"Content-Type": "application/json", "Mcp-Session-Id": r.getheader("Mcp-Session-Id")}
c.close()
for body in ('{"jsonrpc":"2.0","method":"notifications/initialized"}',
             '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo hi"}}}',
             '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"sleep 1.2"},"_meta":{"progressToken":1}}}',
             '{"jsonrpc":"2.0","id":4,"method":"resources/list"}', '{not json'):
    st, d = req("POST", "/mcp", body, mh)
    assert st in (200, 202, 400), (st, d)
st, _ = req("DELETE", "/mcp", None, mh)
assert st == 204
st, _ = req("DELETE", "/v1/sandboxes/" + sid)
assert st == 204
PY
kill -TERM "$SBXD_PID"
src=0
wait "$SBXD_PID" || src=$?
SBXD_PID=
if [ "$rc" != 0 ] || [ "$src" = 99 ] || reported "$W/vg-sbxd.log"; then
  echo "memcheck: FAIL sbxd (session $rc, sbxd exit $src)"
  cat "$W/vg-sbxd.log" | head -80
  tail -5 "$W/sbxd.err"
  fails=$((fails + 1))
else
  echo "memcheck: ok   sbxd session"
fi
if [ "$fails" != 0 ]; then
  echo "memcheck: $fails failed"
  exit 1
fi
echo "memcheck: clean"
