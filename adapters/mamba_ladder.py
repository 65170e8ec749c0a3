"""``mamba-ladder``: the simplified linear Mamba with the full Mamba block's pieces as options.

Table 8 of the paper (circuit minimality) removes the Mamba block's pieces one at a time and
asks which the recall circuit needs.  Here every rung is one layer class: the paper's
Alg. 1 (:class:`~.linear_mamba.LinearMambaLayer`, what ``linear-mamba`` builds) plus
three ``model.options`` flags that add the full block's pieces back, as Mamba (Gu & Dao,
Alg. 2 and Fig. 3) and mamba-minimal write them::

    x = P_in u;  x = Conv1D(x)                    (B, L, D_in)   always (d_conv = 1: no conv)
    x = SiLU(x)                                                  silu
    B_t = S_B x_t,  C_t = S_C x_t                 (B, L, N)      always (x_proj's B and C)
    Δ_t = softplus(dt_proj(x_proj_dt x_t))        (B, L, D_in)   discretise; else Δ = 1
    A = −exp(A_log)                               (D_in, N)      discretise; else A = 0
    h_t = exp(Δ_t A) ⊙ h_{t−1} + (Δ_t x_t) B_tᵀ   (B, D_in, N)   Ā = exp(ΔA), B̄ = ΔB
    y_t = h_t C_t                                 (B, L, D_in)
    y = y ⊙ SiLU(z),  z = P_z u                                  gate (y ⊙ z without silu)
    out = P_out y                                 (B, L, D)

With ``silu`` off the nonlinearity goes from both places it acts (after the conv and on the
gate's z), as the paper's ablation does; softplus belongs to the discretisation.  With
every flag off the layer is ``linear-mamba``'s, op for op: the same parameters, created in
the same order (so the same seed draws the same weights), and the same outputs.  The new
pieces' parameters are created after those, with mamba-ssm's initialisation: ``dt_proj``
uniform in ±dt_rank^−½ with a bias that puts Δ log-uniformly in [0.001, 0.1] at init,
A_log = log(1..N) in every channel; ``x_proj_dt`` and ``in_proj_z`` are plain
``nn.Linear`` layers, as the Δ rows of mamba-ssm's ``x_proj`` and the z half of its
``in_proj`` (the same fan-in, the same init).

What the full block here still leaves out of mamba-ssm's ``Mamba``: the D skip (y + D·x;
the paper's own ablation sets it to 0), the conv bias, and the norms and residual of
mamba-ssm's stack (the paper's model runs without norms, and so does every rung here: the
harness wraps them as it wraps ``linear-mamba``).  The discretised scan runs mamba-ssm's
selective-scan recurrence through :func:`.cpu.selective_scan_fused.selective_scan_cpu`
(compiled on a CPU, its torch scan elsewhere); the undiscretised one is
``linear-mamba``'s causal linear attention.

One head (Mamba-1 has none; ``n_heads`` must be 1).  State: the D_in × N matrix h per
layer, Λ · expand · D · N scalars, whatever the flags (the gate and Δ add no state; the
conv's buffer is not counted, as for ``linear-mamba``).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F

from recallbench.api.adapter import Adapter
from recallbench.api.fields import check_range, fail, from_mapping
from recallbench.api.registry import ADAPTERS

from . import linear_mamba
from .cpu.selective_scan_fused import selective_scan_cpu
from .linear_ops import CHUNK_SIZE, FORMS, causal_linear_attention

#: mamba-ssm's Δ initialisation: Δ log-uniform in [DT_MIN, DT_MAX], at least DT_FLOOR
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4


def default_dt_rank(d_model: int) -> int:
    """mamba-ssm's ``dt_rank="auto"``: ⌈D/16⌉."""
    return math.ceil(d_model / 16)


