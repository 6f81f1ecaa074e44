#!/usr/bin/env bash
# Run one of mmlape's tools on a Slurm cluster: one task per GPU, started by
# srun, set up by mmengine's slurm launcher (SLURM_PROCID, SLURM_NTASKS,
# SLURM_NODELIST). tools/slurm_train.sh and tools/slurm_test.sh call it:
#
#   tools/slurm_launch.sh PARTITION JOB_NAME SCRIPT [ARGS...]
#
# Environment, with the OpenMMLab scripts' names:
#   GPUS           tasks (one per GPU) in all               (default 8)
#   GPUS_PER_NODE  tasks and GPUs per node          (default min(GPUS, 8))
#   CPUS_PER_TASK  CPU cores per task                       (default 5)
#   SRUN_ARGS      more srun options, e.g. "--time=72:00:00 --qos=high"
#   PYTHON         interpreter the tasks run              (default python3)
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
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
    "${PYTHON:-python3}" -u "${@:3}"
