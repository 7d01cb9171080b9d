#!/usr/bin/env bash
# The Python the comparison tests run against Hugging Face's transformers (tests/tools/
# export.sh) and TensorBoard's reader (tests/tools/tensorboard.sh): Debian's python3-torch, and
# transformers and tensorboard in a virtual environment beside the
# build (build/test-python). transformers 4.44.2 is the version checked to run over Debian
# 12's torch 1.13. Safe to run again; without network it fails and those tests are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/test-python
if [[ -x $venv/bin/python ]] && $venv/bin/python -c "import transformers, torch, tensorboard" 2>/dev/null; then
  exit 0
fi
source scripts/lib/debian.sh  # (the repository root is the working directory)
install_missing python3-torch python3-venv
[[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "transformers==4.44.2" \
  "tensorboard==2.17.0"
"$venv/bin/python" -c "import transformers, torch, tensorboard; print('test_python: transformers', transformers.__version__, 'torch', torch.__version__, 'tensorboard', tensorboard.__version__)"