class LadderLayer(linear_mamba.LinearMambaLayer):
    """``LinearMambaLayer`` (one head) with the gate, SiLU and Δ-discretisation as flags."""

    def __init__(self, d_model: int, d_state: int, d_conv: int = 2, expand: int = 2,
                 residual: bool = False, chunk_size: int = CHUNK_SIZE, form: str = "auto",
                 gate: bool = False, silu: bool = False, discretise: bool = False,
                 dt_rank: int | None = None):
        super().__init__(d_model, d_state, d_conv, expand, 1, "mva", residual, chunk_size, form)
        d_inner = expand * d_model
        self.silu = silu
        self.in_proj_z = nn.Linear(d_model, d_inner, bias=False) if gate else None
        self.x_proj_dt = self.dt_proj = self.A_log = None
        if discretise:
            rank = dt_rank or default_dt_rank(d_model)
            self.x_proj_dt = nn.Linear(d_inner, rank, bias=False)
            self.dt_proj = nn.Linear(rank, d_inner, bias=True)
            self._init_dt(rank, d_inner)
            A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
            self.A_log = nn.Parameter(torch.log(A))  # A = −exp(A_log) = −(1, ..., N)

    @torch.no_grad()
    def _init_dt(self, rank: int, d_inner: int) -> None:
        """mamba-ssm's ``dt_init="random"``, ``dt_scale=1``: softplus(bias) = Δ at init."""
        std = rank ** -0.5
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        dt = torch.exp(torch.rand(d_inner) * (math.log(DT_MAX) - math.log(DT_MIN))
                       + math.log(DT_MIN)).clamp(min=DT_FLOOR)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

    @property
    def discretised(self) -> bool:
        return self.A_log is not None

    def forward(self, u: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        Bsz, L = u.shape[0], u.shape[1]
        xh = self.conv(self.in_proj(u))  # x̂ (B, L, D_in)
        if self.silu:
            xh = F.silu(xh)
        if self.discretised:
            delta = F.softplus(self.dt_proj(self.x_proj_dt(xh)))  # (B, L, D_in)
            A = -torch.exp(self.A_log)
            y = selective_scan_cpu(xh.transpose(1, 2), delta.transpose(1, 2), A,
                                   self.s_b(xh).transpose(1, 2), self.s_c(xh).transpose(1, 2))
            y = y.transpose(1, 2)  # (B, L, D_in)
        else:  # linear-mamba's forward, op for op (Δ = 1, A = 0: no decay)
            k = self._heads(self.s_b(xh), self.b_per_head, self.N)  # B_t
            q = self._heads(self.s_c(xh), self.c_per_head, self.N)  # C_t
            v = self._heads(xh, self.x_per_head, self.P)
            y = causal_linear_attention(q, k, v, self.chunk_size, self.form)  # (B, 1, L, D_in)
            y = y.transpose(1, 2).reshape(Bsz, L, -1)
        if self.in_proj_z is not None:
            z = self.in_proj_z(u)
            y = y * (F.silu(z) if self.silu else z)
        y = self.out_proj(y)
        return u + y if self.residual else y


@dataclasses.dataclass
class Options(linear_mamba.Options):
    """``model.options`` of mamba-ladder: linear-mamba's, and the full block's pieces."""

    gate: bool = False  # the output gate y · SiLU(z) (y · z with silu off)
    silu: bool = False  # SiLU after the conv, and on the gate's z
    discretise: bool = False  # Δ = softplus(dt_proj(·)), Ā = exp(ΔA), B̄ = ΔB; off: Δ = 1, A = 0
    dt_rank: int | None = None  # rank of Δ's projection; null: ⌈d_model/16⌉ (mamba-ssm's auto)


@ADAPTERS.register("mamba-ladder")
class MambaLadder(linear_mamba.LinearMamba):
    description = ("the simplified linear Mamba (Alg. 1) with the full Mamba block's gate, "
                   "SiLU and Δ-discretisation as options (Table 8's ladder)")
    library_class = "recallbench LadderLayer"
    # its rungs are neither the law's linear model nor mamba-ssm's Mamba: a black box to the
    # law (S_eff, no law curve, no collapse fit)
    law_kind = None
    state_formula = "Λ · expand · D · N"
    head_patterns = ("mva",)

    def validate(self) -> None:
        Adapter.validate(self)  # the head pattern; linear-mamba's own reads its own Options
        if self.cfg.n_heads != 1:
            fail("model.n_heads", self.cfg.n_heads, "one head (the Mamba block has none): 1")
        self.options = opts = from_mapping(Options, self.cfg.options, "model.options")
        check_range("model.options.chunk_size", opts.chunk_size, 1)
        if opts.form not in FORMS:
            fail("model.options.form", opts.form, f"one of {', '.join(FORMS)}")
        if opts.dt_rank is not None:
            if not opts.discretise:
                fail("model.options.dt_rank", opts.dt_rank, "null unless options.discretise is on")
            check_range("model.options.dt_rank", opts.dt_rank, 1)

    @property
    def pieces(self) -> tuple[str, ...]:
        """The full block's pieces this config adds to Alg. 1."""
        return tuple(p for p in ("gate", "silu", "discretise") if getattr(self.options, p))

    def build_mixer(self, layer_idx, device):
        cfg, opts = self.cfg, self.options
        residual = cfg.n_layers > 1 if opts.residual is None else opts.residual
        return LadderLayer(cfg.d_model, cfg.d_state, cfg.d_conv, cfg.expand, residual,
                           opts.chunk_size, opts.form, opts.gate, opts.silu, opts.discretise,
                           opts.dt_rank)

    def circuit(self, model):
        """linear-mamba's circuit with every piece off; None with any on (not that circuit)."""
        return None if self.pieces else super().circuit(model)
