#!/usr/bin/env bash
# Device check: run the CUDA paths of profiler on a real NVIDIA GPU and check their figures. Under 5 minutes.
#   PYTHONPATH=. bash scripts/gpu_check.sh [OUT_DIR]
# Runs: pin_memory on/off x train/infer with CUDA-event timing and NVML sampling; a forced CUDA OOM (verdict
# memory); fit's estimate vs the measured peak; the GPU-marked tests. Prints one PASS/FAIL line per check.
set -u
OUT=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-.}
PY=${PYTHON:-python3}
fail=0
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
$PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.version.cuda)"
$PY datasets/make_sample.py "$OUT/data" --count 1000 >/dev/null

run() {  # name, extra args...
  local name=$1; shift
  timeout 240 $PY -m profiler run --data "$OUT/data" --device cuda --steps 40 --warmup 5 --no-progress \
      --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "   exit $? ($name)"
}
run train_pin   --model resnet18 --batch-size 64 --workers 8 --mode train --pin-memory
run train_nopin --model resnet18 --batch-size 64 --workers 8 --mode train --no-pin-memory
run infer_pin   --model resnet50 --batch-size 128 --workers 8 --mode infer --pin-memory
run infer_nopin --model resnet50 --batch-size 128 --workers 8 --mode infer --no-pin-memory
run workers2    --model resnet18 --batch-size 64 --workers 2 --mode train
run oom         --model resnet50 --batch-size 512 --image-size 448 --workers 8 --steps 3 --warmup 1

$PY - "$OUT" <<'PY' || fail=1
import json, sys
from pathlib import Path
out = Path(sys.argv[1]); bad = 0
def check(name, cond, what):
    global bad
    print(f"{'PASS' if cond else 'FAIL'} {name}: {what}"); bad += (not cond)
for name in ("train_pin", "train_nopin", "infer_pin", "infer_nopin", "workers2"):
    p = out / name / "run.json"
    if not p.exists():
        check(name, False, "no run.json"); continue
    d = json.loads(p.read_text()); st = d["stages"]; g = d["samples"].get("gpu") or {}
    util = [u for u in g.get("util_percent", []) if u is not None]
    check(name, d["compute_device"]["timing"] == "cuda events", "timing from CUDA events")
    check(name, st["h2d"]["mean_ms"] > 0 and st["compute"]["mean_ms"] > 0,
          f"h2d {st['h2d']['mean_ms']:.2f} ms, compute {st['compute']['mean_ms']:.2f} ms per step")
    check(name, bool(util) and all(0 <= u <= 100 for u in util) and max(util) > 0,
          f"{len(util)} NVML util samples, max {max(util) if util else None} %")
    by = d["stall"]["by_cause"]
    check(name, abs(sum(by.values()) - d["stall"]["seconds"]) < 1e-5, "by_cause sums to stall.seconds")
    print(f"     {name}: {d['throughput']['samples_per_s']:.0f} samples/s, stall {100*d['stall']['fraction']:.1f} %, "
          f"verdict {d['verdict']['bottleneck']}: {d['verdict']['summary']}")
    print(f"     peak device memory {d['memory'].get('device_peak_bytes', 0) / 2**20:.0f} MiB; "
          f"pcie rx samples {sum(1 for v in (g.get('pcie_rx_bytes_per_s') or []) if v is not None)}")
p = out / "oom" / "run.json"
if p.exists():
    d = json.loads(p.read_text())
    check("oom", d["verdict"]["bottleneck"] == "memory" and d["partial"], d["verdict"]["summary"])
    for r in d["verdict"].get("recommendations", [])[:3]:
        print("     rec:", r["action"])
else:
    check("oom", False, "no run.json")
sys.exit(1 if bad else 0)
PY
echo "== fit estimate vs measured peak"
timeout 150 $PY scripts/gpu_fit_check.py || fail=1
echo "== GPU-marked tests"
timeout 120 $PY -m pytest -q -m gpu tests || fail=1
echo "gpu_check: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
