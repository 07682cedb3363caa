#!/usr/bin/env bash
# The fused kernel and the compiled path on a GPU in one run (docs/performance.md), results under $OUT:
#   1. exactness: benchmarks/fused_check.py, one process per case (compiled in parallel), merged into
#      fused_check.csv; at the same time the timed kernels and graphs are compiled once, each in its own process
#      (warm-up runs fill Triton's and TorchInductor's caches, which the timed runs then read);
#   2. layer: one layer, forward + backward, the paths of LAYER_ROWS and each tile setting side by side, with the
#      bf16 error rows (fused_layer.csv);
#   3. step: training steps of METHODS on the paths of IMPLS (gpu_step.csv); then, from the layer's and the steps'
#      rows, the compiled path's options on CUDA that they support (benchmarks/cuda_options.py, cuda_options.txt);
#   3b. calibrate: benchmarks/calibrate_gpu.py's cases of CALIBRATE with those options (gpu_calibration.csv: the
#      estimate's rows for them, to commit with the options);
#   4. feature: the feature map alone, the convolutions against the Triton feature map's kernels at each of
#      FEATURE_TILES (benchmarks/feature_map.py, feature_map.csv);
#   5. eval: evaluation's forward pass of a 350M DAPE1x3-Kerple at T 8192 (fused_eval.csv).
# STEPS picks among check, feature, layer, step, calibrate, eval (default: all but calibrate); they run in the order
# above. LAYER_ROWS the layer's rows, LAYER_PROFILE those of them whose kernels step 2 also profiles (each kernel's
# device time: LAYER_PROFILE=fused for the fused kernel's three, TILES for its tile settings side by side), METHODS
# and IMPLS the training steps' cases, CALIBRATE calibrate_gpu.py's arguments. Each step runs
# under its own time limit, LIMIT seconds, so that one that fails or hangs leaves the others' results; with BUDGET,
# the whole run's seconds, a step gets at most what is left of it and one with under MIN_STEP seconds left is
# skipped (said in the log): a bounded run's time goes to the first steps first.
#
#   OUT=/tmp/fused bash benchmarks/fused_device.sh                     # on a GPU
#   SMOKE=1 OUT=/tmp/fused bash benchmarks/fused_device.sh             # tiny shapes in Triton's CPU interpreter
set -u
start=$(date +%s)  # BUDGET counts from here
OUT=${OUT:-/tmp/fused_device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
TILES=${TILES-"16.16.8.16.8 16.16.4.16.4"}  # set empty: the default tiles only
LAYER_ROWS=${LAYER_ROWS:-"sdpa sdpa-bias materialized paper-compiled compiled compiled-keep fused materialized-triton compiled-triton compiled-triton-keep"}
FEATURE_TILES=${FEATURE_TILES:-"8.16.8 4.32.8 2.64.8 2.32.4"}
IMPLS=${IMPLS:-"materialized compiled fused"}
METHODS=${METHODS:-"NoPE Kerple DAPE1x3-Kerple"}
LAYER_PROFILE=${LAYER_PROFILE:-}
STEPS=" ${STEPS:-check feature layer step eval} "
BUDGET=${BUDGET:-}
MIN_STEP=${MIN_STEP:-60}  # a step with fewer seconds of BUDGET left is skipped
for name in BUDGET MIN_STEP; do
    value=${!name}
    if [ -n "$value" ] && ! [[ "$value" =~ ^[0-9]+$ ]]; then
        echo "$name: $value is not allowed; allowed values: a whole number of seconds" >&2
        exit 2
    fi
done
exec > >(tee "$OUT/log.txt") 2>&1  # the whole log comes back with the results (log.txt, this run's only)
has() { [[ "$STEPS" == *" $1 "* ]]; }
if [ "${SMOKE:-0}" = 1 ]; then
    export TRITON_INTERPRET=1
    CHECK="--device cpu --length 40 --heads 4 --head-dim 8 --dape-width 6"
    LAYER="--device cpu --shapes 2x40 --heads 4 --head-dim 8 --rounds 2 --warmup 1"
    STEP="--device cpu --size tiny --vocab-size 512 --tokens 128 --rounds 2 --warmup 1"
    LENGTHS=${LENGTHS:-32}
    EVAL="--device cpu --shapes --eval-size tiny --eval-length 48 --vocab-size 512 --rounds 2 --warmup 1"
    FEATURE="--device cpu --shapes 1x24 --heads 4 --dape-width 6 --rounds 2 --warmup 1"
    FEATURE_TILES="2.8.4"
    CALIBRATE=${CALIBRATE:-"--device cpu --config configs/gpu.yaml --sizes tiny --methods Kerple DAPE1x3-Kerple \
--max-cases 2 --steps 1 --warmup 0"}
    LIMIT=${LIMIT:-600}
    CASES=${CASES:-"kerple:v2-causal nope:v1"}  # fp32: the interpreter's bf16 loads are wrong
else
    CASES=${CASES:-"kerple:v2-causal:bf16 nope:v1:bf16 fire:v2-same-no-tril:bf16 alibi:v2-k5:bf16"}
    CHECK="" LAYER="--rounds 10" STEP="--rounds 5 --warmup 2" EVAL="--shapes --eval-size 350M --rounds 5"
    FEATURE="--rounds 10"
    # the first two cases: Kerple and DAPE1x3-Kerple (D_DAPE 32) at T 512 × 32, 8 micro-batches a step
    CALIBRATE=${CALIBRATE:-"--config configs/paper.yaml --sizes 125M --methods Kerple DAPE1x3-Kerple --train-lens 512 \
--max-cases 2 --steps 5 --warmup 2"}
    LIMIT=${LIMIT:-240}
    LENGTHS=${LENGTHS:-"512 2048"}
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv
date -u +"measured %Y-%m-%dT%H:%M:%SZ"
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

elapsed() { echo $(( $(date +%s) - start )); }
left() {  # seconds left of BUDGET (without one: LIMIT)
    if [ -n "$BUDGET" ]; then echo $(( BUDGET - $(elapsed) )); else echo "$LIMIT"; fi
}
limit() {  # seconds the next step may run: LIMIT, or what is left of BUDGET if less
    local seconds
    seconds=$(left)
    seconds=$(( seconds < LIMIT ? seconds : LIMIT ))
    echo $(( seconds > 1 ? seconds : 1 ))  # never 0: timeout 0 would mean no limit
}
run() {  # run NAME COMMAND...: the command under limit's seconds, or skipped, said in the log
    local name=$1
    shift
    if [ -n "$BUDGET" ] && [ "$(left)" -lt "$MIN_STEP" ]; then
        echo "$name skipped: $(left) s of BUDGET=$BUDGET left"
        return 0
    fi
    if timeout "$(limit)" "$@"; then
        echo "$name done: $(elapsed) s"
    else
        echo "$name failed (exit $?): $(elapsed) s"
    fi
}
compiled_of() {  # the words of $1 that compile graphs (the compiled path's rows and cases)
    local word out=""
    for word in $1; do [[ "$word" == *compiled* ]] && out="$out $word"; done
    echo $out
}

pids=()
if has check; then
    for case in $CASES; do
        timeout "$(limit)" $PY benchmarks/fused_check.py $CHECK --cases "$case" \
            --out "/tmp/fused_check_${case//:/_}.csv" &
        pids+=($!)
    done
fi
if has eval; then  # the evaluation model's kernels compiled beside the others
    timeout "$(limit)" $PY benchmarks/fused_layer.py $EVAL --rounds 1 --warmup 0 --out /tmp/fused_eval_warm.csv \
        > /dev/null 2>&1 &
    pids+=($!)
fi
if has layer; then  # each compiled row's graphs (every shape) in its own process: compiled in parallel, once
    for row in $(compiled_of "$LAYER_ROWS"); do
        timeout "$(limit)" $PY benchmarks/fused_layer.py $LAYER --rows "$row" --rounds 1 --warmup 0 \
            --out "/tmp/fused_warm_$row.csv" > "/tmp/fused_warm_$row.log" 2>&1 &
        pids+=($!)
    done
fi
warm_impls=$(compiled_of "$IMPLS")
warm_methods=$(for m in $METHODS; do [[ "$m" == DAPE* ]] && echo "$m"; done)
if has step && [ -n "$warm_impls" ] && [ -n "$warm_methods" ]; then
    # the steps' graphs at the first length (a second length's would hold the GPU's memory twice beside the others)
    timeout "$(limit)" $PY benchmarks/gpu_step.py $STEP --methods $warm_methods --lengths ${LENGTHS%% *} \
        --modes eager --dape-impls $warm_impls --rounds 0 --warmup 1 --out /tmp/gpu_step_warm.csv \
        > /tmp/gpu_step_warm.log 2>&1 &
    pids+=($!)
fi
if { has layer && [[ " $LAYER_ROWS " == *" fused "* ]]; } || { has step && [[ " $IMPLS " == *" fused "* ]]; }; then
    timeout "$(limit)" $PY benchmarks/fused_layer.py $LAYER --rows fused ${TILES:+--fused-tiles $TILES} --warmup 1 \
        --rounds 1 --out /tmp/fused_warm.csv > /tmp/fused_warm.log 2>&1 \
        || { echo "warm-up failed:"; tail -30 /tmp/fused_warm.log; }
fi
for pid in "${pids[@]}"; do wait "$pid" || echo "a check or warm-up failed (exit $?)"; done
if has check; then
    $PY - "$OUT/fused_check.csv" /tmp/fused_check_*.csv <<'PYEOF'
import sys
import pandas as pd
frames = [pd.read_csv(path) for path in sys.argv[2:]]
if frames:
    pd.concat(frames).to_csv(sys.argv[1], index=False)
PYEOF
fi
echo "checks and compilation: $(elapsed) s"

if has layer; then
    run "layer timing" $PY benchmarks/fused_layer.py $LAYER --rows $LAYER_ROWS \
        ${TILES:+--fused-tiles $TILES} ${LAYER_PROFILE:+--profile $LAYER_PROFILE} --check --out "$OUT/fused_layer.csv"
fi
if has step; then
    run "step timing" $PY benchmarks/gpu_step.py $STEP --methods $METHODS --lengths $LENGTHS --modes eager \
        --dape-impls $IMPLS --out "$OUT/gpu_step.csv"
fi
if [[ -f "$OUT/fused_layer.csv" ]]; then  # which options of the compiled path these rows support (the host, seconds)
    echo "== the compiled path's options on CUDA (benchmarks/cuda_options.py)"
    $PY benchmarks/cuda_options.py "$OUT" > "$OUT/cuda_options.txt" 2>&1 || echo "cuda_options.py failed (exit $?)"
    cat "$OUT/cuda_options.txt"
fi
if has calibrate; then  # the estimate's rows for the options just named (without a layer run: those of today)
    options=$($PY benchmarks/cuda_options.py "$OUT" --text 2> /dev/null)
    run "calibration" $PY benchmarks/calibrate_gpu.py $CALIBRATE ${options:+--path-options "$options"} \
        --out "$OUT/gpu_calibration.csv"
fi
if has feature; then
    run "feature map timing" $PY benchmarks/feature_map.py $FEATURE --tiles $FEATURE_TILES \
        --out "$OUT/feature_map.csv"
fi
if has eval; then
    run "evaluation timing" $PY benchmarks/fused_layer.py $EVAL --out "$OUT/fused_eval.csv"
fi
echo "all done: $(elapsed) s"
