# Sourced by the experiment tests with $work (a fresh directory) and $fixtures set: the store
# and caches in $work, MPI allowed as root, tests/fixtures/corpus.txt as the corpus and small.json
# (the test GPT-2's training config reading it) in $work, which becomes the working directory.
export TESSERA_STORE="$work/store" OMP_NUM_THREADS=1 XDG_CACHE_HOME="$work/cache"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
cd "$work"
python3 - "$fixtures/train_small.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"
c["train"]["sample_tokens"] = 0
json.dump(c, open("small.json", "w"))
PY
