#!/usr/bin/env bash
# `tessera experiment serve` in a real headless browser (Debian's chromium): a finished ASHA
# experiment of 4 trials; the page lists it, shows one row per trial with its state, and draws
# the training and validation charts (Chart.js, served by tessera itself); the API answers an
# unknown experiment with a JSON error, and a stale link (#experiment=99) shows a message under
# the page's Content-Security-Policy (no inline code). The screenshot is kept as $3 (the test's artefact).
# Skipped (exit 77) without chromium.
set -euo pipefail
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"; shot="$3"
browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || { echo "no chromium: skipped"; exit 77; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
export HOME="$work"
source "$(dirname "$0")/experiment_setup.sh"
python3 - <<'PY'
open("asha.yaml", "w").write("""name: browser-asha
entrypoint: builtin:gpt2
hyperparameters:
  config: small.json
  train.eval_iters: 2
  optimizer.params.lr: {type: log, minval: -3.5, maxval: -1.5}
searcher:
  name: async_halving
  metric: validation_loss
  max_trials: 4
  num_rungs: 2
  divisor: 2
  max_length: {batches: 16}
  max_concurrent_trials: 2
min_validation_period: {batches: 8}
scheduling_unit: 4
resources: {max_slots: 2}
""")
PY
"$tessera" experiment create asha.yaml --follow > /dev/null 2> create.err
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tessera" experiment serve --port "$port" 2> serve.err &
server=$!
get() {  # URL path -> body (an HTTP error's body too)
  python3 -c "
import sys, urllib.request, urllib.error
try: print(urllib.request.urlopen('http://127.0.0.1:$port' + sys.argv[1], timeout=10).read().decode())
except urllib.error.HTTPError as e: print(e.read().decode())" "$1"
}
for _ in $(seq 100); do get /api/experiments > list.json 2> /dev/null && break; sleep 0.1; done
grep -q '"name":"browser-asha"' list.json
get /api/experiments/99 | grep -q '"error":".*no experiment 99'
get /static/chart.min.js > chart.js
[ "$(wc -c < chart.js)" -gt 100000 ] && grep -q "Chart.js" chart.js
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
       --user-data-dir="$work/profile" --virtual-time-budget=8000 --window-size=1280,1000)
"$browser" "${flags[@]}" --dump-dom "http://127.0.0.1:$port/#experiment=1" > dom.html 2> browser.err
"$browser" "${flags[@]}" --screenshot="$work/page.png" "http://127.0.0.1:$port/#experiment=1" \
  > /dev/null 2>> browser.err
cp "$work/page.png" "$shot"
# A stale link (an experiment that is not there) shows a message, not a blank page.
"$browser" "${flags[@]}" --dump-dom "http://127.0.0.1:$port/#experiment=99" > stale.html 2>> browser.err
python3 - <<'PY'
import re
dom = open("dom.html").read()
assert 'data-charts="rendered"' in dom, "the charts were not drawn:\n" + dom[:2000]
trials = re.findall(r'<tr class="trial">(.*?)</tr>', dom)
assert len(trials) == 4, f"{len(trials)} trial rows"
assert all("COMPLETED" in t for t in trials), trials
assert re.search(r'<tr class="experiment[^"]*"[^>]*>.*?browser-asha', dom), "no experiment row"
assert "Experiment 1 (browser-asha): COMPLETED" in dom
print(f"page: 1 experiment, {len(trials)} trial rows, charts rendered")
stale = open("stale.html").read()
assert re.search(r'<p id="message"[^>]*>no experiment 99 in this store</p>', stale), stale[:2000]
assert 'data-charts="none"' in stale and "browser-asha" in stale  # the list is still there
print("a stale link (#experiment=99): the message, and the list of experiments")
PY
python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read(24)
assert b[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
w, h = struct.unpack('>II', b[16:24]); assert (w, h) == (1280, 1000), (w, h)
print(f'screenshot {sys.argv[1]}: {w}x{h}')" "$shot"
echo ok
