#!/usr/bin/env bash
# One-shot GPU verification and benchmarks for a single-GPU (H200) machine.
#
#   OUT=/some/folder bash bench/gpu_suite.sh [bench|runs|all] [STEP ...]
#
# Groups (each fits in 10 minutes; on a runner with a 10-minute limit run `bench` and `runs` separately):
#   bench: env, pytest (CUDA kernel/model/fused-optimizer tests; the recording API on NCCL), bench_transpose, bench_transpose_tiles, bench_head_layout,
#          bench_loss_kernels, bench_optimizer, bench_polar_express,
#          bench_record_overhead (eager and compiled FP8 head, flush step and overlap), bench_record_calls, layout_cases, bench_throughput (eager + torch.compile), bench_step_kernels, bench_host
#   runs:  env, commscope run at ws 1 (NCCL, profiled) + report/hooks/layout on it, a compiled FP8-head run
#          + report, both head layouts
#          (grad-accum 2, profiled) + layout on each, 4 gloo ranks sharing the GPU + report/hooks, and
#          (when `commscope run` has --optimizer-partition) the same 4 ranks with the alpha-lpt partition,
#          compared with bench/bench_partition.py
#   all:   both (~15 minutes)
# Naming STEPs after the group runs only those steps of it.
#
# Every step runs under `timeout` (SIGINT first, so commscope run stops its ranks cleanly), capped by a
# global deadline (SUITE_BUDGET_S, default 540 s) so the suite ends with its results packed; a failing
# step never stops the others. After every step bench/suite_collect.py rewrites the few files that come
# back from $OUT: suite.log (each step's command, output tail, exit code, seconds), steps.txt (one line
# per step), bench_results.json (every JSON result), bench.md (every markdown snippet), runs.tar.gz
# (the run directories' small files + traces that fit).
#
# Needs: python3 with torch (CUDA) and triton; typer, rich, pandas, scipy. orjson, plotly, narwhals,
# msgspec and isal may be missing on an offline GPU machine: bring them as wheels in .whl/ (bench/README.md says how); they are installed here first
# (SUITE_SKIP_WHEELS=1 skips that).
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
: "${OUT:?set OUT to the folder that should receive the results}"
GROUP=${1:-all}
shift || true
ONLY=" $* "
WORK=${SUITE_WORK:-/tmp/commscope-suite-$GROUP}
BUDGET=${SUITE_BUDGET_S:-540}
DEADLINE=$(( $(date +%s) + BUDGET ))
RESERVE=20   # seconds kept for the last collect

case "$GROUP" in bench|runs|all|multi|drills) ;; *) echo "group must be bench, runs, all, multi or drills, not '$GROUP'" >&2; exit 2 ;; esac
rm -rf "$WORK" && mkdir -p "$WORK/results" "$WORK/runs" "$WORK/logs" "$OUT"

# Single GPU, but keep NVLink multicast off in every child, as the machines' notes require.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [[ -z "${SUITE_SKIP_WHEELS:-}" ]] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
CS="python3 -m commscope"
# SUITE_DEVICE=cpu: the same steps on CPU with the tiny preset, to check the suite itself without a GPU.
DEV=${SUITE_DEVICE:-cuda}
PRESET=$([[ $DEV == cuda ]] && echo speedrun || echo tiny)
R="$WORK/results"
# Four ranks share the one GPU: 8 sequences each (the speedrun default of 24 per rank would need ~4× the memory)
GLOO4_BATCH=$([[ $DEV == cuda ]] && echo "--batch-size 32" || echo "")
RUNS="$WORK/runs"

collect() { python3 bench/suite_collect.py --work "$WORK" --out "$OUT" >>"$OUT/suite.log" 2>&1; }

# SUITE_THROUGHPUT_VARIANTS, SUITE_VARIANT_TIMEOUT_S: bench_throughput's --variants (default: the four
# before/after variants) and --variant-timeout (default 150 s); SUITE_STEP_KERNELS_VARIANT: the variant
# of bench_step_kernels_fp8 (default compile-fp8-head), SUITE_STEP_KERNELS_FLAGS: more flags for it (e.g.
# --pipelined); SUITE_FP8_RUN_FLAGS: more flags for run_ws1_fp8 and run_ws1_fp8_untraced

