#!/usr/bin/env bash
# GPT-2 byte-level BPE on real-sized text (tests/fixtures/tokenizers/gpt2-bpe, trained by Hugging
# Face's tokenizers):
#  - "linear": tokenising 4 MB takes less than 6x the time of 1 MB, in one run (linear is 4x;
#    the pre-fix tokenizer, which had PCRE2 validate the whole text at every match, was
#    quadratic: 16x, and 84 s for 1 MB);
#  - "hf" (with $3, a Python that has `tokenizers`; else skipped): the same ids as Hugging Face's
#    ByteLevel BPE on a 2 MB mixed corpus (ASCII, accents, CJK, emoji, long whitespace runs);
#  - "signal": SIGTERM while `tessera train` tokenises a 128 MB corpus (progress printed) stops it
#    after the chunks in progress: exit status 143, the byte it stopped at, nothing cached.
set -euo pipefail
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"; python="${3:-}"; part="${4:-linear}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
v="$fixtures/tokenizers/gpt2-bpe"
python3 - "$fixtures/corpus.txt" "$work" <<'PY'
import random, sys
random.seed(1)
readme, work = open(sys.argv[1]).read(), sys.argv[2]
parts = ["Ünïcödé àccents ÉÇ naïve café ", "漢字かなカナ한국어 中文文本 ", "emoji 😀🎉🚀👍🏽 ",
         " " * 300 + "\n", "\t\t  \n\n   x  \n", "don't we'll they're I'm 12345 3.14159 "]
out, size = [], 0
while size < 4_000_000:
    p = random.choice(parts) if random.random() < 0.3 else readme[random.randrange(len(readme) - 2000):][:2000]
    out.append(p); size += len(p.encode())
text = "".join(out).encode()
for name, n in (("c1", 1_000_000), ("c2", 2_000_000), ("c4", 4_000_000)):
    open(f"{work}/{name}.txt", "wb").write(text[:n].decode("utf-8", "ignore").encode())
PY
bench() { "$tessera" bench tokenizer --vocab "$v/vocab.json" --merges "$v/merges.txt" --corpus "$1" --json "${@:2}"; }
if [ "$part" = linear ]; then
  [ -z "${TESSERA_SANITIZED:-}" ] || { echo "a timing ratio: release build only (skipped)"; exit 77; }
  # One thread, best of 3 runs each: a 1 MB run lasts some 30 ms, where a scheduler hiccup
  # alone would move the ratio.
  for n in c1 c4; do
    for r in 1 2 3; do bench "$work/$n.txt" --python /nonexistent --threads 1 > "$work/$n-$r.json"; done
  done
  python3 - "$work" <<'PY'
import json, sys
best = {n: max((json.load(open(f"{sys.argv[1]}/{n}-{r}.json")) for r in (1, 2, 3)),
               key=lambda j: j["tessera_mb_per_s"]) for n in ("c1", "c4")}
a, b = best["c1"], best["c4"]
t1, t4 = a["bytes"] / a["tessera_mb_per_s"], b["bytes"] / b["tessera_mb_per_s"]
ratio = t4 / t1
print(f"1 MB: {a['tessera_mb_per_s']:.1f} MB/s, 4 MB: {b['tessera_mb_per_s']:.1f} MB/s; 4 MB took {ratio:.2f}x the time of 1 MB")
assert ratio < 6, f"tokenising is not linear: 4 MB took {ratio:.1f}x the time of 1 MB"
PY
  exit 0
fi
if [ "$part" = signal ]; then
  for _ in $(seq 32); do cat "$work/c4.txt"; done > "$work/c128.txt"  # about 2 s at 60 MB/s
  cat > "$work/bpe.json" <<EOF
{"train_batch_size": 4, "model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8},
 "data": {"tokenizer": "gpt2", "vocab": "$v/vocab.json", "merges": "$v/merges.txt",
          "cache_dir": "$work/cache"}, "train": {"steps": 1}}
EOF
  "$tessera" train "$work/bpe.json" --data "$work/c128.txt" > "$work/train.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # the first progress line (60 s at most)
    grep -q "data: tokenised" "$work/train.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "data: tokenised" "$work/train.log" || { cat "$work/train.log"; echo "no progress line"; exit 1; }
  kill -TERM "$pid"
  status=0; wait "$pid" || status=$?
  cat "$work/train.log"
  [ "$status" = 143 ] || { echo "exit status $status after SIGTERM, expected 143"; exit 1; }
  stop=$(grep -o "tokenising stopped after [0-9]* of [0-9]* bytes" "$work/train.log") ||
    { echo "no stop message"; exit 1; }
  read -r done_bytes total_bytes <<< "$(echo "$stop" | awk '{print $4, $6}')"
  [ "$done_bytes" -lt "$total_bytes" ] || { echo "the stop came only at the end: $stop"; exit 1; }
  if find "$work/cache" -name meta.json 2>/dev/null | grep -q .; then echo "a stopped tokenisation cached tokens"; exit 1; fi
  echo "SIGTERM during tokenising: stopped with 143, nothing cached"
  exit 0
fi
[ -x "$python" ] && "$python" -c "import tokenizers" 2>/dev/null ||
  { echo "no Python with tokenizers ($python): skipped"; exit 77; }
bench "$work/c2.txt" --python "$python" > "$work/hf.json"
python3 - "$work/hf.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"2 MB mixed corpus: tessera {r['tessera_mb_per_s']:.1f} MB/s, Hugging Face {r['hf_mb_per_s']:.1f} MB/s, same ids: {r['same_ids']}")
assert r["same_ids"], "Tessera's ids differ from Hugging Face's on the mixed corpus"
PY
