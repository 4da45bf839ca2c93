#!/usr/bin/env bash
# The GPU check's collection, proved on a CPU machine in a virtualenv shaped like the GPU test machine's image.
#
#   scripts/device_image_check.sh
#
# Builds .venv-device-image (ignored by git) with only what that image has: transformers 5.17.0, numba, safetensors,
# tokenizers, accelerate, peft, pandas, pillow, pytest, typer, and torch. The image's torch is 2.11.0+cu130 on
# Python 3.12; neither a CPU build of it nor the pinned torch for 3.12 installs here without a multi-GB download,
# so this venv is Python 3.11 with the pinned torch 2.14.1 (from local disk), and says so. Packages the image lacks
# (fastapi, pydantic, bm25s, anls-star, xgrammar, PyMuPDF) are removed if a dependency pulled them in; the carried
# wheels' packages (scripts/gpu_check_report.py CARRIED, the same versions) are added, as the check installs them
# there. Then `scripts/gpu_check.sh --dry-run` runs with this interpreter: it fails when a step cannot import or
# when the gpu tests do not collect, and prints how many collected.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-device-image
IMAGE_LACKS="fastapi pydantic pydantic_core bm25s anls_star xgrammar pymupdf PyMuPDF"
if [ ! -x "$VENV/bin/python" ]; then
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install -q --only-binary :all: torch==2.14.1 transformers==5.17.0 numba safetensors tokenizers \
    accelerate peft pandas pillow pytest typer
fi
"$VENV/bin/pip" uninstall -y -q $IMAGE_LACKS >/dev/null 2>&1 || true
carried=$("$VENV/bin/python" -c "import sys; sys.path.insert(0, 'scripts'); from gpu_check_report import CARRIED; print(' '.join(f'{n}=={v}' for n, v in CARRIED.items()))")
"$VENV/bin/pip" install -q --no-deps --only-binary :all: $carried
echo "device image: $("$VENV/bin/python" -c 'import sys, torch, transformers; print(f"Python {sys.version.split()[0]}, torch {torch.__version__} (the image has 2.11.0+cu130 on 3.12), transformers {transformers.__version__}")')"
for name in $IMAGE_LACKS; do
  if "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$name') is None)" 2>/dev/null \
     && ! echo " $carried " | grep -qi " $name=="; then
    echo "device image: $name is importable but the image lacks it" >&2; exit 1
  fi
done
PYTHON="$VENV/bin/python" scripts/gpu_check.sh --dry-run
