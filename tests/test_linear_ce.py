"""The fused, blocked read-out + cross-entropy against its plain autograd twin, run in float64:
float32 results are bounded against it by the loss's own conditioning, measured there on the
same inputs (tests/float_bounds.py)."""
import pytest
import torch
from float_bounds import C, assert_within, float64_casts, sensitivity

import recallbench.harness.linear_ce as lce

pytestmark = pytest.mark.parity


def _inputs(K=3, Q=50, V=37, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(K, Q, D, generator=g, requires_grad=True)
    W = torch.randn(K, V, D, generator=g, requires_grad=True)
    answers = torch.randint(0, V, (K, Q), generator=g)
    weights = torch.rand(K, Q, generator=g)
    smoothing = torch.tensor([0.0, 0.1, 0.5])[:K]
    return h, W, answers, weights, smoothing


def _reference64(h, W, answers, weights, smoothing, upstream):
    """The autograd twin in float64 (its float32 casts pointed at float64): the loss and the
    gradients of (loss · upstream).sum() w.r.t. h and W; with the float64 leaves to perturb."""
    h64, W64 = (t.detach().double().requires_grad_() for t in (h, W))
    rest = [t.double() for t in (weights, smoothing, upstream)]

    def run():
        with float64_casts():
            loss = lce.linear_cross_entropy_reference(h64, W64, answers, rest[0], rest[1])
        return [loss.detach(), *torch.autograd.grad((loss * rest[2]).sum(), [h64, W64])]

    return run, [h64, W64, *rest]


@pytest.mark.parametrize("block", [1, 37 * 3 * 4, 1 << 18])  # one query, several, all at once
def test_loss_and_gradients_match_reference(monkeypatch, block):
    monkeypatch.setattr(lce, "BLOCK_FLOATS", block)
    h, W, answers, weights, smoothing = _inputs()
    upstream = torch.tensor([1.0, -2.0, 0.5])  # a member-dependent upstream gradient
    loss = lce.linear_cross_entropy(h, W, answers, weights, smoothing)
    got = [loss.detach(), *torch.autograd.grad((loss * upstream).sum(), [h, W])]
    run, leaves = _reference64(h, W, answers, weights, smoothing, upstream)
    ref = run()
    assert all(t.dtype == torch.float32 for t in got) and all(t.dtype == torch.float64 for t in ref)
    assert_within(got, ref, sensitivity(run, leaves), C, ["loss", "dh", "dW"])


def test_reference_is_torch_cross_entropy_with_label_smoothing():
    """Weights 1/Q: torch's mean label-smoothed cross-entropy; float32 within C·eps32·cond of
    torch's, per query, weighted by the same (float32) 1/Q and summed in float64."""
    h, W, answers, _, _ = _inputs(K=1)
    Q = answers.shape[1]
    weights = torch.full((1, Q), 1.0 / Q)
    h64, W64, w64 = (t.detach().double() for t in (h, W, weights))
    for eps in (0.0, 0.1):
        smoothing = torch.tensor([eps])

        def want():
            per_query = torch.nn.functional.cross_entropy(h64[0] @ W64[0].t(), answers[0], reduction="none",
                                                          label_smoothing=smoothing.item())
            return [(per_query * w64[0]).sum()]

        got = lce.linear_cross_entropy(h, W, answers, weights, smoothing)
        assert got.dtype == torch.float32
        assert_within([got[0]], want(), sensitivity(want, [h64, W64, w64]), C, [f"smoothing {eps}"])


def test_zero_weight_queries_do_not_count():
    h, W, answers, weights, smoothing = _inputs()
    weights[:, 10:] = 0.0
    full = lce.linear_cross_entropy(h, W, answers, weights, smoothing)
    part = lce.linear_cross_entropy(h[:, :10], W, answers[:, :10], weights[:, :10], smoothing)
    run, leaves = _reference64(h[:, :10], W, answers[:, :10], weights[:, :10], smoothing,
                               torch.ones(len(smoothing)))
    sens = sensitivity(run, leaves)[:1]
    assert_within([full.detach(), part.detach()], run()[:1] * 2, sens * 2, C, ["all queries", "first 10"])
    gh, = torch.autograd.grad(full.sum(), [h])
    assert gh[:, 10:].abs().max() == 0


def test_bad_shapes_are_refused():
    h, W, answers, weights, smoothing = _inputs()
    with pytest.raises(ValueError, match="W must be"):
        lce.linear_cross_entropy(h, W[:2], answers, weights, smoothing)
    with pytest.raises(ValueError, match="answers and weights"):
        lce.linear_cross_entropy(h, W, answers[:, :5], weights, smoothing)
