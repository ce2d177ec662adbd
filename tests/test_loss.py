"""Loss math on hand-computed cases."""

import math

import pytest
import torch

from turncredit.config import TrainConfig
from turncredit.train.loss import (
    PPOLoss,
    aggregate,
    kl_penalty,
    ppo_clip_loss,
    truncated_is_weights,
)

# values / ragged mask: row 0 has 2 tokens, row 1 has 1, row 2 has none (skipped by seq-*).
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, float("nan")]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3
        ("seq-mean-token-mean", 2.75),  # mean(1.5, 4), row 2 skipped
        ("seq-mean-token-sum", 3.5),  # mean(3, 4), row 2 skipped
    ],
)
def test_aggregate_modes(mode, expected):
    out = aggregate(VALUES, MASK, mode)  # the masked nan must not leak
    assert out.item() == pytest.approx(expected)


def test_aggregate_errors_and_empty():
    with pytest.raises(KeyError, match="unknown loss aggregation 'sum'.*token-mean"):
        aggregate(VALUES, MASK, "sum")
    with pytest.raises(ValueError, match="mask has shape"):
        aggregate(VALUES, MASK[:, :2], "token-mean")
    v = torch.ones(2, 2, requires_grad=True)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        out = aggregate(v, torch.zeros(2, 2), mode)
        assert out.item() == 0.0 and out.requires_grad


# One row of 6 tokens, old logprobs 0, so ratio = exp(logp):
#   ratio  1.3  0.7  1.1  0.9  1.3  0.7
#   A      +1   -1   +1   -1   -1   +1
#   ℓ = −min(rA, clip(r, 0.8, 1.28)A):
#         -1.28 0.8  -1.1 0.9  1.3  -0.7     (tokens 0, 1 clipped; 4, 5 outside but pessimistic)
#   token-mean = (-1.28 + 0.8 - 1.1 + 0.9 + 1.3 - 0.7)/6 = -0.08/6
#   dL/dlogp_t = −A·r/6 on unclipped tokens, 0 on clipped ones
RATIOS = [1.3, 0.7, 1.1, 0.9, 1.3, 0.7]
ADV = [1.0, -1.0, 1.0, -1.0, -1.0, 1.0]


def test_ppo_clip_higher_hand_case():
    logp = torch.log(torch.tensor([RATIOS])).requires_grad_()
    loss, stats = ppo_clip_loss(logp, torch.zeros(1, 6), torch.tensor([ADV]), torch.ones(1, 6))
    assert loss.item() == pytest.approx(-0.08 / 6)
    loss.backward()
    grad = logp.grad[0].tolist()
    assert grad[0] == 0.0 and grad[1] == 0.0  # clipped → no gradient
    assert grad[2:] == pytest.approx([-1.1 / 6, 0.9 / 6, 1.3 / 6, -0.7 / 6])
    assert stats["clip_fraction"] == pytest.approx(2 / 6)
    assert stats["clip_fraction_high"] == pytest.approx(1 / 6)
    assert stats["clip_fraction_low"] == pytest.approx(1 / 6)
    # approx_kl = mean(old − new) = −(2 ln1.3 + 2 ln0.7 + ln1.1 + ln0.9)/6 ≈ 0.033112
    assert stats["approx_kl"] == pytest.approx(0.198672 / 6, abs=1e-6)
    assert stats["ratio_mean"] == pytest.approx(1.0)  # (1.3+0.7+1.1+0.9+1.3+0.7)/6


def test_ppo_clip_is_asymmetric():
    # ratio 1.25, A = +1: inside [0.8, 1.28] → not clipped (a symmetric 0.2 clip would clip at 1.2)
    logp = torch.log(torch.tensor([[1.25]])).requires_grad_()
    loss, stats = ppo_clip_loss(logp, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(-1.25)
    assert logp.grad.item() == pytest.approx(-1.25)
    assert stats["clip_fraction"] == 0.0


def test_dual_clip_caps_a_negative_advantage_token_s_loss_at_c_times_its_advantage():
    # ratios 4, 2, 4, 0.5 with A = −1, −1, +1, −2; clip 0.2 / 0.28, c = 3
    #   t0: max(4·1, 1.28·1) = 4 → min(4, 3·1) = 3, constant (no gradient)
    #   t1: max(2, 1.28) = 2 < 3 → unchanged, gradient −A·ratio = 2
    #   t2: A > 0 → as without dual-clip: max(−4, −1.28) = −1.28 (clipped high)
    #   t3: max(0.5·2, 0.8·2) = 1.6 (clipped low) < 3·2 → unchanged
    ratios, adv = torch.tensor([[4.0, 2.0, 4.0, 0.5]]), torch.tensor([[-1.0, -1.0, 1.0, -2.0]])
    logp = torch.log(ratios).requires_grad_()
    loss, stats = ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4), dual_clip=3.0)
    assert loss.item() == pytest.approx((3 + 2 - 1.28 + 1.6) / 4)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 2 / 4, 0.0, 0.0])
    assert stats["dual_clip_fraction"] == pytest.approx(1 / 4)
    plain = torch.log(ratios).requires_grad_()
    loss, stats = ppo_clip_loss(plain, torch.zeros(1, 4), adv, torch.ones(1, 4))
    assert loss.item() == pytest.approx((4 + 2 - 1.28 + 1.6) / 4) and stats["dual_clip_fraction"] == 0.0
    loss.backward()
    assert plain.grad[0, 0].item() == pytest.approx(4 / 4)  # without it the runaway token pushes hardest
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4), dual_clip=0.5)


