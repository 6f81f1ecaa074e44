#!/usr/bin/env bash
# The whole GPU acceptance run in a few long device calls: set the machine up
# (scripts/gpu/setup.sh), then every section of benchmarks/bench_gpu.py, one
# after another, each saving its rows as soon as it ends; at the end, one
# table of them all.
#
# A device call may last 10 minutes and the machine stays only while calls
# follow each other: `start` launches the run detached (in its own session,
# so it outlives the call) and follows it for SECONDS; `wait` follows it for
# SECONDS more (call it again within 30 s of the previous call's end). Both
# print the new log lines, then the table once the run is done, and copy the
# table, the log and the rows to $OUT when $OUT is set. Sections whose rows
# exist are not run again: `start` on the same machine resumes.
#
# Usage (repository root, on the GPU machine, .whl/ carried along):
#   bash scripts/gpu/acceptance.sh start [SECONDS]   # default 540
#   bash scripts/gpu/acceptance.sh wait [SECONDS]    # default 540
#   bash scripts/gpu/acceptance.sh run               # in the foreground
# Environment:
#   PYTHON       interpreter (default: python3)
#   BUILD_DIR    where setup.sh builds and the results go (default: .gpu_build)
#   SECTIONS     bench_gpu.py sections, in order, `kernels`
#                (benchmarks/bench_pe_add_kernels.py in three processes: the
#                per-layer add's kernels, mmlape's Triton one included,
#                with --compiled; then timm's eval steps with the add and
#                the host time per add (--models --host); then timm's train
#                steps (--models --train); its tables in kernels/) and
#                `trainpath` (benchmarks/bench_host_loop.py --section train --amp for DeiT-Ti
#                and DeiT-B: tools/train.py end to end, eager then compiled,
#                beside the model-only step and the loader, and the eager
#                model-only step profiled: the GPU's idle share and the
#                host's top operations; then DeiT-Ti eager with mmengine's
#                RuntimeInfoHook, which reads the losses every iteration;
#                its tables in trainpath/) and `host` (benchmarks/bench_host_loop.py --section overheads
#                on the GPU: the data preprocessor on a stacked batch and on
#                a list, the configs' preprocessor against mmpretrain's, the
#                optimizer's groups, the configs' accuracy metric and model
#                average against mmpretrain's and mmengine's, with their
#                results compared on the GPU; its tables in host/)
#                and `testpath` (benchmarks/bench_host_loop.py --section test --amp for
#                DeiT-Ti: tools/test.py end to end with the config's
#                evaluator and with mmpretrain's, beside the model's eval
#                step and the test loader per worker; its table in
#                testpath/)
#                and `syncs` (benchmarks/bench_host_loop.py --section syncs --amp: the training
#                loop's CUDA synchronisations per iteration on DeiT-Ti's
#                and Swin-T's configs (Swin's recipe clips the gradient
#                norm), with their LazyRuntimeInfoHook and with mmengine's
#                RuntimeInfoHook; its table in syncs/)
#                (default: syncs host trainpath testpath kernels deit
#                compile dist adapter segmenter msda)
#   KERNEL_STEPS which timm steps `kernels` times after the kernels, each in
#                a fresh process: `eval` (with the host time per add),
#                `train`, both (default: "eval train") or none ("")
#   BENCH_ARGS   more bench_gpu.py options, e.g. "--compile-arch base"
#   TRAINPATH_ARGS  more bench_host_loop.py --section train options (e.g. "--max-images
#                512", fewer images to generate)
#   TESTPATH_ARGS   more bench_host_loop.py --section test options (e.g. "--families
#                deit,deit-base")
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
BUILD=${BUILD_DIR:-.gpu_build}
DIR=$BUILD/acceptance
SECTIONS=${SECTIONS:-syncs host trainpath testpath kernels deit compile dist adapter segmenter msda}
KERNEL_STEPS=${KERNEL_STEPS-eval train}
mode=${1:-run}
seconds=${2:-540}

