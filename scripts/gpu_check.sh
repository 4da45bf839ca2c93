#!/usr/bin/env bash
# The one GPU check, for the lent GPU test machine (one H100/H200; Python 3.12, torch 2.11 + CUDA 13, triton 3.6,
# transformers 5.17, no registry). Runs every gpu-marked test, then the GPU benchmarks at real shapes with random
# weights, within 6 minutes, and brings everything back in three files at the top of $OUT:
#   gpu_check.json   complete after every step (a killed run still says what ran): environment, each step's
#                    status, time, result and log tail, the gpu tests' outcomes
#   gpu_check.log    every step's output, one after another
#   gpu-tests.xml    pytest's junit record of the gpu tests
#
#   scripts/gpu_check.sh --prepare    # here (CPU, registry): download the wheels the image lacks into .gpu-wheels/,
#                                     # print the carry list and the command to run there
#   scripts/gpu_check.sh --dry-run    # anywhere: walk every step (command, time limit, what it needs), run none
#   scripts/gpu_check.sh              # on the GPU machine; results under $OUT (default ./gpu-check-out)
#
# Steps (limits in seconds, 360 in all):
#   environment  15  GPU, driver, torch / triton / transformers / CUDA versions
#   install      20  the carried wheels (.gpu-wheels/, made by --prepare) into /tmp/gpu-site, offline
#   tests       110  pytest -m gpu on the files that hold gpu tests (collected from those files only, so an
#                    optional import elsewhere cannot stop them): Triton paged attention, the GQA-grouped
#                    prefill, CUDA graphs against eager tokens, the engine against HF generate, MaxSim, BM25
#   throughput  120  prefill and decode tok/s at batch 1/16/64, with and without CUDA graphs, the KV pool sized
#                    from free memory: llama-1b (35), llama-3b (35), qwen2.5-vl-7b (50)
#   agent_vs_hf  50  the agent workload (sessions x turns) against the HF reference with its own cache, same dtype
#   maxsim       20  the fused Triton MaxSim against the fp16 einsum at 5,000 pages, with the fraction of HBM
#   bm25         25  GPU BM25 queries per second (Triton, batched) on 300k synthetic pages
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=run
for arg in "$@"; do
  case "$arg" in
    --dry-run) MODE=dry ;;
    --prepare) MODE=prepare ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg (use --prepare, --dry-run or --help)" >&2; exit 2 ;;
  esac
done

WHEELS=.gpu-wheels
PY="${PYTHON:-}"
[ -z "$PY" ] && { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }

if [ "$MODE" = prepare ]; then
  exec "$PY" scripts/gpu_check_report.py prepare "$WHEELS"
fi

OUT="${OUT:-$PWD/gpu-check-out}"
WORK="${GPU_CHECK_WORK:-/tmp/gpu-check-work}"       # each step's raw output (only the three files go to $OUT)
BUDGET_S="${GPU_CHECK_BUDGET_S:-360}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
PLANNED=0
if [ "$MODE" = run ]; then
  mkdir -p "$OUT" "$WORK" && : > "$WORK/steps.tsv" && : > "$OUT/gpu_check.log"
fi

# step NAME LIMIT_S COMMAND...: run COMMAND under LIMIT_S seconds; its output goes to $WORK/NAME.out and is appended
# to $OUT/gpu_check.log; gpu_check.json is rewritten after every step.
step() {
  local name="$1" limit="$2"; shift 2
  if [ "$MODE" = dry ]; then
    printf '[dry-run] %-12s limit %3ss (planned %3ss of %ss): %s\n' "$name" "$limit" "$PLANNED" "$BUDGET_S" "$*"
    PLANNED=$(( PLANNED + limit ))
    return 0
  fi
  local used=$(( $(date +%s) - START ))
  if [ $(( BUDGET_S - used )) -lt $(( limit / 2 )) ]; then
    echo "[skip] $name: ${used}s of the ${BUDGET_S}s budget used" | tee -a "$OUT/gpu_check.log"
    printf '%s\tskipped_budget\t0\t%s\n' "$name" "$limit" >> "$WORK/steps.tsv"
    "$PY" scripts/gpu_check_report.py assemble "$WORK" "$OUT"
    return 0
  fi
  local left=$(( BUDGET_S - used )); [ "$limit" -gt "$left" ] && limit=$left
  echo "[run ] $name (limit ${limit}s): $*"
  local t0=$(date +%s) status
  timeout --kill-after=5 "$limit" "$@" > "$WORK/$name.out" 2>&1; status=$?
  local took=$(( $(date +%s) - t0 )) word=ok
  { [ "$status" = 124 ] || [ "$status" = 137 ]; } && word=timeout
  [ "$status" != 0 ] && [ "$word" = ok ] && word="failed($status)"
  echo "[done] $name: $word in ${took}s"
  { echo "===== $name: $word in ${took}s (limit ${limit}s): $*"; cat "$WORK/$name.out"; } >> "$OUT/gpu_check.log"
  printf '%s\t%s\t%s\t%s\n' "$name" "$word" "$took" "$limit" >> "$WORK/steps.tsv"
  "$PY" scripts/gpu_check_report.py assemble "$WORK" "$OUT"
}

if [ "$MODE" = dry ]; then
  echo "dry run: nothing is installed or measured; results would go to $OUT (gpu_check.json, gpu_check.log, gpu-tests.xml)"
  echo "interpreter: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo missing)); carried wheels:" \
       "$(ls "$WHEELS"/*.whl 2>/dev/null | wc -l) in $WHEELS"
fi

GPU_TESTS=$("$PY" scripts/gpu_check_report.py gpu-test-files)

step environment 15 "$PY" scripts/gpu_check_report.py environment
step install 20 bash -c "ls $WHEELS/*.whl >/dev/null 2>&1 || { echo 'no carried wheels in $WHEELS: run scripts/gpu_check.sh --prepare on a CPU machine and carry $WHEELS'; exit 1; };
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site $WHEELS/*.whl"
step tests 110 "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts= --junitxml="$OUT/gpu-tests.xml" $GPU_TESTS
step throughput_llama_1b 35 "$PY" -m benchmarks.gpu_throughput --model llama-1b --batches 1 16 64 --decode 32
step throughput_llama_3b 35 "$PY" -m benchmarks.gpu_throughput --model llama-3b --batches 1 16 64 --decode 32
step throughput_qwen25vl_7b 50 "$PY" -m benchmarks.gpu_throughput --model qwen2.5-vl-7b --batches 1 16 64 --decode 32
step agent_vs_hf 50 "$PY" -m engine.cli.main bench engine --model llama-1b --sessions 32 --turns 3 --tool-tokens 200 \
  --new-tokens 32 --peer-sessions 2 --peers kv-cache --no-ablations --format json
step maxsim 20 "$PY" benchmarks/bench_maxsim.py --device cuda --pages 5000 --dtype float16 --repeats 20 --hbm-gbs 4800
step bm25 25 "$PY" -c "import json; from benchmarks.workloads.bm25_bench import run_bm25_gpu_bench; \
print(json.dumps(run_bm25_gpu_bench(num_docs=300_000)))"

if [ "$MODE" = dry ]; then
  echo "planned: $PLANNED s of step limits (budget $BUDGET_S s)"
  [ "$PLANNED" -le "$BUDGET_S" ] || { echo "the step limits exceed the budget" >&2; exit 1; }
  "$PY" scripts/gpu_check_report.py check || exit 1
  exit 0
fi
echo "wrote $OUT/gpu_check.json in $(( $(date +%s) - START ))s"