def test_ppo_per_sequence_advantages_and_padding():
    # row 0: ratios (1.1, pad), A = 2; row 1: ratios (0.9, 1.0), A = −1; pad holds −inf logp
    logp = torch.tensor([[math.log(1.1), -math.inf], [math.log(0.9), 0.0]]).requires_grad_()
    mask = torch.tensor([[1, 0], [1, 1]])
    loss, _ = ppo_clip_loss(logp, torch.zeros(2, 2), torch.tensor([2.0, -1.0]), mask)
    # per token: −2·1.1 = −2.2, 0.9, 1.0 → token-mean = (−2.2 + 0.9 + 1.0)/3 = −0.1
    assert loss.item() == pytest.approx(-0.1)
    loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0.0
    per_token, _ = ppo_clip_loss(logp.detach(), torch.zeros(2, 2),
                                 torch.tensor([[2.0, 2.0], [-1.0, -1.0]]), mask)
    assert per_token.item() == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="advantages must have shape"):
        ppo_clip_loss(logp, torch.zeros(2, 2), torch.zeros(3), mask)


def test_kl_penalty_hand_values():
    logp = torch.log(torch.tensor([[0.5, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.3]]))
    # k1 = ln0.5 − ln0.25 = ln2 ≈ 0.693147; equal probs → 0
    assert kl_penalty(logp, ref, "k1")[0].tolist() == pytest.approx([math.log(2), 0.0])
    # k3: log r = −ln2, r = 0.5 → 0.5 + ln2 − 1 ≈ 0.193147; equal probs → 0
    assert kl_penalty(logp, ref, "k3")[0].tolist() == pytest.approx([0.5 + math.log(2) - 1, 0.0],
                                                                    abs=1e-7)
    assert torch.equal(kl_penalty(logp, ref, "none"), torch.zeros(1, 2))
    with pytest.raises(KeyError, match="unknown KL penalty 'k2'.*k1, k3, none"):
        kl_penalty(logp, ref, "k2")


def test_truncated_is_weights_hand_case():
    # π_old / π_sampler = 0.5/0.25 = 2 → capped at 1.5; 0.2/0.4 = 0.5; off the mask → 1 (garbage ignored)
    old = torch.log(torch.tensor([[0.5, 0.2, 0.3]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.0]]))  # log 0 = -inf off the mask
    w = truncated_is_weights(old, sampler, torch.tensor([[1, 1, 0]]), cap=1.5)
    assert w[0].tolist() == pytest.approx([1.5, 0.5, 1.0])
    with pytest.raises(ValueError, match="tis_cap"):
        truncated_is_weights(old, sampler, torch.ones(1, 3), cap=0.0)


def test_ppo_clip_loss_weights_each_token_by_its_importance_weight():
    # ratio 1 (unclipped), A = [1, -2]: ℓ = -w·A = [-1.5, +1.0]; token-mean = -0.25
    logp = torch.log(torch.tensor([[0.5, 0.2]])).requires_grad_()
    w = torch.tensor([[1.5, 0.5]])
    loss, _ = ppo_clip_loss(logp, logp.detach(), torch.tensor([[1.0, -2.0]]), torch.ones(1, 2), is_weights=w)
    assert loss.item() == pytest.approx(-0.25)
    loss.backward()  # ∂ℓ/∂logp = -w·A·ratio / 2 tokens
    assert logp.grad[0].tolist() == pytest.approx([-0.75, 0.5])