trainpath() {
    local tp=$DIR/trainpath mode
    mkdir -p "$tp"
    # lazylog: DeiT-Ti's eager run again with the opt-in LazyRuntimeInfoHook
    # (speedups.lazy_log: the losses read at logs; the configs' default,
    # mmengine's RuntimeInfoHook, reads them every iteration)
    local opts
    for mode in eager compiled lazylog; do
        [[ -f $tp/$mode.json ]] && continue
        case $mode in
        eager) opts="--families deit,deit-base --profile-steps 10" ;;
        compiled) opts="--families deit,deit-base --compile" ;;
        lazylog) opts="--families deit --parts train --runtime-info LazyRuntimeInfoHook" ;;
        esac
        # shellcheck disable=SC2086  # opts, TRAINPATH_ARGS: lists of options
        "$PY" benchmarks/bench_host_loop.py --section train --amp \
            --work-root "$tp/work" --out "$tp/$mode.md" \
            --json "$tp/$mode.part" $opts \
            ${TRAINPATH_ARGS:-} && mv "$tp/$mode.part" "$tp/$mode.json" ||
            echo "[acceptance] trainpath $mode: bench_host_loop.py --section train failed"
    done
}

testpath() {
    # tools/test.py end to end, the config's evaluator against mmpretrain's
    local t=$DIR/testpath
    mkdir -p "$t"
    # shellcheck disable=SC2086  # TESTPATH_ARGS is a list of options
    "$PY" benchmarks/bench_host_loop.py --section test --families deit \
        --amp --work-root "$t/work" --out "$t/testpath.md" --json "$t/testpath.json" \
        ${TESTPATH_ARGS:-} && cp "$t/testpath.json" "$DIR/testpath.done" ||
        echo "[acceptance] testpath: bench_host_loop.py --section test failed"
}

kernels() {
    # the kernels (profiled, compiled), then timm's steps in fresh
    # processes: a process that profiled and compiled steps slower. The
    # section counts as done only when every part ran.
    local k=$DIR/kernels part failed=0
    "$PY" benchmarks/bench_pe_add_kernels.py --compiled --reps 100 \
        --rounds 15 --out "$k" || {
        echo "[acceptance] kernels: bench_pe_add_kernels.py failed"
        return 0
    }
    for part in $KERNEL_STEPS; do
        case $part in
            eval) set -- --host ;;
            train) set -- --train ;;
            *) echo "[acceptance] kernels: unknown KERNEL_STEPS part $part"
               failed=1
               continue ;;
        esac
        if "$PY" benchmarks/bench_pe_add_kernels.py --no-kernels --models \
            "$@" --reps 100 --rounds 15 --out "$k/$part"; then
            cat "$k/$part/pe_add_kernels.md" >> "$k/pe_add_kernels.md" ||
                failed=1
        else
            echo "[acceptance] kernels: bench_pe_add_kernels.py $part failed"
            failed=1
        fi
    done
    if ((failed == 0)); then
        cp "$k/pe_add_kernels.json" "$DIR/kernels.done" || true
    fi
}

syncs() {
    # the training loop's synchronisations per iteration (the config's
    # runtime_info hook against mmengine's), DeiT-Ti's and Swin-T's
    # configs, --amp
    local y=$DIR/syncs
    mkdir -p "$y"
    "$PY" benchmarks/bench_host_loop.py --section syncs --amp \
        --families deit,swin \
        --work-root "$y/work" \
        --out "$y/syncs.md" --json "$y/syncs.json" &&
        cp "$y/syncs.json" "$DIR/syncs.done" ||
        echo "[acceptance] syncs: bench_host_loop.py --section syncs failed"
}

host() {
    # the host work around the model: the data preprocessor on a stacked
    # batch against a list, the configs' preprocessor against mmpretrain's,
    # the optimizer's groups, the accuracy metric, the model average
    local h=$DIR/host
    mkdir -p "$h"
    "$PY" benchmarks/bench_host_loop.py --section overheads --device cuda \
        --out "$h/host.md" \
        --json "$h/host.json" && cp "$h/host.json" "$DIR/host.done" ||
        echo "[acceptance] host: bench_host_loop.py --section overheads failed"
}

