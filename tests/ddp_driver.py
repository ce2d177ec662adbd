"""One rank of the data-parallel test (tests/test_distributed.py), started by `accelerate launch`:
trains the tiny model with a scripted policy and saves this rank's trained weights."""

import sys
from pathlib import Path

from safetensors.torch import save_file
from scripted import scripted_session

from turncredit.config import load_config
from turncredit.policy.loading import load_tokenizer, tiny_model
from turncredit.train.trainer import Trainer

ACTIONS = ["Is it an animal?", "Is it a kind of tool?", "Is it food?", "Is it an animal?"]
OVERRIDES = ["env.options.max_turns=3", "env.options.num_candidates=4", "rollout.tasks_per_step=4",
             "rollout.group_size=4", "train.steps=2", "train.lr=1e-3", "train.minibatches=1",
             "train.micro_batch_size=1", "train.save_every=1", "run.threads=1", "run.seed=5"]


def train(out: Path):
    tok = load_tokenizer("smollm2")
    session = scripted_session(tiny_model(tok, seed=0), tok, ACTIONS, period=4)
    trainer = Trainer(load_config(None, OVERRIDES), out / "run", session=session, overwrite=True)
    history = trainer.train()
    return trainer, history


if __name__ == "__main__":
    out = Path(sys.argv[1])
    trainer, _ = train(out)
    weights = {n: p.detach().contiguous() for n, p in trainer.model.named_parameters()}
    save_file(weights, str(out / f"rank{trainer.dist.rank}.safetensors"))
