#!/usr/bin/env bash
# The same short StarPO run on 2 CPU ranks (gloo, accelerate's launcher), once with replicas
# (train.parallel=ddp) and once with FSDP2 shards (fsdp): per-step times, the peak resident
# memory of the largest process, the parameters + optimizer state rank 0 holds, and how far
# the two runs' final weights are apart.
# usage: bash benchmarks/fsdp_vs_ddp_cpu.sh [MODEL] [OUT]   (MODEL: an SFT checkpoint, default smollm2)
set -euo pipefail
MODEL="${1:-smollm2}"
OUT="${2:-/tmp/fsdp-vs-ddp}"
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
rm -rf "$OUT" && mkdir -p "$OUT"
for mode in ddp fsdp; do
  OMP_NUM_THREADS=1 /usr/bin/time -f "%M" -o "$OUT/$mode.maxrss_kb" \
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
    -m turncredit.cli train configs/20q-starpo.yaml --run-dir "$OUT/$mode" model.name="$MODEL" \
    train.parallel=$mode train.steps=3 rollout.tasks_per_step=2 rollout.group_size=4 env.options.max_turns=6 \
    run.threads=1 run.progress=never > "$OUT/$mode.log" 2>&1
done
python - "$OUT" "$MODEL" <<'PY'
import json, sys
from pathlib import Path
from safetensors.torch import load_file
out = Path(sys.argv[1])
for mode in ("ddp", "fsdp"):
    steps = [json.loads(x) for x in (out / mode / "metrics.jsonl").read_text().splitlines()]
    rss = int((out / f"{mode}.maxrss_kb").read_text().split()[-1]) / 1024
    print(f"{mode}: parameters + optimizer state held by rank 0 {steps[-1]['resident_mib']:.0f} MiB; "
          f"peak RSS of the largest process {rss:.0f} MiB; per step rollout s "
          f"{[round(s['seconds_rollout'], 1) for s in steps]}, update s {[round(s['seconds_update'], 1) for s in steps]}, "
          f"reward {[round(s['reward_mean'], 2) for s in steps]}, group std {[round(s['group_reward_std'], 2) for s in steps]}")
a, b = (load_file(str(out / m / "checkpoint" / "model.safetensors")) for m in ("ddp", "fsdp"))
from turncredit.policy.loading import load_model
start = load_model(sys.argv[2]).state_dict()
import torch
diff = torch.cat([(a[k] - b[k]).flatten() for k in a])
moved = torch.cat([(a[k] - start[k]).flatten() for k in a])
print(f"final weights: max |ddp - fsdp| {diff.abs().max().item():.2e}, max |ddp - start| {moved.abs().max().item():.2e}, "
      f"||ddp - fsdp|| / ||ddp - start|| {(diff.norm() / moved.norm()).item():.4f}, "
      f"elements apart by > 1e-6: {(diff.abs() > 1e-6).float().mean().item():.2%}")
PY
