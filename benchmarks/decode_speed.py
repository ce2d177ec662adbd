"""Multi-turn decode throughput of a generation backend (not a unit test: run it alone).

    python benchmarks/decode_speed.py --backend kv --batch 32 --turns 4

Each of `batch` rows plays `turns` turns of up to 24 new tokens; between turns the reply
"No." is bridged in, as in a 20 Questions rollout. Prints generated tokens per second.
"""

import argparse
import time

import torch

from turncredit.chat import ChatBridge
from turncredit.policy.backends import BACKENDS, SamplingParams
from turncredit.policy.loading import load_model, load_tokenizer

SYSTEM = "You are the questioner in a game of 20 Questions. Ask one yes/no question per turn."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="kv", choices=BACKENDS.names())
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args.model)
    model = load_model(args.model).eval()
    bridge = ChatBridge(tok)
    state = BACKENDS.get(args.backend)(model, bridge.end_of_turn_id, tok.pad_token_id).start(args.batch, seed=0)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Ask your first question."}]
    new = [bridge.opening_ids(msgs)] * args.batch
    total, t0 = 0, time.perf_counter()
    for turn in range(args.turns):
        t1 = time.perf_counter()
        gens = state.generate(range(args.batch), new, SamplingParams(max_new_tokens=24))
        n = sum(len(g.ids) for g in gens)
        total += n
        new = [bridge.reply_ids("No.", g.ids[-1] == bridge.end_of_turn_id) for g in gens]
        print(f"turn {turn}: {n} tokens in {time.perf_counter() - t1:.2f} s", flush=True)
    print(f"{args.backend} batch {args.batch}: {total / (time.perf_counter() - t0):.1f} generated tok/s")


if __name__ == "__main__":
    main()
