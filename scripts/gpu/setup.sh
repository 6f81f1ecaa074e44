#!/usr/bin/env bash
# Set mmlape up on a GPU machine that has no network (Python 3.12, torch with
# CUDA, nvcc, ninja; no OpenMMLab packages). Run it in the repository root,
# with the folder that scripts/gpu/fetch_wheels.py filled (.whl/) carried
# along:
#   1. installs the wheels of .whl/ offline (pip --no-index --no-deps) into
#      the interpreter's own environment;
#   2. builds mmcv from its sdist with CUDA ops for the GPU it finds
#      (MMCV_WITH_OPS=1, FORCE_CUDA=1, TORCH_CUDA_ARCH_LIST from
#      scripts/gpu/cuda_arch.py, MAX_JOBS=nproc, --no-build-isolation), timed;
#   3. installs mmlape (editable) and checks that everything imports and that
#      mmcv's CUDA deformable attention runs and matches its PyTorch path.
#
# Idempotent and resumable: a second run skips what is done; a build that was
# cut short resumes where ninja stopped (the build tree is kept in
# BUILD_DIR). The built wheel is stripped of debug information (several times
# smaller). A wheel built earlier for the same torch, CUDA and arch list is
# reused: from BUILD_DIR, or from WHEEL_DIR/built/, where the files that
# `--export DIR` writes go (the wheel split into parts small enough to travel
# back from a device call, and BUILD_INFO).
#
# Usage: bash scripts/gpu/setup.sh [--export DIR | --export-only DIR]
# Environment:
#   PYTHON                interpreter to set up (default: python3)
#   WHEEL_DIR             wheels and the mmcv sdist (default: .whl)
#   BUILD_DIR             mmcv build tree, wheel and logs (default: .gpu_build)
#   TORCH_CUDA_ARCH_LIST  default: the visible GPUs' (scripts/gpu/cuda_arch.py)
#   MAX_JOBS              parallel compile jobs (default: nproc)
#   MMCV_CXX_STD          C++ standard for mmcv's sources (default: the one
#                         torch's cpp_extension builds with: c++20 for torch
#                         2.11 and 2.13; mmcv 2.1.0's setup.py says c++17)
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHL=${WHEEL_DIR:-.whl}
BUILD=${BUILD_DIR:-.gpu_build}
EXPORT=""
SETUP=1
while (($#)); do
    case $1 in
        --export) EXPORT=${2:?--export needs a folder}; shift 2 ;;
        --export-only) EXPORT=${2:?--export-only needs a folder}; SETUP=0
            shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
PIP=("$PY" -m pip install --no-index --no-deps --no-cache-dir
     --disable-pip-version-check --no-warn-script-location -q)
say() { echo "[gpu-setup] $*"; }
die() { echo "[gpu-setup] error: $*" >&2; exit 1; }
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
start=$(date +%s)
shopt -s nullglob

