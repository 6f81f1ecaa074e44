#!/usr/bin/env bash
# Install mmlape and the OpenMMLab stack into the current Python environment.
#
# Idempotent: every step first checks whether it is already done (see
# scripts/check_env.py), so a second run finishes in seconds.
#
# Environment:
#   PYTHON                 interpreter to install into (default: python3)
#   FORCE_CUDA=1           build mmcv's CUDA ops even if no GPU is visible
#   TORCH_CUDA_ARCH_LIST   e.g. "8.0;9.0" for the GPUs you will run on
#   MAX_JOBS               parallel compile jobs for mmcv (default: nproc)
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --disable-pip-version-check)
say() { echo "[install] $*"; }

if "$PY" scripts/check_env.py --quiet; then
    say "everything is installed already"
    exit 0
fi
start=$(date +%s)

if ! "$PY" scripts/check_env.py --part setuptools --quiet; then
    say "build tools (setuptools with pkg_resources, wheel, ninja)"
    "${PIP[@]}" -r requirements/build.txt
fi

if "$PY" scripts/check_env.py --part torch --quiet; then
    say "keeping the installed torch/torchvision: $("$PY" -c \
        'import torch, torchvision; print(torch.__version__, torchvision.__version__)')"
else
    # The registry's torch + torchvision of requirements/torch.txt import
    # and run together (also on CPU-only machines). A local find-links
    # entry on some machines offers a CPU-only torch with no matching
    # torchvision: hide the local pip configuration for this one call.
    say "torch + torchvision (requirements/torch.txt)"
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
        "${PIP[@]}" -r requirements/torch.txt
fi

if ! "$PY" scripts/check_env.py --part mmcv --quiet; then
    # The pins come from requirements/openmmlab.txt (the one place).
    MMENGINE=$("$PY" scripts/check_env.py --pin mmengine)
    MMCV=$("$PY" scripts/check_env.py --pin mmcv)
    say "$MMCV with ops, built against the installed torch" \
        "(about 13 minutes on 2 cores the first time; cached afterwards)"
    "${PIP[@]}" "$MMENGINE"
    reinstall=()
    if "$PY" -c 'import importlib.metadata as m; m.version("mmcv")' \
        >/dev/null 2>&1; then
        reinstall=(--force-reinstall --no-deps)  # installed without ops
    fi
    MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
        "${PIP[@]}" --no-build-isolation "${reinstall[@]}" "$MMCV"
fi

say "OpenMMLab packages, runtime and test requirements"
"${PIP[@]}" -r requirements/openmmlab.txt -r requirements/runtime.txt \
    -r requirements/tests.txt
say "mmlape (editable)"
"${PIP[@]}" --no-build-isolation --no-deps -e .

if ! "$PY" scripts/check_env.py; then
    say "the environment is still incomplete (see above)"
    exit 1
fi
say "done in $(( $(date +%s) - start )) s"
