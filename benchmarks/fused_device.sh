#!/usr/bin/env bash
# The fused kernel on a GPU in one run (docs/performance.md, "The fused kernel"), results under $OUT:
#   1. exactness: benchmarks/fused_check.py, one process per case (compiled in parallel), merged into
#      fused_check.csv; at the same time the timed kernels are compiled once (a warm-up run fills Triton's cache);
#   2. one layer, forward + backward, the paths of LAYER_ROWS and each tile setting side by side, with the bf16
#      error row (fused_layer.csv);
#   3. training steps of NoPE, Kerple and DAPE1x3-Kerple on the paths of IMPLS (gpu_step.csv);
#   4. evaluation's forward pass of a 350M DAPE1x3-Kerple at T 8192 (fused_eval.csv);
#   5. profile: each kernel's device time per tile setting, and the layer's forward-only pass (fused_profile.csv);
#   6. feature: the feature map alone, the convolutions against the Triton feature map's kernels at each of
#      FEATURE_TILES (benchmarks/feature_map.py, feature_map.csv; run first, before the other timings).
# STEPS picks among check, feature, layer, step, eval, profile (default: all but profile); LAYER_ROWS the layer's rows,
# LAYER_PROFILE those of them whose kernels step 2 also profiles, METHODS and IMPLS the training steps' cases.
# Each step runs under its own time limit, so that one that fails or hangs leaves the others' results.
#
#   OUT=/tmp/fused bash benchmarks/fused_device.sh                     # on a GPU
#   SMOKE=1 OUT=/tmp/fused bash benchmarks/fused_device.sh             # tiny shapes in Triton's CPU interpreter
set -u
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
PROFILE_TILES=${PROFILE_TILES:-"16.32.16.16.8 16.32.16.16.8+uncapped 16.32.16.32.8 16.32.16.16.4 16.32.16.32.16"}
STEPS=" ${STEPS:-check feature layer step eval} "
has() { [[ "$STEPS" == *" $1 "* ]]; }
if [ "${SMOKE:-0}" = 1 ]; then
    export TRITON_INTERPRET=1
    CHECK="--device cpu --length 40 --heads 4 --head-dim 8 --dape-width 6"
    LAYER="--device cpu --shapes 2x40 --heads 4 --head-dim 8 --rounds 2 --warmup 1"
    STEP="--device cpu --size tiny --vocab-size 512 --tokens 128 --rounds 2 --warmup 1"
    LENGTHS=${LENGTHS:-32}
    EVAL="--device cpu --shapes --eval-size tiny --eval-length 48 --vocab-size 512 --rounds 2 --warmup 1"
    PROFILE="--device cpu --shape 2x40 --heads 4 --head-dim 8 --dape-width 6 --reps 1"
    FEATURE="--device cpu --shapes 1x24 --heads 4 --dape-width 6 --rounds 2 --warmup 1"
    FEATURE_TILES="2.8.4"
    LIMIT=600
    CASES=${CASES:-"kerple:v2-causal nope:v1"}  # fp32: the interpreter's bf16 loads are wrong
else
    CASES=${CASES:-"kerple:v2-causal:bf16 nope:v1:bf16 fire:v2-same-no-tril:bf16 alibi:v2-k5:bf16"}
    CHECK="" LAYER="--rounds 10" STEP="--rounds 5 --warmup 2" EVAL="--shapes --eval-size 350M --rounds 5"
    PROFILE="--reps 5"
    FEATURE="--rounds 10"
    LIMIT=${LIMIT:-240}
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
start=$(date +%s)

pids=()
if has check; then
    for case in $CASES; do
        timeout $LIMIT $PY benchmarks/fused_check.py $CHECK --cases "$case" --out "/tmp/fused_check_${case//:/_}.csv" &
        pids+=($!)
    done
fi
if has profile; then  # each setting compiled in its own process, beside the checks
    for spec in $PROFILE_TILES; do
        timeout $LIMIT $PY benchmarks/fused_profile.py $PROFILE --tiles "$spec" --warm-only > /dev/null 2>&1 &
        pids+=($!)
    done
fi
if has eval; then  # the evaluation model's kernels compiled beside the others
    timeout $LIMIT $PY benchmarks/fused_layer.py $EVAL --rounds 1 --warmup 0 --out /tmp/fused_eval_warm.csv \
        > /dev/null 2>&1 &
    pids+=($!)
fi
if { has layer && [[ " $LAYER_ROWS " == *" fused "* ]]; } || { has step && [[ " $IMPLS " == *" fused "* ]]; }; then
    timeout $LIMIT $PY benchmarks/fused_layer.py $LAYER --rows fused ${TILES:+--fused-tiles $TILES} --warmup 1 \
        --rounds 1 --out /tmp/fused_warm.csv > /tmp/fused_warm.log 2>&1 \
        || { echo "warm-up failed:"; tail -30 /tmp/fused_warm.log; }
fi
for pid in "${pids[@]}"; do wait "$pid" || echo "a check or warm-up failed (exit $?)"; done
if has check; then
    $PY - "$OUT/fused_check.csv" /tmp/fused_check_*.csv <<'EOF'
import sys
import pandas as pd
frames = [pd.read_csv(path) for path in sys.argv[2:]]
if frames:
    pd.concat(frames).to_csv(sys.argv[1], index=False)
EOF
fi
echo "checks and compilation: $(( $(date +%s) - start )) s"

if has feature; then
    timeout $LIMIT $PY benchmarks/feature_map.py $FEATURE --tiles $FEATURE_TILES --out "$OUT/feature_map.csv" \
        || echo "feature map timing failed (exit $?)"
    echo "feature map timing done: $(( $(date +%s) - start )) s"
fi
if has profile; then
    timeout $LIMIT $PY benchmarks/fused_profile.py $PROFILE --tiles $PROFILE_TILES --forward-only \
        --out "$OUT/fused_profile.csv" || echo "profile failed (exit $?)"
    echo "profile done: $(( $(date +%s) - start )) s"
fi
if has layer; then
    timeout $LIMIT $PY benchmarks/fused_layer.py $LAYER --rows $LAYER_ROWS \
        ${TILES:+--fused-tiles $TILES} ${LAYER_PROFILE:+--profile $LAYER_PROFILE} --check \
        --out "$OUT/fused_layer.csv" || echo "layer timing failed (exit $?)"
    echo "layer timing done: $(( $(date +%s) - start )) s"
fi
if has step; then
    timeout $LIMIT $PY benchmarks/gpu_step.py $STEP --methods $METHODS \
        --lengths ${LENGTHS:-512 2048} --modes eager --dape-impls $IMPLS --out "$OUT/gpu_step.csv" \
        || echo "step timing failed (exit $?)"
    echo "step timing done: $(( $(date +%s) - start )) s"
fi
if has eval; then
    timeout $LIMIT $PY benchmarks/fused_layer.py $EVAL --out "$OUT/fused_eval.csv" \
        || echo "evaluation timing failed (exit $?)"
fi
echo "all done: $(( $(date +%s) - start )) s"
