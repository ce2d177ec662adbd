"""One rank of the data-parallel tests (tests/test_distributed.py), started by accelerate's
launcher or torchrun: trains the tiny model with a scripted policy and saves the whole trained
weights as this rank sees them.

`python ddp_driver.py OUT MODE` with MODE one of MODES; the fsdp modes also resume the run from
its step-1 checkpoint on the same ranks and save those weights too (`rank<r>-resumed`).
"""

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from scripted import scripted_session

from turncredit.config import load_config
from turncredit.policy.loading import add_lora, load_tokenizer, tiny_model
from turncredit.train.checkpoint import FINAL_DIR, discard
from turncredit.train.trainer import Trainer

ACTIONS = ["Is it an animal?", "Is it a kind of tool?", "Is it food?", "Is it an animal?"]
OVERRIDES = ["env.options.max_turns=3", "env.options.num_candidates=4", "rollout.tasks_per_step=4",
             "rollout.group_size=4", "train.steps=2", "train.lr=1e-3", "train.minibatches=1",
             "train.micro_batch_size=1", "train.save_every=1", "run.threads=1", "run.seed=5",
             "train.bf16=false"]  # ranks vs one process to 1e-5 is an fp32 statement, on any CPU
# fsdp: 3 groups on 2 ranks (uneven work: rank 1 pads its forward passes), 2 epochs (a separate
# old-log-prob pass), a KL reference; the LoRA mode also scores beliefs with the policy inside
# the gathered-weights window. One minibatch: with more, each rank deals its own micro-batches
# into minibatches, so the optimizer steps differ from one process's (as in any data parallel)
UNEVEN = ["rollout.tasks_per_step=3", "train.ppo_epochs=2", "train.micro_batch_size=2"]
MODES = {
    "ddp": ([], False),
    "fsdp": (["train.parallel=fsdp", *UNEVEN, "train.kl=k3", "train.kl_coef=0.1"], False),
    "fsdp-lora": (["train.parallel=fsdp", *UNEVEN, "train.kl=k3", "train.kl_coef=0.1", "algo.reward_shaper=belief",
                   "algo.shaper_options={lam: 0.5}"], True),
}


def make_trainer(out: Path, mode: str, resume: bool = False) -> Trainer:
    overrides, lora = MODES[mode]
    tok = load_tokenizer("smollm2")
    model = tiny_model(tok, seed=0)
    if lora:
        torch.manual_seed(0)  # the adapter's initialisation, the same in every process
        model = add_lora(model, {"r": 4, "lora_alpha": 8})
    session = scripted_session(model, tok, ACTIONS, period=4)
    cfg = load_config(None, OVERRIDES + overrides)
    return Trainer(cfg, out / "run", session=session, resume=resume, overwrite=not resume)


def train(out: Path, mode: str = "ddp"):
    trainer = make_trainer(out, mode)
    history = trainer.train()
    return trainer, history


def whole_weights(trainer: Trainer) -> dict:
    with trainer.dist.full_weights(trainer.scorer):
        return {n: p.detach().clone().contiguous() for n, p in trainer.model.named_parameters()}


if __name__ == "__main__":
    out, mode = Path(sys.argv[1]), sys.argv[2]
    trainer, _ = train(out, mode)
    rank = trainer.dist.rank
    save_file(whole_weights(trainer), str(out / f"rank{rank}.safetensors"))
    if mode.startswith("fsdp"):
        if trainer.dist.is_main:
            discard(out / "run" / FINAL_DIR)  # the newest checkpoint is now step 1's
        trainer.dist.barrier()
        resumed = make_trainer(out, mode, resume=True)
        assert resumed.step_idx == 1, resumed.step_idx
        resumed.train()
        save_file(whole_weights(resumed), str(out / f"rank{rank}-resumed.safetensors"))
