"""mamba-ladder (Table 8's circuit-minimality ladder): every rung against a float64 loop.

The reference is written as mamba-minimal writes the Mamba block, step by step and in float64,
from the layer's own weights: in_proj, a causal depthwise conv as an explicit sum over its
taps, SiLU, x_proj's B and C, Δ = softplus(dt_proj(·)), Ā = exp(ΔA), B̄ = ΔB, the state
recurrence one token at a time, and the gate y·SiLU(z).  Float32 outputs are bounded by the
operation's own conditioning (tests/float_bounds.py); float64 outputs and gradients by
float64's.  With every piece off the adapter is linear-mamba exactly.
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
from float_bounds import C, EPS64, assert_within, sensitivity
from torch.nn import functional as F

from recallbench.adapters.mamba_ladder import DT_MAX, DT_MIN, LadderLayer
from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS
from recallbench.harness.model import RecallModel

pytestmark = pytest.mark.parity

PIECES = ("gate", "silu", "discretise")
COMBOS = [dict(zip(PIECES, bits)) for bits in itertools.product((False, True), repeat=3)]


def naive(layer: LadderLayer, u: torch.Tensor) -> torch.Tensor:
    """The layer's output, token by token (mamba-minimal's Mamba block), on the layer's own
    parameters as they are (float64 ones for a float64 reference; autograd goes through)."""
    p = dict(layer.named_parameters())
    Bsz, L, _ = u.shape
    x = u @ p["in_proj.weight"].T  # (B, L, D_in)
    w = p["conv.conv.weight"][:, 0, :]  # (D_in, W): tap j reads x_{t-(W-1)+j}
    W = w.shape[1]
    xc = torch.stack([sum(w[:, j] * x[:, t - (W - 1) + j] for j in range(W)
                          if t - (W - 1) + j >= 0) for t in range(L)], dim=1)
    if layer.silu:
        xc = xc * torch.sigmoid(xc)
    Bt, Ct = xc @ p["s_b.weight"].T, xc @ p["s_c.weight"].T  # (B, L, N)
    if layer.discretised:
        delta = F.softplus(xc @ p["x_proj_dt.weight"].T @ p["dt_proj.weight"].T + p["dt_proj.bias"])
        A = -torch.exp(p["A_log"])
    else:
        delta, A = torch.ones_like(xc), xc.new_zeros(xc.shape[-1], Bt.shape[-1])
    h = u.new_zeros(Bsz, xc.shape[-1], Bt.shape[-1])
    ys = []
    for t in range(L):
        dA = torch.exp(delta[:, t, :, None] * A)  # Ā
        dB = delta[:, t, :, None] * Bt[:, t, None, :]  # B̄
        h = dA * h + dB * xc[:, t, :, None]
        ys.append((h * Ct[:, t, None, :]).sum(-1))
    y = torch.stack(ys, dim=1)
    if layer.in_proj_z is not None:
        z = u @ p["in_proj_z.weight"].T
        y = y * (z * torch.sigmoid(z) if layer.silu else z)
    out = y @ p["out_proj.weight"].T
    return u + out if layer.residual else out


def _layer(seed: int = 0, d_conv: int = 2, **pieces) -> LadderLayer:
    torch.manual_seed(seed)
    layer = LadderLayer(6, 4, d_conv=d_conv, **pieces)
    if layer.discretised:  # Δ of order 1, so the decay acts within the 12 steps tested
        with torch.no_grad():
            layer.dt_proj.bias.uniform_(-1.0, 1.0)
    return layer


@pytest.mark.parametrize("pieces", COMBOS, ids=lambda p: "+".join(k for k, v in p.items() if v) or "linear")
@pytest.mark.parametrize("d_conv", [1, 2, 4])
def test_every_rung_is_the_float64_loop(pieces, d_conv):
    """Float32 within C·eps32·cond of the loop; float64 within eps64's bound, outputs and
    the gradients of every parameter."""
    layer = _layer(d_conv=d_conv, **pieces)
    u = torch.randn(3, 12, 6, generator=torch.Generator().manual_seed(1))
    layer64, u64 = copy.deepcopy(layer).double(), u.double()

    def ref64():
        with torch.no_grad():
            return [naive(layer64, u64)]

    ref = ref64()[0]
    sens = sensitivity(ref64, [u64, *layer64.parameters()])
    with torch.no_grad():
        assert_within([layer(u)], [ref], sens, C, ["float32"])
        assert_within([layer64(u64)], [ref], sens, C, ["float64"], eps=EPS64)
    # gradients: the layer's autograd (the scan's hand-written backward) against the loop's
    weights = torch.linspace(-1, 1, ref.shape[-1], dtype=torch.float64)
    params = list(layer64.parameters())
    got = torch.autograd.grad((layer64(u64) * weights).square().sum(), params)
    want = torch.autograd.grad((naive(layer64, u64) * weights).square().sum(), params)
    for (name, _), g, e in zip(layer64.named_parameters(), got, want):
        scale = e.abs().max().item() or 1.0
        assert (g - e).abs().max().item() <= 1e-9 * scale, name


def test_all_pieces_off_is_linear_mamba_exactly():
    """The same parameters (names, shapes, values from the same seed), the same state size,
    bitwise the same logits, the same circuit."""
    model = {"d_model": 16, "d_state": 4}
    lin = resolve({"model": {"adapter": "linear-mamba", **model}}).model
    lad = resolve({"model": {"adapter": "mamba-ladder", **model}}).model
    models = []
    for cfg in (lin, lad):
        torch.manual_seed(3)
        adapter = ADAPTERS.get(cfg.adapter)(cfg)
        models.append((adapter, RecallModel(adapter, 32)))
    (a_lin, m_lin), (a_lad, m_lad) = models
    s_lin, s_lad = m_lin.state_dict(), m_lad.state_dict()
    assert list(s_lin) == list(s_lad)
    assert all(torch.equal(s_lin[k], s_lad[k]) for k in s_lin)
    assert a_lin.state_size() == a_lad.state_size() == 2 * 16 * 4
    assert m_lin.wrapper == m_lad.wrapper
    tokens = torch.randint(0, 32, (5, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(m_lin(tokens), m_lad(tokens))
    c_lin, c_lad = a_lin.circuit(m_lin), a_lad.circuit(m_lad)
    assert torch.equal(c_lin.E_in, c_lad.E_in) and torch.equal(c_lin.S_B, c_lad.S_B)


def test_pieces_add_parameters_after_linear_mambas_and_keep_its_draws():
    """Each piece's parameters come after Alg. 1's, whose values the same seed leaves as
    they were; the gate adds P_z, the discretisation x_proj_dt, dt_proj, A_log."""
    torch.manual_seed(5)
    base = dict(LadderLayer(16, 4).named_parameters())
    torch.manual_seed(5)
    full = dict(LadderLayer(16, 4, gate=True, silu=True, discretise=True).named_parameters())
    assert set(full) - set(base) == {"in_proj_z.weight", "x_proj_dt.weight", "dt_proj.weight",
                                     "dt_proj.bias", "A_log"}
    assert all(torch.equal(base[k], full[k]) for k in base)
    assert full["x_proj_dt.weight"].shape == (1, 32)  # dt_rank ⌈16/16⌉ = 1
    A = -torch.exp(full["A_log"])
    assert torch.equal(A, -torch.arange(1.0, 5.0).repeat(32, 1))
    dt = F.softplus(full["dt_proj.bias"])
    assert DT_MIN * 0.999 <= dt.min() and dt.max() <= DT_MAX * 1.001


def test_state_size_and_circuit_by_pieces():
    for pieces in COMBOS:
        cfg = resolve({"model": {"adapter": "mamba-ladder", "d_model": 8, "d_state": 4,
                                 "n_layers": 2, "options": pieces}}).model
        adapter = ADAPTERS.get("mamba-ladder")(cfg)
        assert adapter.state_size() == 2 * 2 * 8 * 4
        one = resolve({"model": {"adapter": "mamba-ladder", "d_model": 8, "d_state": 4,
                                 "options": pieces}}).model
        a1 = ADAPTERS.get("mamba-ladder")(one)
        assert (a1.circuit(RecallModel(a1, 16)) is None) == any(pieces.values())


def test_bad_options():
    with pytest.raises(ConfigError, match="model.n_heads = 2 is not allowed"):
        resolve({"model": {"adapter": "mamba-ladder", "n_heads": 2}})
    with pytest.raises(ConfigError, match="model.options.dt_rank = 2 is not allowed"):
        resolve({"model": {"adapter": "mamba-ladder", "options": {"dt_rank": 2}}})
    with pytest.raises(ConfigError, match="unknown key model.options.gates"):
        resolve({"model": {"adapter": "mamba-ladder", "options": {"gates": True}}})
    with pytest.raises(ConfigError, match="model.options.form = 'loop' is not allowed"):
        resolve({"model": {"adapter": "mamba-ladder", "options": {"form": "loop"}}})
    cfg = resolve({"model": {"adapter": "mamba-ladder",
                             "options": {"discretise": True, "dt_rank": 3}}}).model
    layer = ADAPTERS.get("mamba-ladder")(cfg).build_mixer(0, torch.device("cpu"))
    assert layer.dt_proj.weight.shape == (128, 3)
