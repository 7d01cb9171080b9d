#!/usr/bin/env bash
# `tessera export` from checkpoints of every kind users make: GPT-2 with the char tokenizer
# (one process), a bias-free GPT-2 at ZeRO-3 on 2 ranks, GPT-2 with a byte-level BPE
# tokenizer (files written by HF's tokenizers), and BERT (MLM + NSP).
#   export.sh TESSERA FIXTURES            the directories are complete, `tessera eval` and
#                                         `tessera generate --prompt` use them, checkpoints do
#                                         not look like HF directories
#   export.sh TESSERA FIXTURES PYTHON     also: transformers' from_pretrained loads each with
#                                         no missing or unexpected keys and the same loss
#                                         (1e-5), and its GPT-2 tokenizer gives Tessera's ids;
#                                         exits 77 (skipped) when PYTHON has no transformers
set -euo pipefail
tessera="$1"; fixtures="$2"; python="${3:-}"
if [ -n "$python" ] && ! "$python" -c "import transformers, torch" 2>/dev/null; then
  echo "SKIPPED: '$python' cannot import transformers and torch (scripts/test_python.sh sets them up)"
  exit 77
fi
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
python3 - "$fixtures" "$work" <<'PY'
import json, random, sys
fixtures, work = sys.argv[1:3]
small = json.load(open(f"{fixtures}/train_small.json")); small["train"]["sample_tokens"] = 0
json.dump(small, open(f"{work}/char.json", "w"))
bpe = json.loads(json.dumps(small))
bpe["data"] = {"tokenizer": "gpt2", "vocab": f"{fixtures}/tokenizers/gpt2-bpe/vocab.json",
               "merges": f"{fixtures}/tokenizers/gpt2-bpe/merges.txt"}
json.dump(bpe, open(f"{work}/bpe.json", "w"))
dist = json.load(open(f"{fixtures}/train_dist.json")); dist.pop("comms_logger"); dist["csv_monitor"]["enabled"] = False
z3 = json.loads(json.dumps(dist)); z3["zero_optimization"]["stage"] = 3   # bias-free GPT-2
json.dump(z3, open(f"{work}/z3.json", "w"))
bert = json.loads(json.dumps(dist))
bert["model"] = {"type": "bert", "n_layer": 2, "n_head": 2, "n_embd": 32, "intermediate_size": 64, "block_size": 16}
bert["data"] = {"tokenizer": "char", "nsp": True}
json.dump(bert, open(f"{work}/bert.json", "w"))
random.seed(3)
T, V = 16, 60  # ids below every vocabulary here
json.dump({"input_ids": [[random.randrange(V) for _ in range(T)] for _ in range(2)],
           "targets": [[random.randrange(V) for _ in range(T)] for _ in range(2)]}, open(f"{work}/gpt.batch", "w"))
json.dump({"input_ids": [[random.randrange(V) for _ in range(T)] for _ in range(2)],
           "targets": [[random.randrange(V) if random.random() < 0.3 else -100 for _ in range(T)] for _ in range(2)],
           "attention_mask": [[1] * T, [1] * 12 + [0] * 4], "token_type_ids": [[0] * 8 + [1] * 8] * 2,
           "next_sentence_label": [0, 1]}, open(f"{work}/bert.batch", "w"))
PY
train() { "$tessera" train "$work/$1.json" --data "$work/corpus.txt" --steps 3 --save "$work/ck-$1" >"$work/$1.log" 2>&1 || { cat "$work/$1.log"; exit 1; }; }
train char; train bpe; train bert
mpirun -np 2 "$tessera" train "$work/z3.json" --data "$work/corpus.txt" --steps 3 --save "$work/ck-z3" >"$work/z3.log" 2>&1 || { cat "$work/z3.log"; exit 1; }

