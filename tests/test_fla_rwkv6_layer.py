"""The CPU forward of fla's RWKV6Attention (adapters/cpu/fla_rwkv6_layer.py) against fla's own
forward, both on the same swapped recurrence: output and every parameter's gradient, in
float64 and float32, on trained-looking (non-zero) weights; and calls it does not cover
(a mask, a cache) still reach fla's forward."""
from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("fla")

from recallbench.adapters.cpu.fla_swaps import SWAPS  # noqa: E402

TOL = 1e-5
pytestmark = pytest.mark.filterwarnings("ignore:According to Bo")  # fla's notice on building RWKV6


def _layer(dtype):
    from fla.layers.rwkv6 import RWKV6Attention

    SWAPS.install()
    torch.manual_seed(0)
    layer = RWKV6Attention(mode="chunk", hidden_size=24, expand_k=0.5, expand_v=1.0, num_heads=2,
                           proj_low_rank_dim=4, gate_low_rank_dim=6, layer_idx=0).to(dtype)
    with torch.no_grad():  # fla zero-initialises mu, bonus and the LoRA downs: wake them all up
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return layer


def _run(layer, forward, x):
    layer.zero_grad()
    xi = x.clone().requires_grad_(True)
    out = forward(layer, xi)[0]
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    return out.detach(), xi.grad.clone(), grads


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("T", [1, 37, 80])  # 80 > 64: fla's chunk mode
def test_matches_fla_forward_and_gradients(T):
    """Same maths: in float64 the two agree to 1e-6.  In float32 the output and the input
    gradient agree within TOL, and each parameter's gradient is as close to the float64 answer
    as fla's own float32 forward is (within TOL, or at most twice fla's error where the
    gradient is ill-conditioned: at T = 1 fla's float32 is itself off by ~1e-3 on one)."""
    from fla.layers.rwkv6 import RWKV6Attention

    l64 = _layer(torch.float64)  # installs the swaps
    l32 = copy.deepcopy(l64).float()
    swapped = RWKV6Attention.forward
    assert swapped.__swap_target__ == "fla.layers.rwkv6:RWKV6Attention.forward"
    fla_forward = swapped.__wrapped_original__
    x = torch.randn(3, T, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref, ours64 = _run(l64, fla_forward, x), _run(l64, swapped, x)
    ours, theirs = _run(l32, swapped, x.float()), _run(l32, fla_forward, x.float())
    assert ours64[2].keys() == ref[2].keys() and len(ref[2]) >= 15
    # 1e-6, not round-off: fla's swish on CPU (the swapped swish_fwd) computes in float32
    assert _rel(ours64[0], ref[0]) <= 1e-6 and _rel(ours64[1], ref[1]) <= 1e-6
    # gradients on the layer's gradient scale: at T = 1 those of r, k and the bonus nearly
    # cancel (1e-3 of the largest), and fla's float32 swish leaves 3e-6 on them
    scale = max(g.abs().max() for g in ref[2].values())
    assert max((ours64[2][n] - ref[2][n]).abs().max() for n in ref[2]) / scale <= 1e-6
    assert _rel(ours[0], theirs[0]) <= TOL and _rel(ours[1], theirs[1]) <= TOL
    for n in ref[2]:
        err, fla_err = _rel(ours[2][n].double(), ref[2][n]), _rel(theirs[2][n].double(), ref[2][n])
        assert err <= max(TOL, 2 * fla_err), (n, err, fla_err)
    if T > 1:  # at T = 1 the decay w never acts, so its projection gets no gradient
        assert all(ref[2][n].abs().max() > 0 for n in ref[2]), "a parameter got no gradient"


def test_a_masked_call_takes_fla_forward(monkeypatch):
    """An attention mask is not the training call: fla's forward serves it (spied on)."""
    from fla.layers.rwkv6 import RWKV6Attention

    layer = _layer(torch.float32)
    calls = []
    original = RWKV6Attention.forward.__wrapped_original__

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(RWKV6Attention.forward, "__wrapped_original__", spy)
    x = torch.randn(2, 9, 24)
    mask = torch.ones(2, 9, dtype=torch.long)
    masked = layer(x, attention_mask=mask)[0]
    assert calls == [1]
    assert _rel(masked.detach(), layer(x)[0].detach()) <= TOL and calls == [1]
