"""The fused, blocked read-out + cross-entropy against its plain autograd twin."""
import pytest
import torch

import recallbench.harness.linear_ce as lce


def _inputs(K=3, Q=50, V=37, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(K, Q, D, generator=g, requires_grad=True)
    W = torch.randn(K, V, D, generator=g, requires_grad=True)
    answers = torch.randint(0, V, (K, Q), generator=g)
    weights = torch.rand(K, Q, generator=g)
    smoothing = torch.tensor([0.0, 0.1, 0.5])[:K]
    return h, W, answers, weights, smoothing


@pytest.mark.parametrize("block", [1, 37 * 3 * 4, 1 << 18])  # one query, several, all at once
def test_loss_and_gradients_match_reference(monkeypatch, block):
    monkeypatch.setattr(lce, "BLOCK_FLOATS", block)
    h, W, answers, weights, smoothing = _inputs()
    upstream = torch.tensor([1.0, -2.0, 0.5])  # a member-dependent upstream gradient
    out = []
    for fn in (lce.linear_cross_entropy, lce.linear_cross_entropy_reference):
        loss = fn(h, W, answers, weights, smoothing)
        gh, gW = torch.autograd.grad((loss * upstream).sum(), [h, W])
        out.append((loss.detach(), gh, gW))
    for got, ref in zip(out[0], out[1]):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_reference_is_torch_cross_entropy_with_label_smoothing():
    h, W, answers, _, _ = _inputs(K=1)
    logits = (h[0] @ W[0].t())
    for eps in (0.0, 0.1):
        want = torch.nn.functional.cross_entropy(logits, answers[0], label_smoothing=eps)
        Q = answers.shape[1]
        got = lce.linear_cross_entropy(h, W, answers, torch.full((1, Q), 1.0 / Q),
                                       torch.tensor([eps]))
        torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-6)


def test_zero_weight_queries_do_not_count():
    h, W, answers, weights, smoothing = _inputs()
    weights[:, 10:] = 0.0
    full = lce.linear_cross_entropy(h, W, answers, weights, smoothing)
    part = lce.linear_cross_entropy(h[:, :10], W, answers[:, :10], weights[:, :10], smoothing)
    torch.testing.assert_close(full, part)
    gh, = torch.autograd.grad(full.sum(), [h])
    assert gh[:, 10:].abs().max() == 0


def test_bad_shapes_are_refused():
    h, W, answers, weights, smoothing = _inputs()
    with pytest.raises(ValueError, match="W must be"):
        lce.linear_cross_entropy(h, W[:2], answers, weights, smoothing)
    with pytest.raises(ValueError, match="answers and weights"):
        lce.linear_cross_entropy(h, W, answers[:, :5], weights, smoothing)
