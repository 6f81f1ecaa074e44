#!/usr/bin/env bash
# Train on a Slurm cluster (tools/slurm_launch.sh: one task per GPU; GPUS,
# GPUS_PER_NODE, CPUS_PER_TASK, SRUN_ARGS and PYTHON as documented there).
#
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [PY_ARGS...]
#
# PY_ARGS (everything after WORK_DIR) go to tools/train.py, e.g. --resume or
# --cfg-options.
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [PY_ARGS...]" >&2
    exit 2
fi
TOOLS="$(cd "$(dirname "$0")" && pwd)"
exec bash "$TOOLS/slurm_launch.sh" "$1" "$2" "$TOOLS/train.py" "$3" \
    --work-dir="$4" --launcher=slurm "${@:5}"
