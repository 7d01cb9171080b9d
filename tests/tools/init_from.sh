#!/usr/bin/env bash
# Fine-tuning Hugging Face models from their own directories (model.init_from), as
# transformers saves them: a GPT-2 in three safetensors shards with its tokenizer files, a
# GPT-2 with only tokenizer.json, a BERT (MLM + NSP) sized to the corpus's characters and one
# with its WordPiece vocab.txt (the token cache must hold transformers' ids for the corpus).
# The configs state no architecture. Checked: 0 steps then `tessera export` gives back the
# same weights (bit for bit) and the same config.json fields; 3 steps train and export to a
# directory transformers loads with its own tokenizer giving Tessera's ids (added tokens such as
# <|endoftext|> split out as transformers does); a restated key
# that differs, a window longer than the model's positions, another tokenizer's vocabulary,
# and shard indexes that point elsewhere are errors naming the key or file.
#   init_from.sh TESSERA FIXTURES PYTHON   (exits 77, skipped, without transformers)
set -euo pipefail
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"; python="$3"
if ! "$python" -c "import transformers, torch" 2>/dev/null; then
  echo "SKIPPED: '$python' cannot import transformers and torch (scripts/test_python.sh sets them up)"
  exit 77
fi
work="${KEEP_WORK:-$(mktemp -d)}"; [ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
cd "$work"
cp "$fixtures/corpus.txt" corpus.txt
"$python" - "$fixtures" <<'PY' 2>/dev/null
import json, os, sys
import torch
from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
tokdir = f"{sys.argv[1]}/tokenizers/gpt2-bpe"
torch.manual_seed(0)
tok = GPT2TokenizerFast(vocab_file=f"{tokdir}/vocab.json", merges_file=f"{tokdir}/merges.txt")
gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                 resid_pdrop=0.05, embd_pdrop=0.05, attn_pdrop=0.05))
gpt.save_pretrained("gpt2-sharded", max_shard_size="60KB", safe_serialization=True)
tok.save_pretrained("gpt2-sharded")
gpt.save_pretrained("gpt2-json", safe_serialization=True)
tok.save_pretrained("gpt2-json")
for f in ("vocab.json", "merges.txt"):
    os.remove(f"gpt2-json/{f}")
# vocab.json + merges.txt as GPT-2's own hold <|endoftext|> (its last id).
os.makedirs("tok-files")
vocab = json.load(open(f"{tokdir}/vocab.json")); vocab["<|endoftext|>"] = len(vocab)
json.dump(vocab, open("tok-files/vocab.json", "w"))
open("tok-files/merges.txt", "w").write(open(f"{tokdir}/merges.txt").read())
chars = set(open("corpus.txt", encoding="utf-8").read())
bert = BertForPreTraining(BertConfig(vocab_size=len(chars) + 5, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=32))
bert.save_pretrained("bert", safe_serialization=True)
# BERT with its WordPiece vocab.txt (written by HF's tokenizers: tests/fixtures/tokenizers).
from transformers import BertTokenizerFast
wp = BertTokenizerFast(vocab_file=f"{sys.argv[1]}/tokenizers/bert-wordpiece/vocab.txt", do_lower_case=True)
BertForPreTraining(BertConfig(vocab_size=len(wp), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=32)).save_pretrained("bert-wp", safe_serialization=True)
wp.save_pretrained("bert-wp")
assert os.path.exists("gpt2-sharded/model.safetensors.index.json") and not os.path.exists("gpt2-sharded/model.safetensors")
base = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "train": {"steps": 3, "seed": 1, "eval_interval": 0, "eval_iters": 1, "sample_tokens": 0}}
def config(name, model, data=None, **sections):
    c = json.loads(json.dumps(base)); c["model"] = model
    if data: c["data"] = data
    c.update(sections)
    json.dump(c, open(f"{name}.json", "w"))
for d in ("gpt2-sharded", "gpt2-json", "bert", "bert-wp"):
    config(d, {"init_from": d})
