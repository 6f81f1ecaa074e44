#!/usr/bin/env bash
# Install mmlape and the OpenMMLab stack into the current Python environment.
#
#   scripts/install.sh           the runtime (make install): torch, mmcv with
#                                ops, the OpenMMLab packages,
#                                requirements/runtime.txt, mmlape (editable)
#   scripts/install.sh --tests   the runtime and the test, lint and docs
#                                tools of requirements/tests.txt (make
#                                install-dev, what make test runs)
#
# Idempotent: every step first checks whether it is already done (see
# scripts/check_env.py), so a second run finishes in seconds.
#
# On a machine with an NVIDIA GPU it never settles for the CPU: when torch
# cannot use the GPU (a torch built for a newer CUDA than the driver runs,
# a CPU-only torch) it stops with one line naming the driver, torch's CUDA
# and the fix; mmcv is built with its CUDA ops for the GPUs found, and its
# deformable attention, RoIAlign and NMS must run there and agree with their
# CPU/PyTorch results.
#
# Environment:
#   PYTHON                 interpreter to install into (default: python3)
#   TORCH_PAIR             cu13 (requirements/torch.txt, the pin) or cu12
#                          (requirements/torch-cu12.txt, for drivers older
#                          than the 580 series); default: the pair that the
#                          machine's driver runs, when no working torch is
#                          installed. Set, it replaces another installed
#                          torch.
#   MMLAPE_ALLOW_CPU=1     go on on the CPU of a GPU node torch cannot use
#   FORCE_CUDA=1           build mmcv's CUDA ops even if no GPU is visible
#   TORCH_CUDA_ARCH_LIST   e.g. "8.0;9.0" for the GPUs you will run on
#                          (default: the visible GPUs'; with FORCE_CUDA and
#                          no GPU, scripts/cuda_env.py's default list)
#   MAX_JOBS               parallel compile jobs for mmcv (default: nproc)
#   MMLAPE_CACHE           where built mmcv wheels are kept, one folder per
#                          torch, CUDA and arch list (default:
#                          ~/.cache/mmlape)
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --disable-pip-version-check)
CACHE=${MMLAPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmlape}
say() { echo "[install] $*"; }
die() { echo "error: $*" >&2; exit 1; }
check() { "$PY" scripts/check_env.py "$@"; }

MODE=()      # check_env's mode: the runtime, or --tests
REQS=(-r requirements/openmmlab.txt -r requirements/runtime.txt)
WHAT="runtime requirements"
for arg in "$@"; do
    case $arg in
        --tests)
            MODE=(--tests)
            REQS+=(-r requirements/tests.txt)
            WHAT="runtime requirements and the test tools"
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "scripts/install.sh takes --tests only, not \"$arg\"" ;;
    esac
done

if check ${MODE[@]+"${MODE[@]}"} --quiet; then
    say "everything is installed already"
    exit 0
fi
start=$(date +%s)

if ! check --part setuptools --quiet; then
    say "build tools (setuptools with pkg_resources, wheel, ninja)"
    "${PIP[@]}" -r requirements/build.txt
fi

# torch + torchvision ------------------------------------------------------
pair=$(check --torch-pair 2>&1) || die "${pair#\[check_env\] }"
want=$(grep -E '^torch==' "$pair" | cut -d= -f3)
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' \
    2>/dev/null || true)
if [[ -n ${TORCH_PAIR:-} && -n $have && ${have%%+*} != "$want" ]]; then
    say "TORCH_PAIR=$TORCH_PAIR: replacing torch $have with the pair of $pair"
    "$PY" -m pip uninstall -y -q torch torchvision
    have=""
fi
if [[ -n $have ]] && check --part torch --quiet; then
    say "keeping the installed torch/torchvision: $("$PY" -c \
        'import torch, torchvision; print(torch.__version__, torchvision.__version__)')"
else
    say "torch + torchvision ($pair), with your pip configuration"
    "${PIP[@]}" -r "$pair"
    if ! problem=$(check --part torch); then
        # Some indexes or find-links folders hold a torch without a matching
        # torchvision (e.g. a CPU-only torch file next to the registry's
        # CUDA torchvision). Only then is the pip configuration set aside.
        say "the pair your pip configuration gave does not work together" \
            "(${problem#\[check_env\] torch: }); installing it again with" \
            "your pip configuration set aside (PIP_CONFIG_FILE=/dev/null," \
            "no PIP_FIND_LINKS)"
        "$PY" -m pip uninstall -y -q torch torchvision
        env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL \
            PIP_CONFIG_FILE=/dev/null "${PIP[@]}" -r "$pair"
        problem=$(check --part torch) || die "${problem#\[check_env\] torch: }"
    fi
fi

# Never a silent CPU run: a GPU that torch cannot use stops here.
if ! problem=$(check --part gpu); then
    problem=${problem#\[check_env\] gpu: }
    if [[ ${MMLAPE_ALLOW_CPU:-} =~ ^(1|true|yes)$ ]]; then
        say "MMLAPE_ALLOW_CPU=1: going on for the CPU although $problem"
    else
        die "$problem"
    fi
fi

# mmcv with its ops, built against this torch ------------------------------
if ! problem=$(check --part mmcv); then
    say "${problem#\[check_env\] mmcv: }"
    MMENGINE=$(check --pin mmengine)
    MMCV=$(check --pin mmcv)
    cuda=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')
    if [[ $cuda == 1 || ${FORCE_CUDA:-0} == 1 ]]; then
        # The CUDA toolkit: CUDA_HOME behind an nvcc wrapper, a major version
        # that matches torch's, the pip-wheel layout's headers and
        # libcudart.so, and the arch list (scripts/cuda_env.py).
        exports=$("$PY" scripts/cuda_env.py --exports \
            --build-dir "$CACHE/cuda") || die "mmcv's CUDA ops cannot be" \
            "built here; see the line above"
        eval "$exports"
        export FORCE_CUDA=1
    fi
    key=$(check --mmcv-key)
    wheels="$CACHE/mmcv/$key"
    shopt -s nullglob
    built=("$wheels"/mmcv-*.whl)
    if ((!${#built[@]})); then
        say "$MMCV with ops for $key (about 13 minutes on 2 cores for the" \
            "CPU ops; kept in $wheels)"
        "${PIP[@]}" "$MMENGINE"
        # pip's own wheel cache is keyed by the Python version alone and
        # would serve a wheel built against another torch, or without CUDA.
        MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" -m pip wheel \
            --disable-pip-version-check --no-build-isolation --no-deps \
            --no-cache-dir -w "$wheels.partial" "$MMCV"
        mkdir -p "$wheels"
        mv "$wheels.partial"/mmcv-*.whl "$wheels"/
        rm -rf "$wheels.partial"
        built=("$wheels"/mmcv-*.whl)
    else
        say "$MMCV: the wheel built earlier for $key ($wheels)"
    fi
    "${PIP[@]}" --force-reinstall --no-deps "${built[0]}"
    "${PIP[@]}" "${built[0]}" "$MMENGINE"  # its dependencies
    if ! problem=$(check --part mmcv); then
        die "${problem#\[check_env\] mmcv: } (after installing ${built[0]})"
    fi
fi

say "OpenMMLab packages, $WHAT"
"${PIP[@]}" "${REQS[@]}"
say "mmlape (editable)"
"${PIP[@]}" --no-build-isolation --no-deps -e .

if ! check ${MODE[@]+"${MODE[@]}"}; then
    say "the environment is still incomplete (see above)"
    exit 1
fi
say "done in $(( $(date +%s) - start )) s"
