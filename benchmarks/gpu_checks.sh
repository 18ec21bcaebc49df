#!/usr/bin/env bash
# The GPU checks that issues 11 and 18 still need, in one run on a lent GPU machine (benchmarks/README.md,
# "On a lent GPU"). Here, first: `python benchmarks/device_kit.py` (the wheels the image lacks, into .whl/).
# Then through the device tool: run(command="bash benchmarks/gpu_checks.sh", carry=[".whl"], timeout_s=570).
#
# Each check runs under its own time limit (cut to what is left of LP_GPU_CHECKS_BUDGET, 540 s), most wanted
# first, and writes as it goes into $OUT, which the device tool brings back (at most 8 files): summary.txt
# (each check's result lines), results.jsonl (one JSON object per gpu_recipe.py run), checks.log (every
# check's whole output) and environment.txt. A run cut short still returns what finished; a second call on the
# still-warm machine can name the checks the first one skipped.
#
#   bash benchmarks/gpu_checks.sh [CHECK ...]     # default: all, in this order
#     memory-1b      gpu_recipe.py, QLoRA then LoRA on a 1.1B Llama: peak memory against the planner (issue 18)
#     varlen         varlen_check.py: PyTorch's FlashAttention varlen kernel behind launchpad_varlen, against
#                    SDPA and the reference, and packed padding-free against padded (issue 11)
#     loss           loss_memory.py: bytes per token and vocabulary entry each loss keeps (eager, compiled,
#                    chunked) on CUDA, where CPU's inductor fused the fp32 upcast away (issue 18)
#     memory-8b      the same as memory-1b on the Llama-3-8B shape (issue 18)
#     packing        trainer_throughput.py: sample_packing against padding on the GPU, SDPA (issue 11)
#     packing-varlen the same with flash_attention: true (no flash-attn on the image: PyTorch's kernel)
#     launcher       trainer_throughput.py --vs-hand: launchpad up against a hand-written TRL script (issue 11)
#
# LP_GPU_CHECKS_REHEARSAL=1 rehearses it on a CPU machine (tiny shapes, few steps, --allow-cpu): the flow, the
# install from the kit and the result files, not the figures. With a venv made to look like the image and a kit
# for this machine's Python (benchmarks/README.md):
#   OUT=/tmp/out PYTHON=/tmp/img/bin/python LP_DEVICE_KIT=/tmp/kit311 LP_GPU_CHECKS_REHEARSAL=1 bash benchmarks/gpu_checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/lp-gpu-checks}
PY=${PYTHON:-python3}
REHEARSAL=${LP_GPU_CHECKS_REHEARSAL:-0}
KIT=${LP_DEVICE_KIT:-.whl}  # the kit's folder (a rehearsal points it at a kit built for this machine's Python)
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
BUDGET=${LP_GPU_CHECKS_BUDGET:-540}  # seconds for the whole run: under the device tool's timeout_s, so it ends itself
T0=$(date +%s)
mkdir -p "$OUT"
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }

# check NAME LIMIT_S COMMAND...: run it under `timeout`, its output to checks.log, its last lines to the summary
check() {
  local name=$1 limit=$2 rc start left
  shift 2
  start=$(date +%s)
  left=$(( BUDGET - (start - T0) ))
  if [ "$left" -lt 30 ]; then summary "-- $name: skipped, ${left}s of the budget left"; return 0; fi
  [ "$limit" -le "$left" ] || limit=$left
  summary "== $(date -u +%T) $name (limit ${limit}s): $*"
  echo "== $name: $*" >>"$OUT/checks.log"
  timeout -k 15 "$limit" "$@" >"$OUT/.current.log" 2>&1
  rc=$?
  cat "$OUT/.current.log" >>"$OUT/checks.log"
  grep -E "^(cpu|NVIDIA|[A-Z].*GPU|  |round |sample packing|launchpad up /|data:|kernel|launchpad_varlen|[0-9]+ samples|FAILED|varlen_attn)" "$OUT/.current.log" | tail -n 12 \
    | tee -a "$OUT/summary.txt" >/dev/null
  [ "$rc" -eq 0 ] || tail -n 15 "$OUT/.current.log" >>"$OUT/summary.txt"
  summary "-- $name: exit $rc in $(( $(date +%s) - start ))s$([ "$rc" -eq 124 ] && echo ' (time limit)')"
  rm -f "$OUT/.current.log"
  return 0
}