# step NAME LIMIT_S COMMAND... : run COMMAND (a bash string) with its output in logs/NAME.log
step() {
    local name=$1 limit=$2 cmd=$3
    if [[ "$ONLY" != "  " && "$ONLY" != *" $name "* ]]; then return 0; fi
    local left=$(( DEADLINE - $(date +%s) - RESERVE ))
    if (( left < 15 )); then
        echo "$name SKIPPED (suite deadline)" >>"$OUT/steps.txt"
        echo "=== $name: SKIPPED, suite deadline reached" >>"$OUT/suite.log"
        return 0
    fi
    (( limit > left )) && limit=$left
    echo "=== $name (limit ${limit}s): $cmd" >>"$OUT/suite.log"
    local t0=$(date +%s)
    timeout -s INT -k 30 "$limit" bash -c "$cmd" >"$WORK/logs/$name.log" 2>&1
    local rc=$?
    local dt=$(( $(date +%s) - t0 ))
    grep -v '^USDT:' "$WORK/logs/$name.log" | tail -c 12000 >>"$OUT/suite.log"
    local verdict=ok
    if (( rc == 124 || rc == 130 || rc == 137 )); then verdict=TIMEOUT; elif (( rc != 0 )); then verdict=FAILED; fi
    echo "--- $name: rc=$rc ${dt}s $verdict" >>"$OUT/suite.log"
    printf '%-28s rc=%-4s %5ss %s\n' "$name" "$rc" "$dt" "$verdict" >>"$OUT/steps.txt"
    collect
    return 0
}

# The JSON of a `commscope ... --json` command goes to results/NAME.json (stdout only).
cli_json() { echo "$CS $2 > $R/$1.json"; }

step env 60 "nvidia-smi; python3 -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0), torch.cuda.nccl.version())'; python3 -c 'import orjson, plotly; print(\"orjson\", orjson.__version__, \"plotly\", plotly.__version__)'; git log --oneline -1 2>/dev/null || true"

if [[ $GROUP == bench || $GROUP == all ]]; then
    # commscope's layout rule against measured slowdowns: every case ≥ 1.3× its aligned twin must be flagged
    step layout_cases 120 "python3 bench/layout_cases.py --device $DEV --out $R"
    step pytest_cuda 240 "python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels.py tests/unit/test_model.py tests/gpu/test_fused_optimizer.py tests/gpu/test_softcap_ce.py tests/gpu/test_fp8_head.py tests/gpu/test_host_transfer.py tests/integration/test_run.py::test_untraced_run_reads_each_loss_one_step_late_with_the_same_values"
    # the recording API on NCCL: DDP hook (bitwise), flush="overlap", side-stream regions, SIGTERM
    step pytest_record_nccl 200 "python3 -m pytest -q -p no:cacheprovider tests/gpu/test_record_nccl.py"
    step bench_transpose 90 "python3 bench/bench_transpose.py --device $DEV --out $R"
    step bench_transpose_tiles 100 "python3 bench/bench_transpose_tiles.py --device $DEV --out $R --budget-s 75"
    step bench_head_layout 90 "python3 bench/bench_head_layout.py --device $DEV --out $R"
    # the loss kernels: e5m2 backward vs a copy of the same bytes, exact vs hardware tanh
    step bench_loss_kernels 150 "python3 bench/bench_loss_kernels.py --device $DEV --out $R"
    step bench_optimizer 100 "python3 bench/bench_optimizer.py --device $DEV --out $R"
    step bench_polar_express 60 "python3 bench/bench_polar_express.py --device $DEV --out $R"
    step bench_record_overhead 200 "set -o pipefail; python3 bench/bench_record_overhead.py --device $DEV --rounds 10 --steps-per-round 6 | tee $R/bench_record_overhead.md"
    # host µs per call of each recording primitive: where a record's cost goes, without cProfile's inflation
    step bench_record_calls 60 "set -o pipefail; python3 bench/bench_record_calls.py --device $DEV | tee $R/bench_record_calls.md"
    # bench_record_overhead on the fastest step (compiled, FP8 head), where a fixed host cost per record weighs most
    step bench_record_overhead_fp8 300 "set -o pipefail; python3 bench/bench_record_overhead.py --device $DEV --variant $([[ $DEV == cuda ]] && echo compile-fp8-head || echo compile) --rounds 10 --steps-per-round 6 | tee $R/bench_record_overhead_fp8.md"
    # the same with flush="overlap": each step's write runs behind the next step's first region
    step bench_record_overhead_fp8_overlap 300 "set -o pipefail; python3 bench/bench_record_overhead.py --device $DEV --variant $([[ $DEV == cuda ]] && echo compile-fp8-head || echo compile) --rounds 10 --steps-per-round 6 --flush overlap | tee $R/bench_record_overhead_fp8_overlap.md"
    # last: torch.compile is the slowest and least predictable step; the eager figure is written first
    # compile-unfused-loss: torch's softcap + cross-entropy, the before side of the fused loss kernels
    step bench_throughput 440 "python3 bench/bench_throughput.py --device $DEV --out $R --variant-timeout ${SUITE_VARIANT_TIMEOUT_S:-150} --variants ${SUITE_THROUGHPUT_VARIANTS:-eager,compile,compile-unfused-loss,compile-fp8-head}"
    # which kernels the compiled step spends its device time in (what would have to shrink for 600k)
    step bench_step_kernels 200 "python3 bench/bench_step_kernels.py --device $DEV --out $R"
    # the host side: launch time per phase and every synchronizing call in the step
    step bench_host 150 "python3 bench/bench_host.py --device $DEV --out $R"
    [[ $DEV == cuda ]] && step bench_step_kernels_fp8 200 "python3 bench/bench_step_kernels.py --device $DEV --out $R --variant ${SUITE_STEP_KERNELS_VARIANT:-compile-fp8-head} ${SUITE_STEP_KERNELS_FLAGS:-}"
