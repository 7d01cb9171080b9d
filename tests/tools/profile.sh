#!/usr/bin/env bash
# `tessera profile` as a user runs it: the report written whole to --out, the --json line's
# figures equal to the report's (params, and the profile step), the model's parameter count
# equal to `tessera train`'s, and --steps that end before the profile step fail naming it.
set -euo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
cp "$fixtures/corpus.txt" "$work/corpus.txt"
python3 - "$fixtures/train_small.json" "$work" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); work = sys.argv[2]
c["flops_profiler"] = {"enabled": False, "profile_step": 2, "module_depth": 2, "detailed": True}
json.dump(c, open(work + "/cfg.json", "w"))
PY
"$tessera" profile "$work/cfg.json" --data "$work/corpus.txt" --out "$work/p/profile.txt" --json \
  2>"$work/err" | tail -1 > "$work/line.json"
python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
line = json.load(open(work + "/line.json"))
text = open(work + "/p/profile.txt").read()
assert line["profile_step"] == 2, line
assert "Profile Summary at step 2:" in text, text[:300]
assert line["flops"] > 2 * line["macs"] > 0, line
params = re.search(r"params per GPU: +(\S+ ?\S*)", text).group(1).strip()
assert "depth 1:" in text and "depth 2:" not in text, "module_depth 2"
assert "Detailed Profile per GPU" in text and "(transformer): GPT2Model(" in text
assert text.rstrip().endswith("-" * 78), text[-200:]
print("profile: step", line["profile_step"], "params", line["params"], "(" + params + ")", "flops", line["flops"])
PY
# The parameter count equals the one `tessera train` reports for the same config.
"$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --steps 1 --json 2>"$work/train_err" >/dev/null
grep -q "$(python3 -c "import json; print(json.load(open('$work/line.json'))['params'])") parameters" "$work/train_err"
# Steps that end before the profile step: a clear error, before any training.
if "$tessera" profile "$work/cfg.json" --data "$work/corpus.txt" --steps 2 2>"$work/err2"; then
  echo "FAIL: --steps 2 with profile_step 2 succeeded"; exit 1
fi
grep -q "ends before flops_profiler.profile_step 2" "$work/err2"
echo ok