run_all() {
    mkdir -p "$DIR"
    echo running > "$DIR/status"
    echo $$ > "$DIR/pid"
    trap '[[ $(cat "$DIR/status") == done ]] || echo failed > "$DIR/status"' \
        EXIT
    bash scripts/gpu/setup.sh
    for section in $SECTIONS; do
        if [[ -f $DIR/$section.json ]]; then
            echo "[acceptance] $section: rows exist, not run again"
            continue
        fi
        if [[ $section == trainpath || $section == kernels ||
            $section == host || $section == testpath ||
            $section == syncs ]]; then
            [[ -f $DIR/$section.done ]] || $section
            continue
        fi
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
        if "$PY" benchmarks/bench_gpu.py --sections "$section" \
            --json "$DIR/$section.part" --work-root "$DIR/dist" \
            ${BENCH_ARGS:-}; then
            mv "$DIR/$section.part" "$DIR/$section.json"
        else
            echo "[acceptance] $section: bench_gpu.py failed (see above)"
        fi
    done
    local rows=("$DIR"/*.json)
    if [[ -f ${rows[0]} ]]; then
        "$PY" benchmarks/bench_gpu.py --merge "${rows[@]}" > "$DIR/table.md"
    else  # only the sections with their own tables ran
        : > "$DIR/table.md"
    fi
    cat "$DIR"/syncs/*.md "$DIR"/kernels/*.md "$DIR"/host/*.md \
        "$DIR"/trainpath/*.md "$DIR"/testpath/*.md >> "$DIR/table.md" \
        2>/dev/null || true
    echo done > "$DIR/status"
}

export_results() {
    [[ -n ${OUT:-} ]] || return 0
    [[ -f $DIR/table.md ]] && cp "$DIR/table.md" "$OUT/"
    [[ -f $DIR/log.txt ]] && tail -c 4000000 "$DIR/log.txt" > "$OUT/log.txt"
    local files=()
    for f in "$DIR"/*.json "$DIR"/kernels/* "$DIR"/kernels/*/* "$DIR"/host/* \
        "$DIR"/trainpath/*.json "$DIR"/trainpath/*.part \
        "$DIR"/trainpath/*.md "$DIR"/trainpath/work/*-profile.txt \
        "$DIR"/testpath/*.md "$DIR"/testpath/*.json \
        "$DIR"/syncs/*.md "$DIR"/syncs/*.json \
        "$BUILD/mmcv_build_time.txt"; do
        [[ -f $f ]] && files+=("$f")
    done
    ((${#files[@]})) && tar -czf "$OUT/results.tar.gz" "${files[@]}"
    # the built mmcv wheel, to carry to a later machine (.whl/built/)
    bash scripts/gpu/setup.sh --export-only "$OUT" > /dev/null
    return 0
}

follow() {
    local end=$((SECONDS + $1)) offset=0 status
    [[ -f $DIR/status ]] || { echo "no run in $DIR: use 'start'" >&2; exit 2; }
    [[ -f $DIR/offset ]] && offset=$(cat "$DIR/offset")
    while :; do
        status=$(cat "$DIR/status")
        if [[ $status == running && -f $DIR/pid ]] &&
            ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
            status=stopped
        fi
        size=$(stat -c %s "$DIR/log.txt" 2>/dev/null || echo 0)
        if ((size > offset)); then
            tail -c +$((offset + 1)) "$DIR/log.txt" | head -c $((size - offset))
            offset=$size
            echo "$offset" > "$DIR/offset"
        fi
        [[ $status != running ]] && break
        ((SECONDS < end)) || break
        sleep 10
    done
    export_results
    case $status in
        done) echo; cat "$DIR/table.md" ;;
        running) echo "[acceptance] still running: call 'wait' again" ;;
        *) echo "[acceptance] the run ended ($status) before the table:" \
               "see the log above"; exit 1 ;;
    esac
}

case $mode in
    run) run_all ;;
    start)
        mkdir -p "$DIR"
        if [[ -f $DIR/pid ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
            echo "[acceptance] a run is going on already"
        else
            echo running > "$DIR/status"
            rm -f "$DIR/offset" "$DIR/table.md" "$DIR/pid"
            setsid nohup bash "$0" run > "$DIR/log.txt" 2>&1 < /dev/null &
        fi
        follow "$seconds" ;;
    wait) follow "$seconds" ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" ;;
    *) echo "error: unknown command $mode (start, wait, run)" >&2; exit 2 ;;
esac
