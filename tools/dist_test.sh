#!/usr/bin/env bash
# Distributed testing with torchrun: tools/dist_test.sh CONFIG CHECKPOINT GPUS [ARGS]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR and PORT as in OpenMMLab.
# Without CUDA the same command runs GPUS CPU processes (gloo). Wrong input
# ends with the first rank's one-line error and exit status 2.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
TOOLS="$(cd "$(dirname "$0")" && pwd)"
GPUS=$GPUS exec bash "$TOOLS/dist_launch.sh" "$TOOLS/test.py" \
    "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
