#!/usr/bin/env bash
# Device check: run the CUDA paths of profiler on a real NVIDIA GPU and check figures that would catch their bugs.
#   PYTHONPATH=. bash scripts/gpu_check.sh [OUT_DIR]
# One line per check (PASS/FAIL with its figure), last line `gpu_check: N/M`. Every sub-run has its own `timeout`;
# the budgets add up to 415 s, so one call fits in one device command (600 s) with room for start-up. What each
# check verifies and why: docs/gpu.md.
set -u
OUT=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-.}
PY=${PYTHON:-python3}
V="$PY scripts/gpu_check_verify.py"
passed=0
total=0
tally() {  # exit status of a check: 0 = pass
  total=$((total + 1))
  [ "$1" = 0 ] && passed=$((passed + 1))
}
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# (0) a usable CUDA device (without one every other check is meaningless: the GPU tests would merely skip)
timeout 20 $PY -c "import torch; assert torch.cuda.is_available(); print(torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" > "$OUT/cuda.log" 2>&1
rc=$?
[ $rc = 0 ] && echo "PASS cuda_available: $(tail -1 "$OUT/cuda.log")" || echo "FAIL cuda_available: $(tail -1 "$OUT/cuda.log")"
tally $rc
timeout 30 $PY datasets/make_sample.py "$OUT/data" --count 400 --size 320x240 >/dev/null 2>&1 || echo "   (sample data: exit $?)"

prun() {  # budget_s, name, profiler run args...: the built-in pipeline on the sample data
  local budget=$1 name=$2; shift 2
  timeout "$budget" $PY -m profiler run --data "$OUT/data" --no-progress --out "$OUT/$name" "$@" \
      > "$OUT/$name.log" 2>&1
  echo "   ($name: exit $?, log $OUT/$name.log)"
}

# (a) a planted input stall of known length, measured on the device timeline (user script, workers 0)
SLEEP=0.2; EVERY=5
timeout 45 $PY -m profiler run --device cuda --steps 40 --warmup 5 --no-progress --out "$OUT/stall" \
    scripts/gpu_jobs/planted_stall.py --sleep $SLEEP --every $EVERY > "$OUT/stall.log" 2>&1
echo "   (stall: exit $?, log $OUT/stall.log)"
$V stall "$OUT/stall" --sleep $SLEEP --every $EVERY; tally $?

# (b) host-to-device bandwidth, pinned vs pageable, measured directly with CUDA events
timeout 25 $V h2d; tally $?

# (c) fit's estimate within 10 % of the measured peak (net of baseline), resnet18 and resnet50, batch 32, train
timeout 75 $PY scripts/gpu_fit_check.py --models resnet18,resnet50 --batch 32 --modes train > "$OUT/fit.log" 2>&1
rc=$?
line=$(tail -1 "$OUT/fit.log")
[ $rc = 0 ] && echo "PASS fit_vs_peak: $line" || echo "FAIL fit_vs_peak: $line (exit $rc; $OUT/fit.log)"
grep -E "^resnet" "$OUT/fit.log" | sed 's/^/     /'
tally $rc

# (d) a CUDA out-of-memory run: verdict memory, partial, at least one recommendation
prun 50 oom --model resnet50 --batch-size 4096 --image-size 448 --device cuda --steps 3 --warmup 1 --workers 4
$V oom "$OUT/oom"; tally $?

# (e) --amp and --device cuda:0: CUDA-event timing with h2d > 0 and compute > 0
prun 40 amp --model resnet18 --batch-size 64 --workers 4 --device cuda --amp --steps 20 --warmup 3
$V timing "$OUT/amp" amp; tally $?
prun 40 cuda0 --model resnet18 --batch-size 64 --workers 4 --device cuda:0 --steps 20 --warmup 3 --pin-memory
$V timing "$OUT/cuda0" cuda0; tally $?

# (f) workers 0: the main process loads and the device waits on it
prun 40 workers0 --model resnet18 --batch-size 32 --workers 0 --device cuda --steps 15 --warmup 2
$V timing "$OUT/workers0" workers0 --workers 0; tally $?

# (g) the GPU-marked tests
timeout 50 $PY -m pytest -q -m gpu tests > "$OUT/pytest.log" 2>&1
rc=$?
summary=$(tail -1 "$OUT/pytest.log")
[ $rc = 0 ] && echo "PASS gpu_tests: $summary" || echo "FAIL gpu_tests: $summary (exit $rc; $OUT/pytest.log)"
tally $rc

echo "gpu_check: $passed/$total"
[ "$passed" = "$total" ]
