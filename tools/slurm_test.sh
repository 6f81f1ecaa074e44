#!/usr/bin/env bash
# Test a checkpoint on a Slurm cluster (tools/slurm_launch.sh: one task per
# GPU; GPUS, GPUS_PER_NODE, CPUS_PER_TASK, SRUN_ARGS and PYTHON as
# documented there).
#
#   tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [PY_ARGS...]
#
# PY_ARGS (everything after CHECKPOINT) go to tools/test.py, e.g.
# --work-dir, --out or --cfg-options.
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [PY_ARGS...]" >&2
    exit 2
fi
TOOLS="$(cd "$(dirname "$0")" && pwd)"
exec bash "$TOOLS/slurm_launch.sh" "$1" "$2" "$TOOLS/test.py" "$3" "$4" \
    --launcher=slurm "${@:5}"
