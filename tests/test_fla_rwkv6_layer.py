"""The CPU forward of fla's RWKV6Attention (adapters/cpu/fla_rwkv6_layer.py) against fla's own
forward, both on the same swapped recurrence: output and every parameter's gradient, run in
float32 and in float64 on trained-looking (non-zero) weights, each bounded against fla's forward
in float64 by the layer's own conditioning (tests/float_bounds.py); and calls it does not cover
(a mask, a cache) still reach fla's forward."""
from __future__ import annotations

import copy

import pytest
import torch
from float_bounds import C, assert_within, sensitivity

pytest.importorskip("fla")

from recallbench.adapters.cpu.fla_swaps import SWAPS  # noqa: E402

pytestmark = [pytest.mark.parity,
              pytest.mark.filterwarnings("ignore:According to Bo")]  # fla's notice on building RWKV6


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


def _flat(run):
    out, dx, grads = run
    return [out, dx, *grads.values()], ["out", "dx", *grads]


@pytest.mark.parametrize("T", [1, 37, 80])  # 80 > 64: fla's chunk mode
def test_matches_fla_forward_and_gradients(T):
    """Same maths: the output, the input gradient and every parameter's gradient, in float32,
    within C·eps32·cond of fla's forward run in float64 (cond measured there, by perturbing
    every input and weight by one float32 ulp).  At T = 1 the gradients of r, k and the bonus
    nearly cancel (1e-3 of the largest): their cond is large and so is the bound, per tensor.
    The float64 run of ours meets the same bound with eps32: fla's swish on CPU (the swapped
    swish_fwd) computes in float32 even there, so it is float32-accurate, not float64."""
    from fla.layers.rwkv6 import RWKV6Attention

    l32 = _layer(torch.float32)  # installs the swaps
    l64 = copy.deepcopy(l32).double()  # the same (float32-representable) weights
    swapped = RWKV6Attention.forward
    assert swapped.__swap_target__ == "fla.layers.rwkv6:RWKV6Attention.forward"
    fla_forward = swapped.__wrapped_original__
    x = torch.randn(3, T, 24, generator=torch.Generator().manual_seed(1))
    x64 = x.double()
    ref, names = _flat(_run(l64, fla_forward, x64))
    ours64, ours = _flat(_run(l64, swapped, x64))[0], _flat(_run(l32, swapped, x))[0]
    assert names == _flat(_run(l64, swapped, x64))[1] and len(names) >= 17
    assert ours[0].dtype == torch.float32 and ref[0].dtype == torch.float64
    sens = sensitivity(lambda: _flat(_run(l64, fla_forward, x64))[0], [x64, *l64.parameters()])
    assert_within(ours, ref, sens, C, names)
    assert_within(ours64, ref, sens, C, names)
    assert max(abs(a - r).max() for a, r in zip(ours, ref)) > 0  # float32 really ran in float32
    if T > 1:  # at T = 1 the decay w never acts, so its projection gets no gradient
        assert all(g.abs().max() > 0 for g in ref[2:]), "a parameter got no gradient"


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
    l64, x64 = copy.deepcopy(layer).double(), x.double()  # the unmasked call, in float64
    sens = sensitivity(lambda: [l64(x64)[0]], [x64, *l64.parameters()])
    assert_within([masked.detach()], [l64(x64)[0]], sens, C, ["masked output"])
    assert calls == [1]
