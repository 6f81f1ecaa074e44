#!/usr/bin/env bash
# Run one of mmlape's tools under torchrun: tools/dist_launch.sh SCRIPT ARGS
# (tools/dist_train.sh and tools/dist_test.sh call it). Multi-node: NNODES,
# NODE_RANK, MASTER_ADDR and PORT as in OpenMMLab; GPUS processes per node.
#
# Each rank that stops on wrong input leaves its one-line error in
# $MMLAPE_ERROR_DIR, and a rank that stops on another error says so
# (tools/common.py). When the first rank to fail failed on input (the others
# then fail as a consequence, or are stopped by torchrun), the run ends with
# the first rank's input error and exit status 2, after torchrun's own
# report; otherwise with torchrun's status. A stop request (SIGTERM, SIGINT,
# SIGHUP) goes to torchrun, which stops the ranks; the script then ends,
# once they have, with 128 + the signal's number (143 for SIGTERM), without
# torchrun's traceback (tools/torchrun.py).
set -uo pipefail
SCRIPT=$1
shift
GPUS=${GPUS:?GPUS must be set}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# torchrun sets one OpenMP thread per rank unless told, with a banner.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

ERROR_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mmlape-errors.XXXXXX")"
trap 'rm -rf "$ERROR_DIR"' EXIT

PYTHONPATH="$ROOT:${PYTHONPATH:-}" MMLAPE_ERROR_DIR="$ERROR_DIR" \
"${PYTHON:-python3}" "$ROOT/tools/torchrun.py" \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$SCRIPT" "$@" &
PID=$!
# Pass a stop request on to torchrun, which stops its ranks.
STOPPED=0
for SIG in TERM INT HUP; do
    # shellcheck disable=SC2064
    trap "STOPPED=\$(kill -l $SIG); kill -$SIG $PID 2>/dev/null" "$SIG"
done
STATUS=0
wait "$PID" || STATUS=$?
while kill -0 "$PID" 2>/dev/null; do
    STATUS=0
    wait "$PID" || STATUS=$?
done
if [ "$STOPPED" -ne 0 ]; then
    exit $((128 + STOPPED))
fi

if [ "$STATUS" -ne 0 ]; then
    shopt -s nullglob
    REPORTS=("$ERROR_DIR"/rank*.input "$ERROR_DIR"/rank*.bug)
    if [ "${#REPORTS[@]}" -gt 0 ]; then
        # Each report starts with the time it was written (ns).
        EARLIEST=$(for f in "${REPORTS[@]}"; do
            echo "$(cut -d' ' -f1 "$f" | head -n 1) $f"
        done | sort -n | head -n 1 | cut -d' ' -f2-)
        if [[ "$EARLIEST" == *.input ]]; then
            INPUT=("$ERROR_DIR"/rank*.input)
            FIRST=$(printf '%s\n' "${INPUT[@]}" | sort -V | head -n 1)
            echo "error: $(head -n 1 "$FIRST" | cut -d' ' -f2-)" >&2
            exit 2
        fi
    fi
fi
exit "$STATUS"
