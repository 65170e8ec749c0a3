"""The simplified linear Mamba: parallel, chunked and recurrent forms agree; heads; state size.

Float32 results are bounded against the same computation run in float64 on the same inputs and
weights, by its own conditioning measured there (tests/float_bounds.py)."""
from __future__ import annotations

import copy

import pytest
import torch
from float_bounds import C, EPS64, assert_within, sensitivity

from recallbench.adapters.linear_mamba import LinearMambaLayer
from recallbench.adapters.linear_ops import causal_linear_attention
from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS
from recallbench.harness.model import RecallModel

pytestmark = pytest.mark.parity


def _float64(layer: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy (the same, float32-representable, weights)."""
    return copy.deepcopy(layer).double()


@pytest.mark.parametrize("L,chunk", [(17, 4), (64, 16), (50, 64)])
def test_forms_agree(L, chunk):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, L, 5, generator=g), torch.randn(2, 3, L, 5, generator=g)
    v = torch.randn(2, 3, L, 7, generator=g)
    qkv64 = [t.double() for t in (q, k, v)]

    def ref64():
        return [causal_linear_attention(*qkv64, form="recurrent")]

    sens = sensitivity(ref64, qkv64)
    for form in ("recurrent", "parallel", "chunked", "auto"):
        out = causal_linear_attention(q, k, v, chunk_size=chunk, form=form)
        assert out.dtype == torch.float32
        assert_within([out], ref64(), sens, C, [form])


@pytest.mark.parametrize("L,N,P,chunk", [(40, 8, 64, 64), (64, 8, 64, 64), (100, 8, 64, 64),
                                         (152, 4, 64, 64), (100, 16, 64, 64),
                                         (100, 8, 128, 64), (100, 16, 64, 24), (30, 8, 64, 8)])
def test_auto_chunks(L, N, P, chunk):
    """Auto is the parallel form up to chunk_size tokens and, beyond, chunks of
    min(chunk_size, chunk_length(N, P)) (16 for N·P ≤ 512, 32 above): the same floats as that
    form called directly, and within float32's bound of the float64 recurrence."""
    from recallbench.adapters.linear_ops import chunk_length

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 1, L, N, generator=g), torch.randn(2, 1, L, N, generator=g)
    v = torch.randn(2, 1, L, P, generator=g)
    out = causal_linear_attention(q, k, v, chunk_size=chunk)
    assert chunk_length(N, P) == (16 if N * P <= 512 else 32)
    c = min(chunk, chunk_length(N, P))
    same = (causal_linear_attention(q, k, v, form="parallel") if L <= chunk
            else causal_linear_attention(q, k, v, chunk_size=c, form="chunked"))
    assert torch.equal(out, same)
    if L > chunk and c != chunk:  # not the former choice, chunks of chunk_size
        former = causal_linear_attention(q, k, v, chunk_size=chunk, form="chunked")
        assert not torch.equal(out, former)
    qkv64 = [t.double() for t in (q, k, v)]

    def ref64():
        return [causal_linear_attention(*qkv64, form="recurrent")]

    assert_within([out], ref64(), sensitivity(ref64, qkv64), C, ["auto"])


def test_causal():
    """Changing inputs from position 6 on leaves the outputs before it as they were: within
    C·eps32·cond of the float64 layer on the unchanged input."""
    torch.manual_seed(0)
    layer = LinearMambaLayer(8, 4)
    u = torch.randn(1, 10, 8)
    u2 = u.clone()
    u2[:, 6:] = torch.randn(1, 4, 8)
    layer64, u64 = _float64(layer), u.double()

    def ref64():
        return [layer64(u64)[:, :6].detach()]

    sens = sensitivity(ref64, [u64, *layer64.parameters()])
    with torch.no_grad():
        assert_within([layer(u)[:, :6], layer(u2)[:, :6]], ref64() * 2, sens * 2, C, ["u", "changed u"])
        assert (layer(u2)[:, 6:] - layer(u)[:, 6:]).abs().max() > 1e-3  # the change reaches later positions


@pytest.mark.parametrize("pattern", ["mha", "mqa", "mka", "mva"])
def test_head_patterns_share_what_the_table_says(pattern):
    torch.manual_seed(0)
    layer = LinearMambaLayer(16, 4, n_heads=4, head_pattern=pattern)
    b_heads = layer.s_b.out_features // 4
    c_heads = layer.s_c.out_features // 4
    assert b_heads == (4 if pattern == "mha" or pattern == "mka" else 1)
    assert c_heads == (4 if pattern in ("mha", "mqa") else 1)
    assert (layer.s_v is None) == (pattern in ("mha", "mva"))
    # every pattern runs, and its recurrent form agrees (both within C·eps32·cond of it in float64)
    u = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fast = layer(u)
        layer.form = "recurrent"
        slow = layer(u)
    layer64, u64 = _float64(layer), u.double()

    def ref64():
        return [layer64(u64).detach()]

    sens = sensitivity(ref64, [u64, *layer64.parameters()])
    assert_within([fast, slow], ref64() * 2, sens * 2, C, ["default form", "recurrent"])


def test_mva_equals_single_head():
    """Sharing B and C across heads is one head over the full width (Thm 4.7: p_MVA = p_single)."""
    torch.manual_seed(0)
    single = LinearMambaLayer(16, 4, n_heads=1)
    mva = LinearMambaLayer(16, 4, n_heads=4, head_pattern="mva")
    mva.load_state_dict(single.state_dict())
    u = torch.randn(2, 12, 16)
    single64, mva64, u64 = _float64(single), _float64(mva), u.double()

    def ref64():
        return [single64(u64).detach()]

    sens = sensitivity(ref64, [u64, *single64.parameters()])
    with torch.no_grad():
        assert_within([mva(u), single(u)], ref64() * 2, sens * 2, C, ["mva", "single"])
        assert_within([mva64(u64)], ref64(), sens, C, ["mva in float64"], eps=EPS64)


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
    """The shift-and-add conv is the causal depthwise nn.Conv1d it holds the weight of: in
    float32 within C·eps32·cond of that conv run in float64."""
    from recallbench.adapters.linear_mamba import CausalDepthwiseConv

    torch.manual_seed(0)
    for width in (1, 2, 4):
        layer = CausalDepthwiseConv(6, width)
        x = torch.randn(3, 5, 6)
        layer64, x64 = _float64(layer), x.double()

        def ref64():
            return [layer64.conv(x64.transpose(1, 2))[..., :5].transpose(1, 2).detach()]

        sens = sensitivity(ref64, [x64, *layer64.parameters()])
        with torch.no_grad():
            assert_within([layer(x)], ref64(), sens, C, [f"width {width}"])