fi

if [[ $GROUP == runs || $GROUP == all ]]; then
    step run_ws1 170 "$CS run --nproc 1 --device $DEV --preset $PRESET --steps 30 --profile 10:13 --out $RUNS/run_ws1"
    step report_ws1 90 "$(cli_json cli_report_ws1 "report $RUNS/run_ws1 --json --no-hta")"
    step hooks_ws1 60 "$(cli_json cli_hooks_ws1 "hooks $RUNS/run_ws1 --json")"
    step layout_ws1 60 "$(cli_json cli_layout_ws1 "layout $RUNS/run_ws1 --json")"
    # the fastest configuration: compiled, FP8 head, fused loss kernels; then the report on what it recorded
    if [[ $DEV == cuda ]]; then  # --fp8-head is CUDA only
        step run_ws1_fp8 200 "$CS run --nproc 1 --device $DEV --preset $PRESET --steps 25 --compile --fp8-head ${SUITE_FP8_RUN_FLAGS:-} --out $RUNS/run_ws1_fp8"
        step report_ws1_fp8 90 "$(cli_json cli_report_ws1_fp8 "report $RUNS/run_ws1_fp8 --json --no-hta")"
        # the same run untraced: the trainer reads each loss one step late, so its tokens/s is the
        # trainer's own; the traced run's is that plus the recorder's step-end sync
        step run_ws1_fp8_untraced 200 "$CS run --nproc 1 --device $DEV --preset $PRESET --steps 25 --compile --fp8-head --trace off ${SUITE_FP8_RUN_FLAGS:-} --out $RUNS/run_ws1_fp8_untraced"
    fi
    for layout in standard transposed; do
        step "run_head_$layout" 120 "$CS run --nproc 1 --device $DEV --preset $PRESET --steps 8 --grad-accum 2 --head-layout $layout --profile 4:6 --out $RUNS/head_$layout"
        step "layout_head_$layout" 60 "$(cli_json "cli_layout_head_$layout" "layout $RUNS/head_$layout --json")"
    done
    step run_gloo4 200 "$CS run --nproc 4 --backend gloo --device $DEV --preset $PRESET --steps 12 $GLOO4_BATCH --out $RUNS/run_gloo4"
    step report_gloo4 60 "$(cli_json cli_report_gloo4 "report $RUNS/run_gloo4 --json --no-hta")"
    step hooks_gloo4 60 "$(cli_json cli_hooks_gloo4 "hooks $RUNS/run_gloo4 --json")"
    # bank vs alpha-lpt matrix partition, once `commscope run` has the option: same run as
    # run_gloo4 with the planner's partition, so the two reports compare optimizer time per rank.
    if (( DEADLINE - $(date +%s) > RESERVE + 60 )) && $CS run --help 2>/dev/null | grep -q -- "--optimizer-partition"; then
        step run_gloo4_alpha 200 "$CS run --nproc 4 --backend gloo --device $DEV --preset $PRESET --steps 12 $GLOO4_BATCH --optimizer-partition alpha-lpt --out $RUNS/run_gloo4_alpha"
        step report_gloo4_alpha 60 "$(cli_json cli_report_gloo4_alpha "report $RUNS/run_gloo4_alpha --json --no-hta")"
        step bench_partition 90 "python3 bench/bench_partition.py --out $R --bank-run $RUNS/run_gloo4 --alpha-run $RUNS/run_gloo4_alpha --nproc 4 --steps 12 --preset $PRESET --device $DEV"
    fi
