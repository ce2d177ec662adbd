"""Data parallel on 2 CPU processes (gloo), started by accelerate's launcher (`accelerate launch
--multi_gpu`, which runs torchrun's agent; `--cpu` would start one process) and by torchrun:
the ranks end with identical weights, equal to one process training on the same global batch
(to 1e-5: only the order of the gradient sums differs), and only rank 0 writes the run. Both
ways of holding the model: replicas (ddp) and FSDP2 shards (fsdp, full fine-tuning and LoRA)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from turncredit.policy.loading import tiny_model

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAUNCHERS = {
    "accelerate": ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "{port}"],
    "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
}


def launch_two_ranks(out: Path, mode: str, launcher: str) -> tuple[dict, dict]:
    """Run tests/ddp_driver.py on 2 gloo ranks; each rank's whole weights afterwards."""
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    args = [a.format(port=free_port()) for a in LAUNCHERS[launcher]]
    p = subprocess.run([sys.executable, *args, str(HERE / "ddp_driver.py"), str(out), mode],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return tuple(load_file(str(out / f"rank{r}.safetensors")) for r in (0, 1))


def train_one_process(out: Path, mode: str):
    sys.path.insert(0, str(HERE))
    from ddp_driver import train

    return train(out, mode)


def test_two_gloo_ranks_match_each_other_and_one_process(tmp_path):
    r0, r1 = launch_two_ranks(tmp_path / "ddp", "ddp", "accelerate")
    assert all(torch.equal(r0[k], r1[k]) for k in r0), "ranks diverged"

    single, history = train_one_process(tmp_path / "single", "ddp")
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


@pytest.mark.parametrize("mode", ["fsdp", "fsdp-lora"])
def test_fsdp_shards_train_like_one_process_and_resume_exactly(tmp_path, mode):
    """FSDP on uneven work (3 groups on 2 ranks: rank 1 runs idle forward passes), 2 epochs, a
    KL reference (sharded frozen copy / adapter off), LoRA with belief scoring in the gathered
    window: the weights equal one process's within 1e-5, and so does the checkpoint written
    from the shards (trained tensors, Adam moments to 1e-3 relative, merged export); resuming
    on the shards from step 1's checkpoint ends bit-identical to the uninterrupted run."""
    r0, r1 = launch_two_ranks(tmp_path / "fsdp", mode, "torchrun")
    assert all(torch.equal(r0[k], r1[k]) for k in r0), "the gathered weights differ between ranks"
    resumed = load_file(str(tmp_path / "fsdp" / "rank0-resumed.safetensors"))
    assert all(torch.equal(r0[k], resumed[k]) for k in r0), "resuming on the shards changed the result"

    single, history = train_one_process(tmp_path / "single", mode)
    trained = dict(single.model.named_parameters())
    assert sorted(trained) == sorted(r0)
    for n, w in trained.items():
        assert torch.allclose(r0[n], w.detach(), atol=1e-5, rtol=0), n
    assert history[-1]["ref_kl"] > 0 and history[-1]["episodes_trained"] == 12

    # what rank 0 holds for weights and Adam state: about half of one process's (rank 0 keeps
    # the larger chunk of odd-sized tensors)
    held = [json.loads(x)["resident_mib"] for x in (tmp_path / "fsdp" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert 0.45 < held[-1] / history[-1]["resident_mib"] < 0.55

    for f, rtol in [("trainable.safetensors", 1e-3), ("optimizer.safetensors", 1e-3), ("model.safetensors", 1e-3)]:
        sharded = load_file(str(tmp_path / "fsdp" / "run" / "checkpoint" / f))
        alone = load_file(str(tmp_path / "single" / "run" / "checkpoint" / f))
        assert sorted(sharded) == sorted(alone), f
        for k in alone:
            assert torch.allclose(sharded[k].float(), alone[k].float(), rtol=rtol, atol=1e-7), (f, k)


def test_resident_mib_counts_parameters_and_adam_state():
    """Replicated: 4 bytes per weight, then + 8 per weight for Adam's moments + 4 per step counter."""
    from turncredit.train.distributed import resident_mib

    layer = torch.nn.Linear(10, 5)  # 55 weights in 2 tensors
    opt = torch.optim.AdamW(layer.parameters())
    assert resident_mib(layer, opt) * 2**20 == 55 * 4
    layer(torch.ones(1, 10)).sum().backward()
    opt.step()
    assert resident_mib(layer, opt) * 2**20 == 55 * 12 + 2 * 4