export_wheel() {  # the built wheel in parts of 15 MiB, and its BUILD_INFO
    local whl=("$BUILD"/dist/mmcv-*.whl)
    if ((!${#whl[@]})); then
        say "nothing to export: no mmcv wheel in $BUILD/dist"
        return 0
    fi
    mkdir -p "$EXPORT"
    split -b 15M -d "${whl[0]}" "$EXPORT/$(basename "${whl[0]}").part-"
    cp "$BUILD/dist/BUILD_INFO" "$EXPORT/"
    say "mmcv wheel ($(du -h "${whl[0]}" | cut -f1)) split into $EXPORT;" \
        "put the parts and BUILD_INFO in $WHL/built/ to reuse them"
}

strip_wheel() {  # drop the extension's debug information, keep the wheel
    local whl=$1 tmp=$BUILD/unpacked
    command -v strip >/dev/null || return 0
    rm -rf "$tmp" && mkdir -p "$tmp/out"
    if "$PY" -m wheel unpack -d "$tmp" "$whl" >/dev/null &&
        strip --strip-debug "$tmp"/mmcv-*/mmcv/_ext*.so &&
        "$PY" -m wheel pack -d "$tmp/out" "$tmp"/mmcv-*/ >/dev/null; then
        mv "$tmp"/out/*.whl "$whl"
    else
        say "could not strip $whl; keeping it as built"
    fi
    rm -rf "$tmp"
}

if ((!SETUP)); then
    export_wheel
    exit 0
fi

say "machine: $(nproc) cores; $("$PY" -c 'import sys, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print(f"python {sys.version.split()[0]}, torch {torch.__version__} "
      f"(CUDA {torch.version.cuda}), {name}")')"
command -v nvcc >/dev/null || die "nvcc is not on PATH (set CUDA_HOME/PATH)"
say "$(nvcc --version | grep -i release)"

# 1. the wheels ------------------------------------------------------------
wheels=("$WHL"/*.whl)
sdists=("$WHL"/mmcv-*.tar.gz)
((${#wheels[@]})) && ((${#sdists[@]} == 1)) || die "$WHL must hold the" \
    "wheels and one mmcv sdist: run 'python scripts/gpu/fetch_wheels.py'" \
    "where there is network and carry $WHL with the working tree"
say "installing ${#wheels[@]} wheels from $WHL (offline)"
"${PIP[@]}" "${wheels[@]}"

# 2. mmcv with CUDA ops ----------------------------------------------------
mmcv_ok() {
    "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import sys
import mmcv
import torch
from mmcv.ops import nms
assert mmcv.__version__ == sys.argv[1]
if torch.cuda.is_available():  # a CPU-only mmcv refuses CUDA tensors
    box = torch.tensor([[0.0, 0.0, 4.0, 4.0]], device='cuda')
    nms(box, torch.ones(1, device='cuda'), 0.5)
EOF
}
sdist=${sdists[0]}
version=$(basename "$sdist" .tar.gz)
version=${version#mmcv-}
# The toolkit: CUDA_HOME behind an nvcc wrapper, torch's CUDA major, the
# pip-wheel layout's headers and libcudart.so link (scripts/cuda_env.py).
exports=$("$PY" scripts/cuda_env.py --exports --build-dir "$BUILD/cuda") ||
    die "the CUDA toolkit cannot build mmcv here (see the line above)"
eval "$exports"
arch=${TORCH_CUDA_ARCH_LIST:-$("$PY" scripts/gpu/cuda_arch.py)} ||
    die "no arch list (see above)"
# The C++ standard torch builds its extensions with (the -std flag of its
# cpp_extension): mmcv compiled under an older standard than libtorch built
# with torch 2.11's C++20 headers, then crashed at its first call.
std=${MMCV_CXX_STD:-$("$PY" -c 'import inspect, re
import torch.utils.cpp_extension as ext
found = re.findall(r"-std=c\+\+(\d\d)", inspect.getsource(ext))
print(f"c++{max(map(int, found))}" if found else "c++17")')}
info="mmcv=$version torch=$("$PY" -c 'import torch
print(torch.__version__, torch.version.cuda, sep=" cuda=")') arch=$arch std=$std"
say "mmcv build target: $info"
if mmcv_ok "$version"; then
    say "mmcv $version with CUDA ops is installed already"
else
    dist=$BUILD/dist
    built=("$dist"/mmcv-"$version"-*.whl)
    if ((${#built[@]})) && [[ $(cat "$dist/BUILD_INFO" 2>/dev/null) != "$info" ]]; then
        rm -f "${built[@]}"; built=()
    fi
    parts=("$WHL"/built/mmcv-"$version"-*.whl.part-*)
    if ((! ${#built[@]})) && ((${#parts[@]})) &&
        [[ $(cat "$WHL/built/BUILD_INFO" 2>/dev/null) == "$info" ]]; then
        mkdir -p "$dist"
        name=$(basename "${parts[0]}"); name=${name%.part-*}
        cat "${parts[@]}" > "$dist/$name"
        cp "$WHL/built/BUILD_INFO" "$dist/BUILD_INFO"
        built=("$dist/$name")
        say "reusing the mmcv wheel carried in $WHL/built"
    fi
    if ((! ${#built[@]})); then
        src=$BUILD/src/mmcv-$version
        if [[ ! -f $src/setup.py ]]; then
            mkdir -p "$BUILD/src"
            tar -xzf "$sdist" -C "$BUILD/src"
        fi
        sed -i -E "s/-std=c\+\+(14|17|20)'/-std=$std'/g" "$src/setup.py"
        jobs=${MAX_JOBS:-$(nproc)}
        say "building mmcv $version with CUDA ops: TORCH_CUDA_ARCH_LIST=$arch" \
            "MAX_JOBS=$jobs -std=$std (log: $BUILD/mmcv_build.log)"
        t0=$(date +%s)
        if ! MMCV_WITH_OPS=1 FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="$arch" \
            MAX_JOBS=$jobs "$PY" -m pip wheel --no-build-isolation --no-deps \
            --no-index --no-cache-dir -v -w "$dist" "$src" \
            > "$BUILD/mmcv_build.log" 2>&1; then
            grep -E "error|Error" "$BUILD/mmcv_build.log" | head -40 || true
            tail -40 "$BUILD/mmcv_build.log"
            die "mmcv build failed after $(($(date +%s) - t0)) s"
        fi
        secs=$(($(date +%s) - t0))
        built=("$dist"/mmcv-"$version"-*.whl)
        strip_wheel "${built[0]}"
        echo "$info" > "$dist/BUILD_INFO"
        echo "$secs s, $jobs jobs, $(nproc) cores, $info, $(date -u +%F)" \
            > "$BUILD/mmcv_build_time.txt"
        say "mmcv built in $secs s ($BUILD/mmcv_build_time.txt); wheel" \
            "$(du -h "${built[0]}" | cut -f1)"
    fi
    "${PIP[@]}" --force-reinstall "${built[0]}"
    mmcv_ok "$version" || die "mmcv $version installed but its CUDA ops" \
        "do not load"
fi
[[ -z $EXPORT ]] || export_wheel

# 3. mmlape and a check ----------------------------------------------------
# On the interpreter's path through a .pth file: pip's editable install of a
# setup.py project runs `setup.py develop`, which (setuptools >= 80) asks
# the network for build requirements, and there is no network here.
"$PY" -c 'import os, sys, sysconfig
path = os.path.join(sysconfig.get_paths()["purelib"], "mmlape-checkout.pth")
open(path, "w").write(os.getcwd() + "\n")'
"$PY" - <<'EOF'
import importlib.metadata as md
import torch
import mmlape.hosts  # as the tools: mmpretrain imports beside transformers 5
mmlape.hosts.apply()
import mmcv, mmdet, mmengine, mmpretrain, mmseg  # noqa: F401
import mmlape  # noqa: F401
from mmcv.ops.multi_scale_deform_attn import (
    MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch)
versions = ', '.join(f'{n} {md.version(n)}' for n in (
    'mmengine', 'mmcv', 'mmdet', 'mmsegmentation', 'mmpretrain'))
versions += f', mmlape {mmlape.__version__} ({mmlape.__path__[0]})'
print(f'[gpu-setup] {versions}')
if torch.cuda.is_available():
    g = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[8, 8], [4, 4]])
    starts = torch.tensor([0, 64])
    value = torch.randn(2, 80, 2, 16, generator=g)
    loc = torch.rand(2, 10, 2, 2, 4, 2, generator=g)
    weight = torch.rand(2, 10, 2, 2, 4, generator=g).softmax(-1)
    ref = multi_scale_deformable_attn_pytorch(value, shapes, loc, weight)
    out = MultiScaleDeformableAttnFunction.apply(
        *(t.cuda() for t in (value, shapes, starts, loc, weight)), 64)
    err = (out.cpu() - ref).abs().max().item()
    assert err < 1e-4, f'mmcv CUDA deformable attention differs by {err}'
    print(f'[gpu-setup] mmcv CUDA deformable attention runs (max abs '
          f'difference from the PyTorch path {err:.1e})')
EOF
# Requirements pip cannot see as met: opencv-python (the image's headless
# build provides cv2), and whatever the image holds in another version.
"$PY" -m pip check 2>/dev/null | grep -v -i "opencv-python" |
    sed 's/^/[gpu-setup] pip check: /' || true
say "done in $(($(date +%s) - start)) s"
