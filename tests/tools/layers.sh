#!/usr/bin/env bash
# The layering check passes on the tree, and fails, naming the file, on each kind of wrong
# arrow planted in a copy of it: upward, sideways, into a private header, a forbidden downward
# one, a Tensor method outside autograd or a TensorBase one outside core, and a known arrow
# that is gone but still listed.
set -euo pipefail
src="$1"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
check="$src/scripts/check_layers.py"
python3 "$check" "$src"

fresh() {  # a copy of what the check reads
  rm -rf "$work/t"; mkdir -p "$work/t"
  mkdir -p "$work/t/docs"; cp "$src/docs/architecture.md" "$work/t/docs/"
  for d in include core autograd backends nn optim io testing parallel models engine tools \
           examples; do
    cp -r "$src/$d" "$work/t/"
  done
}
expect() {  # expect NAME MESSAGE: the check fails on the planted copy and says MESSAGE
  if out="$(python3 "$check" "$work/t" 2>&1)"; then
    echo "FAIL $1: the check passed"; exit 1
  fi
  if ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL $1: expected '$2' in:"; echo "$out"; exit 1
  fi
  echo "ok   $1"
}

fresh; echo '#include "tessera/engine/engine.h"' >>"$work/t/core/storage.cpp"
expect "core includes engine" "core/storage.cpp:$(wc -l <"$work/t/core/storage.cpp"): core/ (level 0) includes tessera/engine/engine.h of engine/ (level 7): arrows point down only"
fresh; echo '#include "tessera/nn/module.h"' >>"$work/t/io/files.cpp"
expect "io includes nn (same level)" "io/ (level 3) includes tessera/nn/module.h of nn/ (level 3)"
fresh; echo '#include "tessera/ops.h"' >>"$work/t/include/tessera/storage.h"
expect "core's public header includes ops.h" "include/tessera/storage.h"
fresh; echo '#include "io/utf8.h"' >>"$work/t/models/gpt2.cpp"
expect "private header of another folder" "models/ includes io/utf8.h, a private header of io/"
fresh; echo '#include "../io/utf8.h"' >>"$work/t/models/gpt2.cpp"
expect "private header of another folder, relative" "models/ includes ../io/utf8.h, a private header of io/"
fresh; echo '#include "tessera/models/gpt2.h"' >>"$work/t/engine/engine.cpp"
expect "engine includes a model" "the engine knows models only through the loss-model interface"
fresh; echo '#include "tessera/tensor.h"' >>"$work/t/core/storage.cpp"
expect "core includes autograd's Tensor" "core/ (level 0) includes tessera/tensor.h of autograd/ (level 1)"
fresh; echo '#include "tessera/tensor.h"' >>"$work/t/backends/cpu/softmax.cpp"
expect "a backend includes autograd's Tensor" "backends/ (level 1) includes tessera/tensor.h of autograd/ (level 1)"
fresh; printf 'Tensor Tensor::planted() const {\n  return *this;\n}\n' >>"$work/t/nn/layers.cpp"
expect "Tensor method outside autograd" "Tensor::planted is defined in nn/; Tensor's methods belong to autograd/"
fresh; printf 'TensorBase TensorBase::planted() const {\n  return *this;\n}\n' >>"$work/t/autograd/ops_shape.cpp"
expect "TensorBase method outside core" "TensorBase::planted is defined in autograd/; TensorBase's methods belong to core/"
fresh; echo '#include "tessera/unplaced.h"' >>"$work/t/optim/optimizer.cpp"
expect "header not in the table" "tessera/unplaced.h is not in docs/architecture.md's Layers table"
fresh; echo '#include "core/tensor_impl.h"' >>"$work/t/examples/$(ls "$work/t/examples" | grep -m1 '\.cpp$')"
expect "example with a private header" "examples use public headers only"
# A KNOWN entry for an arrow that does not occur (a copy of the check with one planted).
fresh; sed 's|^KNOWN = {}|KNOWN = {("core/storage.cpp", "tessera/ops.h"): "planted"}|' "$check" \
  >"$work/check.py"
check="$work/check.py"
expect "known arrow removed but listed" "core/storage.cpp: no longer has the known arrow to tessera/ops.h"
echo "layers: ok"
