"""Where the RL stage's memory goes: peak RSS of each phase of one training step.

    python benchmarks/memory_profile.py [CONFIG.yaml] CHECKPOINT [--replay STEP.jsonl] [KEY=VALUE ...]

Loads the 20 Questions config (configs/20q-starpo.yaml unless given) with the overrides and model, then runs one step's phases
one by one under an RSS sampler (every 20 ms): rollout, then the update. Prints one JSON line
per phase with the peak RSS reached in it, what it started from, and the step's sizes
(benchmarks/memory-cpu.md). Overrides select what is measured, e.g. train.micro_batch_size=1.
`--replay` updates on a run's saved step instead (RUN/episodes/step_N.jsonl, advantages and
guided members as trained), so two versions of the update see the very same episodes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager

import psutil

from turncredit.config import load_config
from turncredit.train.trainer import Trainer


class PeakRSS:
    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.02)

    @contextmanager
    def phase(self, name: str, **extra):
        start = self.proc.memory_info().rss
        self.peak = start
        self._stop.clear()
        t = threading.Thread(target=self._run, daemon=True)
        t.start()
        t0 = time.perf_counter()
        info: dict = {}
        try:
            yield info
        finally:
            self._stop.set()
            t.join()
            end = self.proc.memory_info().rss
            mib = 1 << 20
            print(json.dumps({"phase": name, "start_mib": start // mib, "peak_mib": self.peak // mib,
                              "end_mib": end // mib, "seconds": round(time.perf_counter() - t0, 1), **extra, **info}),
                  flush=True)


def main() -> None:
    args = sys.argv[1:]
    config = args.pop(0) if args and args[0].endswith((".yaml", ".yml")) else "configs/20q-starpo.yaml"
    replay = None
    if "--replay" in args:
        at = args.index("--replay")
        replay = args[at + 1]
        del args[at:at + 2]
    ckpt, overrides = args[0], args[1:]
    cfg = load_config(config, [f"model.name={ckpt}", "train.steps=1", *overrides])
    rss = PeakRSS()
    import tempfile

    with tempfile.TemporaryDirectory() as run_dir:
        with rss.phase("load"):
            trainer = Trainer(cfg, run_dir)
        if replay:
            from turncredit.episode import Episode
            from turncredit.jsonl import iter_jsonl

            episodes = [Episode.from_dict(d, where=at) for at, d in iter_jsonl(replay, "--replay")]
        else:
            with rss.phase("rollout", episodes=cfg.rollout.tasks_per_step * cfg.rollout.group_size) as info:
                episodes = trainer.play(1).episodes
                lengths = sorted(len(ep.token_ids()) for ep in episodes)
                info.update(tokens=sum(lengths), longest=lengths[-1], median=lengths[len(lengths) // 2])
            from turncredit.credit import assign_advantages

            assign_advantages(episodes, cfg.algo.estimator, **cfg.algo.estimator_options)
        with rss.phase("update", micro_batch_size=cfg.train.micro_batch_size,
                       micro_batch_tokens=cfg.train.micro_batch_tokens, minibatches=cfg.train.minibatches,
                       checkpointing=cfg.train.activation_checkpointing, bf16=trainer.bf16) as info:
            st = trainer.update([ep for ep in episodes if ep.turns and not ep.aborted])
            info.update(tokens=st.sequence_tokens, optimizer_steps=st.optimizer_steps)


if __name__ == "__main__":
    main()
