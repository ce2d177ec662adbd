"""Data parallel on 2 CPU processes (gloo; torchrun, the launcher accelerate uses for several
processes, since `accelerate launch --cpu` starts one): the ranks end with identical
weights, equal to one process training on the same global batch (to 1e-5: only the order of
the gradient sums differs), and only rank 0 writes the run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from turncredit.policy.loading import tiny_model

HERE = Path(__file__).resolve().parent


def test_two_gloo_ranks_match_each_other_and_one_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(HERE / "ddp_driver.py"), str(tmp_path / "ddp")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r0, r1 = (load_file(str(tmp_path / "ddp" / f"rank{r}.safetensors")) for r in (0, 1))
    assert all(torch.equal(r0[k], r1[k]) for k in r0), "ranks diverged"

    sys.path.insert(0, str(HERE))
    from ddp_driver import train

    single, history = train(tmp_path / "single")
    start = dict(tiny_model(single.session.tokenizer, seed=0).named_parameters())
    moved = 0.0
    for n, w in single.model.named_parameters():
        assert torch.allclose(r0[n], w.detach(), atol=1e-5, rtol=0), n
        moved = max(moved, (w.detach() - start[n]).abs().max().item())
    assert moved > 1e-4, "training did not move the weights: the comparison would be empty"

    ddp_run, single_run = tmp_path / "ddp" / "run", tmp_path / "single" / "run"
    ddp_metrics = [json.loads(x) for x in (ddp_run / "metrics.jsonl").read_text().splitlines()]
    assert [m["episodes"] for m in ddp_metrics] == [16, 16]  # all groups, gathered from both ranks
    assert [m["reward_mean"] for m in ddp_metrics] == [m["reward_mean"] for m in history]
    assert (ddp_run / "episodes" / "step_00002.jsonl").read_text() == (single_run / "episodes" / "step_00002.jsonl").read_text()
    assert sorted(d.name for d in ddp_run.iterdir() if d.name.startswith("checkpoint")) == ["checkpoint", "checkpoint_step00001"]