# The whole loss on one row of 4 action tokens and a pad, old log-probs 0 (ratio = exp(logp)),
# clip 0.2 / 0.28, dual-clip c = 3, k3 KL with β = 0.5, entropy bonus α = 0.1, token-mean:
#   ratio   1.5    4      1      0.9    | pad
#   A       +1     −1     +2     −1     | 7
#   ℓ_clip  −1.28  3      −2     0.9        t0 clipped high (1.28); t1: 4·1 capped at c·|A| = 3
#   q = π_ref/π    2      0.5    1      1   k3 = q − ln q − 1 = 1 − ln2, ln2 − 0.5, 0, 0
#   H       1.0    0.5    0.2    0.3    | 9 (ignored)
# L_clip = (−1.28 + 3 − 2 + 0.9)/4 = 0.155;  L_KL = (1 − ln2 + ln2 − 0.5)/4 = 0.125;  H = 2/4 = 0.5
# L = 0.155 + 0.5·0.125 − 0.1·0.5 = 0.1675
# dL/dlogp = [−A·ratio on unclipped tokens + β·(1 − q)] / 4:
#   t0: (0 − 0.5)/4 = −0.125   t1: (0 + 0.25)/4 = 0.0625   t2: −2/4 = −0.5   t3: 0.9/4 = 0.225   pad: 0
# dL/dH = −α/4 = −0.025 on each action token
def test_ppo_loss_hand_case_with_clip_dual_clip_kl_and_entropy():
    ratios = torch.tensor([[1.5, 4.0, 1.0, 0.9, 1.0]])
    q = torch.tensor([[2.0, 0.5, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    logp = torch.log(ratios).requires_grad_()
    entropy = torch.tensor([[1.0, 0.5, 0.2, 0.3, 9.0]], requires_grad=True)
    ppo = PPOLoss(clip_low=0.2, clip_high=0.28, dual_clip=3.0, kl="k3", kl_coef=0.5, entropy_coef=0.1)
    loss, stats = ppo(logp, torch.zeros(1, 5), torch.tensor([[1.0, -1.0, 2.0, -1.0, 7.0]]), mask, entropy,
                      ref_logprobs=torch.log(ratios * q))
    assert loss.item() == pytest.approx(0.1675, abs=1e-6)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.125, 0.0625, -0.5, 0.225, 0.0], abs=1e-6)
    assert entropy.grad[0].tolist() == pytest.approx([-0.025] * 4 + [0.0])
    assert stats["loss"] == pytest.approx(0.1675, abs=1e-6)
    assert stats["ref_kl"] == pytest.approx(0.125, abs=1e-6) and stats["entropy"] == pytest.approx(0.5)
    assert stats["clip_fraction"] == pytest.approx(1 / 4) and stats["dual_clip_fraction"] == pytest.approx(1 / 4)


def test_ppo_loss_aggregates_every_term_alike_and_reads_the_train_config():
    # ratio 1 and A = 0: L_clip = 0. Rows of 2 and 1 action tokens, seq-mean-token-sum:
    #   H = mean(1 + 2, 3) = 3;  k1 = logp − ref = (0.1, 0.2 | 0.3) → L_KL = mean(0.3, 0.3) = 0.3
    #   L = 2·0.3 − 0.5·3 = −0.9
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.3, 1.0]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    entropy = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    ref = logp - torch.tensor([[0.1, 0.2], [0.3, 0.0]])
    ppo = PPOLoss(kl="k1", kl_coef=2.0, entropy_coef=0.5, agg="seq-mean-token-sum")
    loss, stats = ppo(logp, logp, torch.zeros(2), mask, entropy, ref_logprobs=ref)
    assert loss.item() == pytest.approx(-0.9, abs=1e-6)
    assert stats["entropy"] == pytest.approx(3.0) and stats["ref_kl"] == pytest.approx(0.3, abs=1e-6)
    # no KL term: no reference needed, ref_kl 0; α = 0: H is reported but not in L
    loss, stats = PPOLoss(agg="seq-mean-token-sum")(logp, logp, torch.zeros(2), mask, entropy)
    assert loss.item() == 0.0 and stats["ref_kl"] == 0.0 and stats["entropy"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        PPOLoss(kl="k3")(logp, logp, torch.zeros(2), mask, entropy)
    t = TrainConfig(clip_low=0.1, clip_high=0.3, dual_clip=3.0, kl="k3", kl_coef=0.01, entropy_coef=0.001,
                    loss_agg="seq-mean-token-mean")
    assert PPOLoss.from_config(t) == PPOLoss(0.1, 0.3, 3.0, "k3", 0.01, 0.001, "seq-mean-token-mean")