config("conflict", {"init_from": "gpt2-sharded", "n_layer": 3})
config("same", {"init_from": "gpt2-sharded", "type": "gpt2", "n_layer": 2, "n_head": 4, "block_size": 32})
config("long", {"init_from": "gpt2-sharded", "block_size": 128})
config("sized", {"init_from": "gpt2-sharded", "size": "gpt2"})
config("charvocab", {"init_from": "gpt2-sharded"}, {"tokenizer": "char"})
config("missing", {"init_from": "no-such-dir"})
# The transformer kernel over the same directories: HF's weights in and out unchanged.
memory = {"normalize_invertible": True, "gelu_checkpoint": True}
for d in ("gpt2-sharded", "bert"):
    config(f"{d}-kernel", {"init_from": d, "transformer_kernel": True}, transformer_kernel=memory)
PY

fail() { echo "FAIL: $*"; exit 1; }
train() {  # NAME STEPS: trains NAME.json, saves ck-NAME-STEPS, exports hf-NAME-STEPS
  "$tessera" train "$1.json" --data corpus.txt --steps "$2" --save "ck-$1-$2" > "$1-$2.log" 2>&1 ||
    { cat "$1-$2.log"; fail "training from $1"; }
  "$tessera" export "ck-$1-$2" "hf-$1-$2" > /dev/null 2>&1 || fail "export of $1"
}
for d in gpt2-sharded gpt2-json bert bert-wp; do train "$d" 0; train "$d" 3; done
for d in gpt2-sharded-kernel bert-kernel; do train "$d" 0; train "$d" 3; done
train same 3
"$tessera" estimate-memory gpt2-sharded.json --ranks 1 --json 2>/dev/null | tail -1 > estimate.json
grep -q "vocab 401" gpt2-sharded-3.log || fail "gpt2-sharded: the directory's tokenizer (401 ids) was not used"
grep -q "block 32" same-3.log || fail "a restated architecture with block_size 32: $(cat same-3.log)"

"$python" - <<'PY' 2>/dev/null
import json, sys
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertForPreTraining, GPT2LMHeadModel
fails = 0
def check(ok, what):
    global fails
    fails += not ok
    print(f"{what}: {'ok' if ok else 'FAIL'}")
for d, cls in (("gpt2-sharded", GPT2LMHeadModel), ("gpt2-json", GPT2LMHeadModel), ("bert", BertForPreTraining),
               ("bert-wp", BertForPreTraining)):
    orig = cls.from_pretrained(d).state_dict()
    back, info = cls.from_pretrained(f"hf-{d}-0", output_loading_info=True)
    same = all(torch.equal(orig[k], v) for k, v in back.state_dict().items())
    check(same and not info["missing_keys"] and not info["unexpected_keys"],
          f"{d}: 0 steps, exported weights equal the directory's")
    want, got = json.load(open(f"{d}/config.json")), json.load(open(f"hf-{d}-3/config.json"))
    keys = [k for k in got if k in want and k not in ("architectures", "transformers_version")]
    diff = {k: (want[k], got[k]) for k in keys if want[k] != got[k]}
    check(not diff and len(keys) >= 8, f"{d}: 3 steps, exported config.json fields {keys} equal ({diff})")
    if d == "gpt2-sharded":  # estimate-memory sizes the directory's model (its own count)
        n = cls.from_pretrained(d).num_parameters()
        check(json.load(open("estimate.json"))["num_parameters"] == n, f"{d}: estimate-memory counts {n} parameters")
    trained = cls.from_pretrained(f"hf-{d}-3").state_dict()
    check(any(not torch.equal(orig[k], v) for k, v in trained.items()), f"{d}: 3 steps changed the weights")
    if d in ("gpt2-sharded", "bert"):  # through the transformer kernel: the same weights
        kernel0 = cls.from_pretrained(f"hf-{d}-kernel-0").state_dict()
        check(all(torch.equal(orig[k], v) for k, v in kernel0.items()),
              f"{d} with transformer_kernel: 0 steps, exported weights equal the directory's")
        kernel3 = cls.from_pretrained(f"hf-{d}-kernel-3").state_dict()
        worst = max(float((v - trained[k]).abs().max()) for k, v in kernel3.items())
        check(worst < 1e-5, f"{d} with transformer_kernel: 3 steps, the weights trained without it "
                            f"(largest difference {worst:.2e})")
text = "Tessera trains GPT-2 and BERT.\n  naïve  "
for d in ("gpt2-sharded", "gpt2-json"):
    ours = AutoTokenizer.from_pretrained(f"hf-{d}-3")(text)["input_ids"]
    theirs = AutoTokenizer.from_pretrained(d)(text)["input_ids"]
    check(ours == theirs, f"{d}: the exported tokenizer gives the directory's ids")
