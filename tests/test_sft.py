"""SFT: the loss covers the assistant's tokens only, and a few steps on demonstrations lower it."""

import json

import pytest
import torch

from turncredit.config import SFTConfig
from turncredit.episode import Episode, Task, Turn, write_episodes
from turncredit.policy.session import PolicySession
from turncredit.train.sft import dialogues_to_batch, load_dialogues, run_sft, sft_backward, sft_loss

CHAT = [
    {"role": "system", "content": "You play 20 Questions."},
    {"role": "user", "content": "Ask your first question."},
    {"role": "assistant", "content": "Is it an animal?"},
    {"role": "user", "content": "Yes."},
    {"role": "assistant", "content": "Is it a dog?"},
]


def test_loss_mask_is_exactly_the_assistant_tokens(tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    batch = dialogues_to_batch(session, [CHAT], max_length=4096)
    ids = batch.input_ids[0].tolist()
    trained = [ids[p + 1] for p in range(len(ids) - 1) if batch.targets[0, p] == 1]
    eot = session.bridge.end_of_turn_id
    expected = []
    for m in CHAT:
        if m["role"] == "assistant":
            expected += smol_tokenizer.encode(m["content"], add_special_tokens=False) + [eot]
    assert trained == expected
    text = smol_tokenizer.decode(trained)
    assert "Yes." not in text and "20 Questions" not in text


def test_loss_ignores_non_assistant_tokens(tiny_policy, smol_tokenizer):
    """Changing only a user message's tokens leaves the per-token loss of the others' positions
    unchanged in count: the mask never lands on user tokens."""
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    longer = [dict(m) for m in CHAT]
    longer[3]["content"] = "Yes. " * 20
    a = dialogues_to_batch(session, [CHAT], 4096)
    b = dialogues_to_batch(session, [longer], 4096)
    assert a.num_tokens == b.num_tokens
    assert a.input_ids.shape[1] < b.input_ids.shape[1]


def test_a_few_sft_steps_lower_the_loss(tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    state = {k: v.clone() for k, v in tiny_policy.state_dict().items()}
    batch = dialogues_to_batch(session, [CHAT] * 2, 4096)
    with torch.no_grad():
        before = sft_loss(session, batch).item()
    hist = run_sft(session, [CHAT] * 4, SFTConfig(epochs=5, lr=3e-3, batch_size=4), seed=0)
    with torch.no_grad():
        after = sft_loss(session, batch).item()
    tiny_policy.load_state_dict(state)
    assert len(hist) == 5
    assert after < before - 0.5, (before, after)


def test_activation_checkpointing_in_sft_changes_memory_not_the_steps(tiny_policy, smol_tokenizer):
    import copy

    losses = {}
    for flag in (False, True):
        model = copy.deepcopy(tiny_policy)
        hist = run_sft(PolicySession.from_model(model, smol_tokenizer), [CHAT] * 4,
                       SFTConfig(epochs=2, lr=1e-3, batch_size=4, activation_checkpointing=flag), seed=0)
        assert bool(model.model.gradient_checkpointing) is flag
        losses[flag] = [h["loss"] for h in hist]
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)  # the second step sees the first's update


def test_sft_with_trainable_layers_moves_only_the_top_layer_and_norm(tiny_policy, smol_tokenizer):
    import copy

    model = copy.deepcopy(tiny_policy)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run_sft(PolicySession.from_model(model, smol_tokenizer), [CHAT] * 4,
            SFTConfig(epochs=1, lr=1e-3, batch_size=4, trainable_layers=1), seed=0)
    top = f"model.layers.{len(model.model.layers) - 1}."
    moved = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith(top) or k.startswith("model.norm.") for k in moved), moved
    assert any(k.startswith(top) for k in moved)
    with pytest.raises(ValueError, match="sft.trainable_layers"):
        run_sft(PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer), [CHAT],
                SFTConfig(trainable_layers=99), seed=0)


def test_load_dialogues_from_episodes_and_chats(tmp_path):
    ep = Episode(task=Task("dog"), group_id="g", messages=CHAT[:2],
                 turns=[Turn([], [], [], "Is it an animal?", "Yes."), Turn([], [], [], "Is it a dog?", "Finished!")])
    write_episodes(tmp_path / "eps.jsonl", [ep])
    assert load_dialogues(tmp_path / "eps.jsonl") == [CHAT]
    (tmp_path / "chats.jsonl").write_text(json.dumps({"messages": CHAT}) + "\n")
    assert load_dialogues(tmp_path / "chats.jsonl") == [CHAT]


@pytest.mark.parametrize("line, message", [
    ("{oops", "bad.jsonl:1: not valid JSON"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', r"bad.jsonl:1: messages\[0\] must be"),
    ('{"messages": [{"role": "user", "content": "x"}]}', "bad.jsonl:1: no assistant message"),
    ('[1, 2]', "bad.jsonl:1: expected an Episode or an object with 'messages'"),
])
def test_bad_sft_data_names_file_and_line(tmp_path, line, message):
    (tmp_path / "bad.jsonl").write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        load_dialogues(tmp_path / "bad.jsonl")


def test_missing_sft_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="SFT data file not found"):
        load_dialogues(tmp_path / "none.jsonl")


def test_micro_batches_give_the_gradient_of_the_whole_batch(tiny_policy, smol_tokenizer):
    """Token-mean over the batch, accumulated one dialogue at a time: Σ_j (Σ_j m·(−log p)) / N
    equals the loss and gradient of the batch in one forward, although the dialogues differ in
    length (so per-micro-batch means would weight them differently)."""
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    short = CHAT[:3]
    long = CHAT + [{"role": "user", "content": "No."}, {"role": "assistant", "content": "Is it a big grey cat?"}]
    dialogues = [long, short, CHAT]
    params = [p for p in tiny_policy.parameters() if p.requires_grad]

    def grads(micro: int) -> tuple[float, list[torch.Tensor]]:
        tiny_policy.zero_grad(set_to_none=True)
        loss, _ = sft_backward(session, dialogues, 4096, micro)
        return loss, [p.grad.clone() for p in params]

    whole_loss = sft_loss(session, dialogues_to_batch(session, dialogues, 4096)).item()
    loss_all, g_all = grads(0)
    loss_one, g_one = grads(1)
    tiny_policy.zero_grad(set_to_none=True)
    assert loss_all == pytest.approx(whole_loss, rel=1e-5)
    assert loss_one == pytest.approx(whole_loss, rel=1e-5)
    for a, b in zip(g_all, g_one):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