fi

NG=${SUITE_NPROC:-$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 1)}
FAULTY=$(( NG > 5 ? 5 : NG - 1 ))
if [[ $GROUP == multi ]]; then
    step busbw 120 "python3 -m torch.distributed.run --standalone --nproc-per-node $NG bench/nccl_busbw.py --device $DEV --json $R/busbw.json"
    step run_multi 300 "$CS run --nproc $NG --device $DEV --preset $PRESET --steps 30 --compile --fp8-head --profile 10:13 --out $RUNS/multi"
    for what in report:"--json --no-hta" hooks:--json layout:--json doctor:--json; do
        step "${what%%:*}_multi" 90 "$(cli_json "cli_${what%%:*}_multi" "${what%%:*} $RUNS/multi ${what#*:}")"
    done
    step export_multi 60 "$CS export $RUNS/multi --perfetto $WORK/multi-perfetto.json"
    # the same seed and global batch on one rank: per-step losses equal within bf16 tolerance
    step run_ws1_same 300 "$CS run --nproc 1 --device $DEV --preset $PRESET --steps 30 --compile --fp8-head --batch-size $((24 * NG)) --grad-accum $NG --trace off --out $RUNS/ws1_same"
    step losses_equal 30 "python3 -c \"import json; a=json.load(open('$RUNS/multi/summary.json'))['losses']; b=json.load(open('$RUNS/ws1_same/summary.json'))['losses']; d=max(abs(x-y) for x,y in zip(a,b)); print('max loss difference', d); assert d < 0.05\""
    for i in 1 2 3; do
        for sched in explicit hooks; do
            step "ab_${sched}_$i" 150 "$CS run --nproc $NG --device $DEV --preset $PRESET --steps 15 --comm-schedule $sched --out $RUNS/ab_$sched/r$i"
        done
    done
    step compare_schedules 60 "$(cli_json cli_compare_schedules "compare $RUNS/ab_explicit $RUNS/ab_hooks --json")"
    for i in 1 2; do for trace in off light; do
        step "overhead_${trace}_$i" 150 "$CS run --nproc $NG --device $DEV --preset $PRESET --steps 15 --trace $trace --out $RUNS/overhead_$trace/r$i"
    done; done
    step run_alpha 150 "$CS run --nproc $NG --device $DEV --preset $PRESET --steps 15 --optimizer-partition alpha-lpt --out $RUNS/alpha"
    step bench_partition_multi 90 "python3 bench/bench_partition.py --out $R --bank-run $RUNS/ab_explicit/r1 --alpha-run $RUNS/alpha --nproc $NG --steps 15 --preset $PRESET --device $DEV"
fi
if [[ $GROUP == drills ]]; then
    export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1
    for kind in hang crash delay desync; do
        extra=$([[ $kind == delay ]] && echo ",ms=3000" || echo "")
        step "drill_$kind" 150 "$CS run --nproc $NG --device $DEV --preset $PRESET --steps 14 --hang-timeout 60 --inject $kind@rank=$FAULTY,step=10,label=attn$extra --out $RUNS/drill_$kind; true"
        step "doctor_$kind" 60 "$(cli_json "cli_doctor_$kind" "doctor $RUNS/drill_$kind --json")"
    done
fi

collect
cat "$OUT/steps.txt"