if [ "$REHEARSAL" = 1 ]; then
  SHAPE_1B=tiny SHAPE_8B=tiny STEPS=2 WARMUP=1 ALLOW=--allow-cpu ROUNDS=1 TSTEPS=10
else
  SHAPE_1B=1b SHAPE_8B=8b STEPS=5 WARMUP=2 ALLOW= ROUNDS=2 TSTEPS=30
fi

# gpu_recipe RUN_NAME SHAPE LIMIT [--set KEY=VALUE ...]: one recipe on one shape, its JSON appended to results.jsonl
gpu_recipe() {
  local name=$1 shape=$2 limit=$3
  shift 3
  check "$name" "$limit" "$PY" benchmarks/gpu_recipe.py --shape "$shape" --steps "$STEPS" --warmup "$WARMUP" $ALLOW \
    --workdir /tmp/lp-gpu-bench --json "/tmp/lp-gpu-bench/$name.json" --set gradient_accumulation_steps=2 "$@"
  if [ -f "/tmp/lp-gpu-bench/$name.json" ]; then
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["check"]=sys.argv[2]; print(json.dumps(d))' \
      "/tmp/lp-gpu-bench/$name.json" "$name" >>"$OUT/results.jsonl"
  fi
}

summary "== $(date -u +%T) install: the kit ($KIT), then launchpad and its local provider (no index: nothing to fetch)"
[ -f "$KIT/pins.txt" ] || { summary "no $KIT/pins.txt: run python benchmarks/device_kit.py here, and carry .whl"; exit 2; }
# shellcheck disable=SC2046  # one pin per word
"$PY" -m pip install -q --no-index --find-links "$KIT" $(cat "$KIT/pins.txt") >>"$OUT/checks.log" 2>&1 \
  || { tail -n 20 "$OUT/checks.log" >>"$OUT/summary.txt"; summary "installing the kit failed"; exit 1; }
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . -e providers/local >>"$OUT/checks.log" 2>&1 \
  || { tail -n 20 "$OUT/checks.log" >>"$OUT/summary.txt"; summary "installing launchpad failed"; exit 1; }
"$PY" - >"$OUT/environment.txt" 2>&1 <<'EOF'
import importlib.metadata as md
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for name in ("transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes", "flash-attn", "kernels"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "-")
try:
    import inspect
    from torch.nn.attention import varlen  # FlashAttention's varlen kernel inside torch
    print("torch varlen_attn: yes", inspect.signature(varlen.varlen_attn), "backward:", hasattr(varlen, "_backward"))
except ImportError as e:
    print("torch varlen_attn: no", e)
import bitsandbytes  # loads its native library for this CUDA: fails here if the kit kept the wrong one
print("bitsandbytes library loaded")
EOF
tee -a "$OUT/summary.txt" <"$OUT/environment.txt"

checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(memory-1b varlen loss memory-8b packing packing-varlen launcher)
for c in "${checks[@]}"; do
  case $c in
    memory-1b)
      gpu_recipe qlora-1b "$SHAPE_1B" 150
      gpu_recipe lora-1b "$SHAPE_1B" 120 --set adapter=lora ;;
    memory-8b)
      gpu_recipe qlora-8b "$SHAPE_8B" 200
      gpu_recipe lora-8b "$SHAPE_8B" 150 --set adapter=lora ;;
    varlen)
      check varlen 90 "$PY" benchmarks/varlen_check.py $ALLOW ;;
    loss)
      check loss 120 "$PY" benchmarks/loss_memory.py $ALLOW ;;
    packing)
      check packing 120 "$PY" benchmarks/trainer_throughput.py --rounds "$ROUNDS" --steps "$TSTEPS" ;;
    packing-varlen)  # a rehearsal has no GPU, where flash_attention: true fails its environment check
      check packing-varlen 120 "$PY" benchmarks/trainer_throughput.py --rounds "$ROUNDS" --steps "$TSTEPS" \
        --flash-attention "$([ "$REHEARSAL" = 1 ] && echo auto || echo true)" ;;
    launcher)
      check launcher 150 "$PY" benchmarks/trainer_throughput.py --vs-hand --rounds "$ROUNDS" --steps "$TSTEPS" ;;
    *) summary "unknown check: $c" ;;
  esac
done
summary "== $(date -u +%T) done"
