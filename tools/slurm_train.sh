#!/usr/bin/env bash
# Train on a Slurm cluster: one task per GPU, started by srun, set up by
# mmengine's slurm launcher (SLURM_PROCID, SLURM_NTASKS, SLURM_NODELIST).
#
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [PY_ARGS...]
#
# PY_ARGS (everything after WORK_DIR) go to tools/train.py, e.g. --resume or
# --cfg-options. Environment, with the OpenMMLab scripts' names:
#   GPUS           tasks (one per GPU) in all               (default 8)
#   GPUS_PER_NODE  tasks and GPUs per node          (default min(GPUS, 8))
#   CPUS_PER_TASK  CPU cores per task                       (default 5)
#   SRUN_ARGS      more srun options, e.g. "--time=72:00:00 --qos=high"
#   PYTHON         interpreter the tasks run              (default python3)
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [PY_ARGS...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
PY_ARGS=("${@:5}")
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$((GPUS < 8 ? GPUS : 8))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
read -r -a SRUN_EXTRA <<< "${SRUN_ARGS:-}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
for name in GPUS GPUS_PER_NODE CPUS_PER_TASK; do
    if ! [[ ${!name} =~ ^[1-9][0-9]*$ ]]; then
        echo "error: $name must be a positive integer, got '${!name}'" >&2
        exit 2
    fi
done

PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    "${SRUN_EXTRA[@]}" \
    "${PYTHON:-python3}" -u "$ROOT/tools/train.py" "$CONFIG" \
    --work-dir="$WORK_DIR" --launcher=slurm "${PY_ARGS[@]}"