for m in char bpe bert z3; do
  test ! -e "$work/ck-$m/step3/config.json"  # a checkpoint is not an HF directory
  "$tessera" export "$work/ck-$m" "$work/hf-$m" --json 2>/dev/null | tail -1 > "$work/$m.export"
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
want = {"char": ["tessera_chars.json", "tokenizer.json", "tokenizer_config.json"], "bpe": ["vocab.json", "merges.txt"],
        "z3": ["tessera_chars.json", "tokenizer.json", "tokenizer_config.json"],
        "bert": ["tessera_chars.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]}
for m, tok in want.items():
    e = json.load(open(f"{work}/{m}.export"))
    assert e["files"] == ["config.json", "model.safetensors"] + tok, e
    header = open(f"{work}/hf-{m}/model.safetensors", "rb").read(4096)
    assert b'"__metadata__":{"format":"pt"}' in header, header[:200]
    print(f"export {m}: {' '.join(e['files'])} ok")
PY
for m in char bpe z3; do
  "$tessera" eval "$work/hf-$m" --batch "$work/gpt.batch" --json | tail -1 > "$work/$m.eval"
done
"$tessera" eval "$work/hf-bert" --batch "$work/bert.batch" --json | tail -1 > "$work/bert.eval"
for m in char bpe; do
  text=$("$tessera" generate "$work/hf-$m" --prompt "Tessera " --max-new-tokens 6 --seed 1 2>/dev/null)
  [ -n "$text" ] || { echo "generate --prompt on the $m export printed nothing"; exit 1; }
  echo "generate --prompt on the $m export: $(printf %q "$text")"
done
# --prompts FILE: a batch of text prompts of different lengths, each continued as it is alone.
printf 'Tessera \nGPT\n\nand BERT train\n' > "$work/prompts.txt"
"$tessera" generate "$work/hf-bpe" --prompts "$work/prompts.txt" --max-new-tokens 4 --temperature 0 \
  --json 2>/dev/null | tail -1 > "$work/batch.generate"
for p in "Tessera " "GPT" "and BERT train"; do
  "$tessera" generate "$work/hf-bpe" --prompt "$p" --max-new-tokens 4 --temperature 0 --json \
    2>/dev/null | tail -1
done > "$work/alone.generate"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
batch = json.load(open(f"{work}/batch.generate"))["outputs"]
alone = [json.loads(line) for line in open(f"{work}/alone.generate")]
got = [(o["prompt_ids"], o["ids"], o["text"]) for o in batch]
want = [(o["prompt_ids"], o["ids"], o["text"]) for o in alone]
print(f"generate --prompts: {len(got)} prompts in one batch {'equal' if got == want else 'DIFFER from'} each alone")
raise SystemExit(0 if got == want and len(got) == 3 else 1)
PY

if [ -n "$python" ]; then
  "$tessera" generate "$work/hf-bpe" --prompt "Tessera trains GPT-2 and BERT." --max-new-tokens 1 --json | tail -1 > "$work/bpe.generate"
  "$tessera" generate "$work/hf-char" --prompt "GPT-2 and
BERT" --max-new-tokens 1 --json | tail -1 > "$work/char.generate"
  "$python" - "$work" <<'PY'
import json, sys
import torch, torch.nn.functional as F
import transformers
from transformers import BertForPreTraining, GPT2LMHeadModel, GPT2TokenizerFast
work = sys.argv[1]
fails = 0
for m in ("char", "bpe", "z3", "bert"):
    batch = json.load(open(f"{work}/{'bert' if m == 'bert' else 'gpt'}.batch"))
    ids = torch.tensor(batch["input_ids"])
    if m == "bert":
        model, info = BertForPreTraining.from_pretrained(f"{work}/hf-{m}", output_loading_info=True)
        out = model(ids, attention_mask=torch.tensor(batch["attention_mask"]),
                    token_type_ids=torch.tensor(batch["token_type_ids"]))
        V = out.prediction_logits.shape[-1]
        loss = F.cross_entropy(out.prediction_logits.reshape(-1, V), torch.tensor(batch["targets"]).reshape(-1),
                               ignore_index=-100) + F.cross_entropy(out.seq_relationship_logits,
                                                                    torch.tensor(batch["next_sentence_label"]))
    else:
        model, info = GPT2LMHeadModel.from_pretrained(f"{work}/hf-{m}", output_loading_info=True)
        logits = model(ids).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(batch["targets"]).reshape(-1),
                               ignore_index=-100)
    ours = json.load(open(f"{work}/{m}.eval"))["loss"]
    keys_ok = not info["missing_keys"] and not info["unexpected_keys"]
    rel = abs(loss.item() - ours) / abs(ours)
    ok = keys_ok and rel <= 1e-5
    fails += not ok
    print(f"transformers {transformers.__version__} {type(model).__name__}.from_pretrained(export {m}): "
          f"missing {info['missing_keys']}, unexpected {info['unexpected_keys']}, loss {loss.item():.7f} "
          f"vs tessera eval {ours:.7f} (rel {rel:.1e}) {'ok' if ok else 'FAIL'}")
tok = GPT2TokenizerFast.from_pretrained(f"{work}/hf-bpe")
gen = json.load(open(f"{work}/bpe.generate"))
hf_ids = tok("Tessera trains GPT-2 and BERT.")["input_ids"]
ok = hf_ids == gen["prompt_ids"]
fails += not ok
print(f"GPT2TokenizerFast.from_pretrained(export bpe) ids {hf_ids} vs tessera {gen['prompt_ids']} {'ok' if ok else 'FAIL'}")
# The character tokenizer's tokenizer.json: AutoTokenizer gives Tessera's ids and decodes back.
from transformers import AutoTokenizer
text = "GPT-2 and\nBERT"  # (within the 16 positions)
gen = json.load(open(f"{work}/char.generate"))
for m in ("char", "z3", "bert"):
    tok = AutoTokenizer.from_pretrained(f"{work}/hf-{m}")
    ids = tok(text)["input_ids"]
    chars = json.load(open(f"{work}/hf-{m}/tessera_chars.json"))["chars"]
    want = gen["prompt_ids"] if m == "char" else [chars.index(c) for c in text]
    ok = ids == want and tok.decode(ids) == text
    if m == "bert":  # its special tokens follow the characters
        ok = ok and tok.mask_token_id == len(chars) + 4 and tok.convert_ids_to_tokens(len(chars)) == "[PAD]"
    fails += not ok
    print(f"AutoTokenizer.from_pretrained(export {m}) ids {ids[:8]}... decode {tok.decode(ids)!r} {'ok' if ok else 'FAIL'}")
sys.exit(1 if fails else 0)
PY
fi
echo ok
