#!/usr/bin/env python
"""Kill `turncredit train` with SIGKILL at random moments, resume it each time, and check that
nothing is lost or corrupted: the result must equal an uninterrupted run bit for bit.

After every kill it checks that (1) every step up to the newest complete checkpoint still has
its episode file, identical to the reference run's; (2) the next resume loads exactly that
newest complete checkpoint (never a temp folder, never an older one); at the end (3) weights,
optimizer state, metrics (without timings) and every step's episodes equal the reference.

    python scripts/bench_kill_resume.py --kills 20 --out benchmarks/results/kill-resume.json

Uses the tiny random model (so a step takes about a second) on 20 Questions, one checkpoint per
step; the kills land during start-up, rollouts, updates and checkpoint writes alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "20q-starpo.yaml"


def overrides(model: Path, steps: int) -> list[str]:
    return [f"model.name={model}", "env.options.max_turns=3", "env.options.num_candidates=4",
            "rollout.tasks_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
            f"train.steps={steps}", "train.save_every=1", "train.keep_last=2", "train.lr=1e-3",
            "train.minibatches=2", "train.micro_batch_size=2", "run.threads=1"]


def train_cmd(run: Path, opts: list[str], resume: bool) -> list[str]:
    where = ["--resume", str(run)] if resume else ["--run-dir", str(run)]
    return [sys.executable, "-m", "turncredit.cli", "train", str(CONFIG), *opts, *where]


def complete_checkpoints(run: Path) -> list[int]:
    """Steps of the checkpoint folders under their final names (what a resume may load)."""
    out = []
    for d in run.glob("checkpoint*"):
        state = d / "train_state.json"
        if d.is_dir() and state.is_file():
            out.append(json.loads(state.read_text())["step"])
    return sorted(out)


def untimed_metrics(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("seconds_", "update_tokens_per_s"))} for r in rows]


def same_tensors(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    ta, tb = load_file(str(a)), load_file(str(b))
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=24, help="training steps of the run")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times")
    ap.add_argument("--out", help="append the result as one JSON line to this file")
    args = ap.parse_args()

    from turncredit.policy.loading import save_checkpoint, tiny_model, load_tokenizer

    work = Path(tempfile.mkdtemp(prefix="kill-resume-"))
    tok = load_tokenizer("smollm2")
    model = save_checkpoint(tiny_model(tok, seed=0), tok, work / "tiny")
    opts = overrides(model, args.steps)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    ref, run = work / "reference", work / "killed"
    t0 = time.perf_counter()
    subprocess.run(train_cmd(ref, opts, resume=False), check=True, capture_output=True, env=env)
    ref_seconds = time.perf_counter() - t0
    print(f"reference run: {args.steps} steps in {ref_seconds:.1f} s", flush=True)

    rng = random.Random(args.seed)
    kills, problems = [], []
    expect_step = None
    for i in range(args.kills + 1):
        last = i == args.kills
        # a process killed before it wrote config.yaml left no run to resume: start it afresh
        proc = subprocess.Popen(train_cmd(run, opts, resume=(run / "config.yaml").is_file()), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        if last:
            out, err = proc.communicate()
        else:
            # anywhere from start-up to a few steps in: start-up, rollout, update, checkpoint writes
            delay = rng.uniform(0.3, ref_seconds / args.steps * 4 + 6.0)
            try:
                out, err = proc.communicate(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                out, err = proc.communicate()
        m = re.search(r"resumed from (\S+) \(step (\d+)\)", out)
        started = m is not None or "step " in out or proc.returncode == 0  # got past loading
        loaded = int(m.group(2)) if m else 0
        if started and expect_step is not None and loaded != expect_step:
            problems.append(f"start {i}: resumed at step {loaded}, expected the newest complete checkpoint {expect_step}")
        if m and ".tmp-" in m.group(1):
            problems.append(f"start {i}: loaded a temp folder {m.group(1)}")
        if proc.returncode not in (0, -signal.SIGKILL):
            problems.append(f"start {i}: exit code {proc.returncode}: {err.strip().splitlines()[-1:]}")
        done = complete_checkpoints(run)
        newest = max(done, default=0)
        for step in range(1, newest + 1):  # every completed step's episodes are on disk, unchanged
            name = f"episodes/step_{step:05d}.jsonl"
            if not (run / name).is_file() or (run / name).read_bytes() != (ref / name).read_bytes():
                problems.append(f"after kill {i}: {name} missing or different")
        partial = sorted(d.name for d in run.glob(".checkpoint*"))
        kills.append({"start": i, "resumed_at": loaded if started else None, "killed": proc.returncode == -signal.SIGKILL,
                      "newest_checkpoint": newest, "leftover_temp_dirs": partial})
        print(f"start {i:>2}: " + (f"resumed at step {loaded:>2}" if started else "killed while starting up")
              + f", {'killed' if proc.returncode else 'finished'}; "
              f"newest complete checkpoint {newest}{'; temp dirs ' + str(partial) if partial else ''}", flush=True)
        expect_step = newest
        if proc.returncode == 0 and not last:
            break  # the run finished before this kill: nothing left to interrupt

    final_ok = {
        "weights": same_tensors(ref / "checkpoint" / "trainable.safetensors", run / "checkpoint" / "trainable.safetensors"),
        "optimizer": same_tensors(ref / "checkpoint" / "optimizer.safetensors", run / "checkpoint" / "optimizer.safetensors"),
        "metrics": untimed_metrics(ref) == untimed_metrics(run),
        "episodes": all((ref / "episodes" / f.name).read_bytes() == f.read_bytes()
                        for f in sorted((run / "episodes").glob("step_*.jsonl")))
        and len(list((run / "episodes").glob("step_*.jsonl"))) == args.steps,
    }
    problems += [f"final {k} differ from the uninterrupted run" for k, ok in final_ok.items() if not ok]
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "command": "python scripts/bench_kill_resume.py " + " ".join(sys.argv[1:]),
        "steps": args.steps, "kills": sum(k["killed"] for k in kills), "starts": len(kills),
        "kills_with_temp_dir_left": sum(bool(k["leftover_temp_dirs"]) for k in kills),
        "final_equal": final_ok, "problems": problems, "timeline": kills, "reference_seconds": round(ref_seconds, 1),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "timeline"}, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