# BERT's corpus tokenised with its vocab.txt: the token cache (train + validation) holds
# exactly transformers' ids, and the export's tokenizer is the directory's.
import array, glob, re
cache = re.search(r"into (\S+)", open("bert-wp-0.log").read()).group(1)
ours = array.array("i")
for split in ("train", "val"):
    ours.frombytes(open(f"{cache}/{split}.bin", "rb").read())
theirs = AutoTokenizer.from_pretrained("bert-wp")(open("corpus.txt", encoding="utf-8").read(),
                                                  add_special_tokens=False)["input_ids"]
check(list(ours) == theirs, f"bert-wp: the corpus's {len(theirs)} WordPiece ids equal transformers'")
check(AutoTokenizer.from_pretrained("hf-bert-wp-3")(text)["input_ids"] == AutoTokenizer.from_pretrained("bert-wp")(text)["input_ids"],
      "bert-wp: the exported tokenizer gives the directory's ids")
sys.exit(1 if fails else 0)
PY

# Added tokens are split out first, as HF's tokenizers do: Tessera's ids for a text with
# <|endoftext|> between, around and next to words, from tokenizer.json and vocab.json.
special=$'a<|endoftext|>b <|endoftext|><|endoftext|> c<|endoftext| d\n<|endoftext|>'
"$tessera" generate hf-gpt2-json-3 --prompt "$special" --max-new-tokens 1 --json 2>/dev/null | tail -1 > special-json.json
"$tessera" generate hf-gpt2-json-3 --tokenizer tok-files --prompt "$special" --max-new-tokens 1 --json 2>/dev/null | tail -1 > special-files.json
"$python" - "$special" <<'PY' 2>/dev/null
import json, sys
from transformers import AutoTokenizer, GPT2TokenizerFast
text = sys.argv[1]
fails = 0
for name, tok in (("tokenizer.json", AutoTokenizer.from_pretrained("gpt2-json")),
                  ("vocab.json + merges.txt", GPT2TokenizerFast(vocab_file="tok-files/vocab.json", merges_file="tok-files/merges.txt"))):
    ours = json.load(open(f"special-{'json' if name == 'tokenizer.json' else 'files'}.json"))["prompt_ids"]
    theirs = tok(text)["input_ids"]
    ok = ours == theirs and theirs.count(400) == 4
    fails += not ok
    print(f"added tokens from {name}: tessera {ours} vs transformers {theirs}: {'ok' if ok else 'FAIL'}")
sys.exit(1 if fails else 0)
PY

expect_error() {  # NAME TEXT: training NAME.json fails, saying TEXT
  if "$tessera" train "$1.json" --data corpus.txt --steps 1 > "$1.log" 2>&1; then fail "$1 trained"; fi
  grep -qF -- "$2" "$1.log" || { cat "$1.log"; fail "$1: no '$2'"; }
  echo "$1: $(grep -m1 error "$1.log")"
}
expect_error conflict "'model.n_layer' is 3 but model.init_from's gpt2-sharded/config.json has n_layer 2"
expect_error long "'model.block_size' (128) is longer than model.init_from's n_positions (64"
expect_error sized "'model.size' and 'model.init_from' both name an architecture"
expect_error charvocab "has vocab_size 401 but the data's char tokenizer has"
expect_error missing "'model.init_from' \"no-such-dir\" is not a directory"

# Shard indexes are inputs too: a shard outside the directory, a missing shard, a tensor its
# shard does not hold.
index=gpt2-sharded/model.safetensors.index.json
cp "$index" index.orig
shard_index() {  # EDIT (Python on `m`, the weight map) TEXT
  "$python" -c "import json; j = json.load(open('index.orig')); m = j['weight_map']; $1; json.dump(j, open('$index', 'w'))"
  expect_error gpt2-sharded "$2"
}
shard_index "m['transformer.wte.weight'] = '../gpt2-json/model.safetensors'" "expected a file name in the same directory"
shard_index "m['transformer.wte.weight'] = 'model-00009-of-00009.safetensors'" "names shard 'model-00009-of-00009.safetensors', which is missing"
shard_index "m['transformer.h.9.attn.bias'] = sorted(set(m.values()))[0]" "maps 'transformer.h.9.attn.bias' to"
shard_index "del m['transformer.wte.weight']" "missing (1): transformer.wte.weight"
echo ok
