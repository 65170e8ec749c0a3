"""The simplified linear Mamba: parallel, chunked and recurrent forms agree; heads; state size."""
from __future__ import annotations

import pytest
import torch

from recallbench.adapters.linear_mamba import LinearMambaLayer
from recallbench.adapters.linear_ops import causal_linear_attention
from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS
from recallbench.harness.model import RecallModel


@pytest.mark.parametrize("L,chunk", [(17, 4), (64, 16), (50, 64)])
def test_forms_agree(L, chunk):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, L, 5, generator=g), torch.randn(2, 3, L, 5, generator=g)
    v = torch.randn(2, 3, L, 7, generator=g)
    ref = causal_linear_attention(q, k, v, form="recurrent")
    for form in ("parallel", "chunked", "auto"):
        out = causal_linear_attention(q, k, v, chunk_size=chunk, form=form)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_causal():
    layer = LinearMambaLayer(8, 4)
    u = torch.randn(1, 10, 8)
    a = layer(u)
    u2 = u.clone()
    u2[:, 6:] = torch.randn(1, 4, 8)
    torch.testing.assert_close(layer(u2)[:, :6], a[:, :6])


@pytest.mark.parametrize("pattern", ["mha", "mqa", "mka", "mva"])
def test_head_patterns_share_what_the_table_says(pattern):
    layer = LinearMambaLayer(16, 4, n_heads=4, head_pattern=pattern)
    b_heads = layer.s_b.out_features // 4
    c_heads = layer.s_c.out_features // 4
    assert b_heads == (4 if pattern == "mha" or pattern == "mka" else 1)
    assert c_heads == (4 if pattern in ("mha", "mqa") else 1)
    assert (layer.s_v is None) == (pattern in ("mha", "mva"))
    # every pattern runs, and its recurrent form agrees
    u = torch.randn(2, 12, 16)
    fast = layer(u)
    layer.form = "recurrent"
    torch.testing.assert_close(layer(u), fast, rtol=1e-4, atol=1e-4)


def test_mva_equals_single_head():
    """Sharing B and C across heads is one head over the full width (Thm 4.7: p_MVA = p_single)."""
    torch.manual_seed(0)
    single = LinearMambaLayer(16, 4, n_heads=1)
    mva = LinearMambaLayer(16, 4, n_heads=4, head_pattern="mva")
    mva.load_state_dict(single.state_dict())
    u = torch.randn(2, 12, 16)
    torch.testing.assert_close(mva(u), single(u), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model,expected", [
    ({}, 2 * 64 * 16),
    ({"n_layers": 3, "d_state": 4}, 3 * 2 * 64 * 4),
    ({"n_heads": 4, "head_pattern": "mqa"}, 2 * 64 * 16 // 4),
    ({"n_heads": 4, "head_pattern": "mha"}, 2 * 64 * 16),
])
def test_state_size(model, expected):
    cfg = resolve({"model": model})
    assert ADAPTERS.get("linear-mamba")(cfg.model).state_size() == expected


def test_residual_default_follows_layers():
    one = RecallModel(ADAPTERS.get("linear-mamba")(resolve({}).model), 16).blocks
    two = RecallModel(ADAPTERS.get("linear-mamba")(resolve({"model": {"n_layers": 2}}).model), 16).blocks
    assert not one[0].residual and all(b.residual for b in two)


def test_bad_options():
    with pytest.raises(ConfigError, match="model.options.form = 'loop' is not allowed"):
        resolve({"model": {"options": {"form": "loop"}}})
    with pytest.raises(ConfigError, match="model.n_heads = 3 is not allowed: must divide"):
        resolve({"model": {"n_heads": 3}})


def test_causal_conv_matches_torch_conv1d():
    """The shift-and-add conv is exactly the causal depthwise nn.Conv1d it holds the weight of."""
    from recallbench.adapters.linear_mamba import CausalDepthwiseConv

    torch.manual_seed(0)
    for width in (1, 2, 4):
        layer = CausalDepthwiseConv(6, width)
        x = torch.randn(3, 5, 6)
        ref = layer.conv(x.transpose(1, 2))[..., :5].transpose(1, 2)
        torch.testing.assert_close(layer(x), ref, rtol=1e-6, atol=1e-6)
