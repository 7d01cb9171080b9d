#!/usr/bin/env bash
# `tessera experiment serve` against hostile clients, over raw sockets (no browser needed):
#  - a port another server holds is refused (was: both bound it, requests alternated);
#  - a missing store is refused (was: an empty one was created);
#  - 50 idle or half-sent connections do not starve a real request (was: 30 s);
#  - a request for another Host (DNS rebinding) is refused; overlapping ranges are refused;
#  - every answer carries Content-Security-Policy (frame-ancestors 'none') and nosniff;
#  - an error names no path and holds no exception text; one bad record does not empty the list;
#  - binding a non-loopback address warns that there is no authentication.
set -uo pipefail
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"
work="$(mktemp -d)"
trap 'kill ${pids:-} 2>/dev/null; pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "$0")/experiment_setup.sh"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
cat > one.yaml <<'YAML'
name: served
entrypoint: builtin:gpt2
hyperparameters: {config: small.json, train.eval_iters: 1}
searcher: {name: single, metric: validation_loss, max_length: {batches: 2}}
min_validation_period: {batches: 2}
YAML
"$tessera" experiment create one.yaml --follow >/dev/null 2>&1 || { echo "FAIL: no experiment"; exit 1; }
"$tessera" experiment create one.yaml --follow >/dev/null 2>&1 || { echo "FAIL: no experiment 2"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tessera" experiment serve --port "$port" 2> serve.err & pids="$!"
for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break; sleep 0.1; done

# A second server on the same port, with another store.
mkdir -p other && cp -r "$TESSERA_STORE"/. other/
if timeout 10 "$tessera" experiment serve --port "$port" --store other 2> second.err; then
  fail "a second server bound port $port"
elif grep -q "cannot listen on 127.0.0.1:$port (another server holds that port" second.err; then
  echo "ok   a port another server holds is refused"
else fail "second server on a held port: $(tail -1 second.err)"; fi
if "$tessera" experiment serve --port 1 --store "$work/no-store" 2> nostore.err; then
  fail "a missing store was served"
elif grep -q "no experiment store in '$work/no-store'" nostore.err && [ ! -e "$work/no-store" ]; then
  echo "ok   a missing store is refused, and not created"
else fail "missing store: $(tail -1 nostore.err)"; fi

python3 - "$port" "$work" <<'PY' || fails=$((fails + 1))
import json, socket, sqlite3, sys, time
port, work = int(sys.argv[1]), sys.argv[2]
def request(raw, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw.encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
    return int(lines[0].split()[1]), headers, body.decode(errors="replace")
def get(path, host=f"127.0.0.1:{port}", extra=""):
    return request(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n")
bad = []
status, headers, body = get("/")
csp = headers.get("content-security-policy", "")
if status != 200 or "frame-ancestors 'none'" not in csp or "script-src 'self'" not in csp \
   or headers.get("x-content-type-options") != "nosniff" or "<script>" in body:
    bad.append(f"page headers: {status} {headers}")
for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
    status, _, body = get("/api/experiments", host=host)
    if status != 421: bad.append(f"Host {host}: status {status}")
for host in (f"localhost:{port}", f"LOCALHOST:{port}"):
    if get("/api/experiments", host=host)[0] != 200: bad.append(f"Host {host} refused")
status, _, _ = get("/static/chart.min.js", extra="Range: bytes=0-100000,0-100000,0-100000\r\n")
if status != 416: bad.append(f"overlapping ranges: status {status}")
status, headers, body = get("/static/chart.min.js", extra="Range: bytes=0-99\r\n")
if status != 206 or len(body) != 100: bad.append(f"one range: {status}, {len(body)} bytes")
status, _, body = get("/api/experiments/99")
if status != 404 or work in body or "experiments.db" in body or "no experiment 99" not in body:
    bad.append(f"unknown experiment: {status} {body}")
# 50 idle connections (half of them with a request cut short), then a real request.
idle = []
for i in range(50):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if i % 2: s.sendall(b"GET /api/experiments HTTP/1.1\r\nHost: x")
    idle.append(s)
time.sleep(0.2)
t0 = time.time()
status, _, body = get("/api/experiments")
took = time.time() - t0
if status != 200 or took > 2.0: bad.append(f"with 50 idle connections: {status} after {took:.1f} s")
else: print(f"ok   with 50 idle connections open a request was answered in {took * 1000:.0f} ms")
for s in idle: s.close()
# One bad record: a trial whose hyperparameters are not JSON.
db = sqlite3.connect(f"{work}/store/experiments.db")
db.execute("UPDATE trials SET hparams = '{not json' WHERE experiment_id = 1"); db.commit(); db.close()
status, _, body = get("/api/experiments")
listed = json.loads(body)["experiments"] if status == 200 else []
if len(listed) != 2 or "error" not in listed[0] or listed[1].get("trials") != 1:
    bad.append(f"one bad record: {status} {body}")
status, _, body = get("/api/experiments/1")
if status != 500 or work in body or "not json" in body: bad.append(f"bad record's detail: {status} {body}")
for b in bad: print("FAIL", b)
if not bad: print("ok   Host, ranges, headers, error bodies and a bad record")
sys.exit(1 if bad else 0)
PY
kill $pids 2>/dev/null; wait 2>/dev/null

port2=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 3 "$tessera" experiment serve --host 0.0.0.0 --port "$port2" 2> any.err
grep -q "warning: experiment serve: listening on every address: other machines can reach it, and the page has no authentication" any.err &&
  echo "ok   a non-loopback address warns that there is no authentication" || fail "no warning for 0.0.0.0: $(head -2 any.err)"
echo "$fails failed"
[ "$fails" = 0 ]
