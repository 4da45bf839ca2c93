#!/usr/bin/env bash
# The one GPU check, for a lent machine with one GPU (an H200): installs what it needs, runs every
# gpu-marked test, then the GPU benchmarks at real shapes with random weights, and writes one JSON,
# $OUT/gpu_check.json, within 9 minutes. Each step runs under its own time limit; a step that fails
# or times out is recorded and the next one runs; steps that no longer fit the budget are skipped.
#
#   scripts/gpu_check.sh              # on the GPU machine; results under $OUT (default: ./gpu-check-out)
#   scripts/gpu_check.sh --dry-run    # anywhere: walk every step (command, time limit, what it needs), run none
#
# Steps:
#   environment  GPU name and memory, driver, torch / triton / CUDA versions
#   install      this repository with its quant and dev extras when the interpreter cannot import it;
#                flash-attn as a binary wheel; vLLM in its own virtualenv (.venv-vllm). Each only when
#                reachable (the lent machine may be offline): what is missing is recorded, its tests skip.
#   tests        pytest -m gpu: Triton paged attention (bf16/fp16) and flash-attn against the reference,
#                CUDA graphs against eager tokens, the engine in fp32 against HF generate, nf4 SmolLM2
#                against bf16, MaxSim and BM25 on the GPU, search/rerank on CUDA
#   throughput   prefill and decode tok/s at batch 1/16/64 (decode with and without CUDA graphs):
#                llama-1b, llama-3b and qwen2.5-vl-7b shapes, bf16, random weights
#   vs_vllm      the agent workload (`dossier bench engine`, 64 sessions x 4 turns, llama-1b) against vLLM
#                with prefix caching, run by vLLM's own interpreter in its own process with its own warm-up
#   maxsim       the fused Triton MaxSim against the fp16 einsum at 5,000 pages, with the fraction of HBM
#   bm25         GPU BM25 queries per second (Triton, batched) against numba on 300k synthetic pages
set -uo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg (use --dry-run or --help)" >&2; exit 2 ;;
  esac
done

OUT="${OUT:-$PWD/gpu-check-out}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-540}"          # 9 minutes for every step together
PY="${PYTHON:-}"
[ -z "$PY" ] && { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
VLLM_PY="${VLLM_PYTHON:-.venv-vllm/bin/python}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
if [ "$DRY_RUN" = 0 ]; then mkdir -p "$OUT" && : > "$OUT/steps.tsv"; fi

# step NAME LIMIT_S COMMAND...: run COMMAND under LIMIT_S seconds, stdout to $OUT/NAME.out, stderr to $OUT/NAME.log.
step() {
  local name="$1" limit="$2"; shift 2
  local used=$(( $(date +%s) - START ))
  if [ "$DRY_RUN" = 1 ]; then
    printf '[dry-run] %-11s limit %3ss (budget used %3ss of %ss): %s\n' "$name" "$limit" "$PLANNED" "$BUDGET_S" "$*"
    PLANNED=$(( PLANNED + limit ))
    return 0
  fi
  if [ $(( used + limit )) -gt "$BUDGET_S" ] && [ $(( BUDGET_S - used )) -lt $(( limit / 2 )) ]; then
    echo "[skip] $name: ${used}s of the ${BUDGET_S}s budget used" | tee -a "$OUT/$name.log"
    printf '%s\tskipped_budget\t0\t%s\n' "$name" "$limit" >> "$OUT/steps.tsv"
    return 0
  fi
  local left=$(( BUDGET_S - used )); [ "$limit" -gt "$left" ] && limit=$left
  echo "[run ] $name (limit ${limit}s): $*"
  local t0=$(date +%s) status
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.log"; status=$?
  local took=$(( $(date +%s) - t0 )) word=ok
  [ "$status" = 124 ] || [ "$status" = 137 ] && word=timeout
  [ "$status" != 0 ] && [ "$word" = ok ] && word="failed($status)"
  echo "[done] $name: $word in ${took}s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$word" "$took" "$limit" >> "$OUT/steps.tsv"
}

PLANNED=0
if [ "$DRY_RUN" = 1 ]; then
  echo "dry run: nothing is installed or measured; results would go to $OUT/gpu_check.json"
  echo "interpreter: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo missing));" \
       "vLLM interpreter: $VLLM_PY ($([ -x "$VLLM_PY" ] && echo present || echo 'absent: the install step would create it'))"
fi

# 1. environment
step environment 20 "$PY" scripts/gpu_check_report.py environment

# 2. install (offline machines: each attempt fails fast and is recorded)
step install 40 bash -c "
  $PY -c 'import engine, torch, triton, bitsandbytes' 2>/dev/null \
    || $PY -m pip install --quiet --timeout 10 --retries 0 -e '.[dev,quant]' \
    || echo 'dossier not installable here (no registry reachable)';
  $PY -c 'import flash_attn' 2>/dev/null \
    || $PY -m pip install --quiet --timeout 10 --retries 0 --only-binary :all: flash-attn \
    || echo 'flash-attn: no binary wheel reachable; its tests skip';
  [ -x '$VLLM_PY' ] || { python3 -m venv .venv-vllm && .venv-vllm/bin/pip install --quiet --timeout 10 --retries 0 vllm; } \
    || echo 'vllm: not installable here; the vs_vllm step reports it missing'"

# 3. every gpu-marked test
step tests 110 "$PY" -m pytest -q -m gpu -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" tests

# 4. engine throughput at real shapes
step throughput_llama_1b 35 "$PY" -m benchmarks.gpu_throughput --model llama-1b --batches 1 16 64 \
  --out "$OUT/throughput_llama-1b.json"
step throughput_llama_3b 45 "$PY" -m benchmarks.gpu_throughput --model llama-3b --batches 1 16 64 \
  --out "$OUT/throughput_llama-3b.json"
step throughput_qwen25vl_7b 75 "$PY" -m benchmarks.gpu_throughput --model qwen2.5-vl-7b --batches 1 16 64 \
  --out "$OUT/throughput_qwen2.5-vl-7b.json"

# 5. the agent workload against vLLM (its own interpreter and process)
step vs_vllm 150 "$PY" -m engine.cli.main bench engine --model llama-1b --sessions 64 --turns 4 --tool-tokens 300 \
  --new-tokens 32 --naive-sessions 1 --peers naive --no-ablations --kv-cache-gib 16 --max-batched-tokens 8192 --vllm-python "$VLLM_PY" \
  --format json

# 6. MaxSim: fused Triton vs fp16 einsum at 5,000 pages (H200 HBM: 4,800 GB/s)
step maxsim 25 "$PY" benchmarks/bench_maxsim.py --device cuda --pages 5000 --dtype float16 --repeats 20 --hbm-gbs 4800

# 7. GPU BM25 QPS on 300k synthetic pages (the 1M matrix takes longer to build than this step may run)
step bm25 35 "$PY" -c "import json; from benchmarks.workloads.bm25_bench import run_bm25_gpu_bench; \
print(json.dumps(run_bm25_gpu_bench(num_docs=300_000)))"

if [ "$DRY_RUN" = 1 ]; then
  echo "planned: $PLANNED s of step limits (budget $BUDGET_S s)"
  [ "$PLANNED" -le "$BUDGET_S" ] || { echo "the step limits exceed the budget" >&2; exit 1; }
  "$PY" scripts/gpu_check_report.py check || exit 1
  exit 0
fi
"$PY" scripts/gpu_check_report.py assemble "$OUT"
echo "wrote $OUT/gpu_check.json in $(( $(date +%s) - START ))s"
