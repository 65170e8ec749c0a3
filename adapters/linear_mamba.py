"""The paper's simplified linear Mamba (Alg. 1), with layers (Thm 4.6) and heads (Thm 4.7).

Glossary (paper → code): D → ``d_model``, N → ``d_state``, D_in = expand·D,
P_in → ``in_proj``, Conv1D → ``conv`` (width ``d_conv``; 1 is the "no conv"
ablation), S_B → ``s_b``, S_C → ``s_c``, P_out → ``out_proj``, M → ``n_heads``.
No gate, no discretization (Δ = 1, A = I), no norms, biases or non-linearities.

One layer, shapes for a batch (B, L)::

    u            (B, L, D)        input (the embedded tokens E x for the first layer)
    x̂ = Conv1D(P_in u)  (B, L, D_in)
    B_t = S_B x̂_t       (B, L, M_B·N)   M_B = M if B is per head, else 1
    C_t = S_C x̂_t       (B, L, M_C·N)   M_C = M if C is per head, else 1
    v_t                  (B, L, M_x·P)   P = D_in / M; x̂ itself if x is per head,
                                         S_V x̂ (one shared P-vector) if x is shared
    h_t = h_{t-1} + v_t B_tᵀ   per head  (P × N)
    ŷ_t = h_t C_t              (B, L, D_in)
    y = P_out ŷ                (B, L, D)

Head patterns (which of B, C, x are shared across the M heads; :mod:`.heads`):
MHA none, MQA B and x, MKA C and x, MVA B and C (Mamba-2's default; equals one head).
With Λ > 1 layers each block adds its input back (the residual of Thm 4.6).  The harness
builds nothing around the layers (the adapter's declared ``wrapper``): no norms, and the
embedding keeps torch's N(0, 1) init, as the paper's model.
The state holds one P × N matrix per distinct (B, x) pair: D_in·N per layer,
except MQA, where all heads share one state, D_in·N / M.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from recallbench.api.adapter import Adapter
from recallbench.api.fields import check_range, fail, from_mapping
from recallbench.api.registry import ADAPTERS

from . import heads
from .linear_ops import CHUNK_SIZE, FORMS, causal_linear_attention


class CausalDepthwiseConv(nn.Module):
    """Causal depthwise Conv1D, no bias: (B, L, C) -> (B, L, C).

    y_t = Σ_j w_j ⊙ x_{t−(W−1)+j}, computed as W shifted, scaled copies of x: the same
    numbers as ``conv1d(groups=C, padding=W−1)[..., :L]`` (the weight is that conv's),
    cheaper than that conv on CPU for small widths, and it stays in the (B, L, C) layout,
    so it batches well under ``torch.func.vmap`` (batched ensembles).
    """

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.width = width
        self.conv = nn.Conv1d(channels, channels, width, groups=channels, bias=False,
                              padding=width - 1)

    def forward(self, x):
        W, L = self.width, x.shape[-2]
        w = self.conv.weight[:, 0, :]  # (C, W)
        y = x * w[:, W - 1]
        for j in range(W - 1):  # a loop over the kernel width, never over time
            shift = W - 1 - j  # this tap reads x_{t - shift}
            if shift < L:
                y = y + nn.functional.pad(x[..., :L - shift, :], (0, 0, shift, 0)) * w[:, j]
        return y


class LinearMambaLayer(nn.Module):
    def __init__(self, d_model: int, d_state: int, d_conv: int = 2, expand: int = 2,
                 n_heads: int = 1, head_pattern: str = "mva", residual: bool = False,
                 chunk_size: int = CHUNK_SIZE, form: str = "auto"):
        super().__init__()
        d_inner = expand * d_model
        if d_inner % n_heads:
            raise ValueError(f"expand·d_model = {d_inner} is not divisible by n_heads = {n_heads}")
        self.M, self.N, self.P = n_heads, d_state, d_inner // n_heads
        self.b_per_head, self.c_per_head, self.x_per_head = heads.PATTERNS[head_pattern]
        self.residual, self.chunk_size, self.form = residual, chunk_size, form
        self.in_proj = nn.Linear(d_model, d_inner, bias=False)
        self.conv = CausalDepthwiseConv(d_inner, d_conv)
        self.s_b = nn.Linear(d_inner, (n_heads if self.b_per_head else 1) * d_state, bias=False)
        self.s_c = nn.Linear(d_inner, (n_heads if self.c_per_head else 1) * d_state, bias=False)
        self.s_v = None if self.x_per_head else nn.Linear(d_inner, self.P, bias=False)
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def _heads(self, t: torch.Tensor, per_head: bool, width: int) -> torch.Tensor:
        """(B, L, m·width) -> (B, M, L, width), broadcasting a shared one over heads."""
        B, L, _ = t.shape
        t = t.view(B, L, -1, width).transpose(1, 2)
        return t if per_head else t.expand(B, self.M, L, width)

    def forward(self, u: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        xh = self.conv(self.in_proj(u))  # x̂ (B, L, D_in)
        k = self._heads(self.s_b(xh), self.b_per_head, self.N)  # B_t
        q = self._heads(self.s_c(xh), self.c_per_head, self.N)  # C_t
        v = self._heads(xh if self.s_v is None else self.s_v(xh), self.x_per_head, self.P)
        y = causal_linear_attention(q, k, v, self.chunk_size, self.form)  # (B, M, L, P)
        y = self.out_proj(y.transpose(1, 2).reshape(u.shape[0], u.shape[1], -1))
        return u + y if self.residual else y


@dataclasses.dataclass
class Options:
    """``model.options`` of linear-mamba."""

    residual: bool | None = None  # default: on when n_layers > 1 (Thm 4.6)
    chunk_size: int = CHUNK_SIZE  # longer sequences: the chunked form, chunks this long
    form: str = "auto"  # auto | parallel | chunked | recurrent (the slow reference)


@ADAPTERS.register("linear-mamba")
class LinearMamba(Adapter):
    description = "the paper's simplified linear Mamba (Alg. 1): no gate, A = I, parallel form"
    library_class = "recallbench LinearMambaLayer"
    law_kind = "linear"
    state_formula = "Λ · expand · D · N  (MQA: Λ · expand · D · N / M)"
    head_patterns = heads.ALL_PATTERNS
    # the paper's model: no norms, torch's N(0, 1) embedding, each layer is its block (it
    # adds its own residual when Λ > 1)
    wrapper = {"block": "none", "final_norm": None, "embedding_std": None}

    def validate(self) -> None:
        super().validate()
        heads.check_heads_divide_inner(self.cfg)
        self.options = from_mapping(Options, self.cfg.options, "model.options")
        check_range("model.options.chunk_size", self.options.chunk_size, 1)
        if self.options.form not in FORMS:
            fail("model.options.form", self.options.form, f"one of {', '.join(FORMS)}")

    def build_mixer(self, layer_idx, device):
        cfg = self.cfg
        residual = self.options.residual
        if residual is None:
            residual = cfg.n_layers > 1
        return LinearMambaLayer(cfg.d_model, cfg.d_state, cfg.d_conv, cfg.expand, cfg.n_heads,
                                self.head_pattern, residual, self.options.chunk_size,
                                self.options.form)

    def state_size(self) -> int:
        return heads.state_size(self.cfg, self.head_pattern)

    def state_shape(self) -> dict[str, int]:
        return heads.state_shape(self.cfg, self.head_pattern)

    def shape_overrides(self, term, value):
        return heads.shape_overrides(self.cfg, self.head_pattern, term, value)

    def circuit(self, model):
        """One layer with B and C shared and x per head (MVA, or one head): block j of Ê_in is
        diag(W_conv^j) P_in E; S_B, S_C, P_out are the layer's s_b, s_c, out_proj.  None for
        several layers, a residual, or another head pattern (not one such circuit)."""
        from recallbench.api.circuit import Circuit

        layer = model.blocks[0]
        one_head = layer.M == 1 or not (layer.b_per_head or layer.c_per_head)
        if len(model.blocks) != 1 or layer.residual or layer.s_v is not None or not one_head:
            return None
        E = model.embedding.weight.detach().t()  # (D, V)
        w = layer.conv.conv.weight.detach()[:, 0, :]  # (D_in, W): tap j reads x_{t-(W-1)+j}
        PE = layer.in_proj.weight.detach() @ E  # P_in E (D_in, V)
        E_in = torch.cat([w[:, j, None] * PE for j in range(w.shape[1])], dim=1)
        return Circuit(E=E.clone(), E_in=E_in, S_B=layer.s_b.weight.detach().clone(),
                       S_C=layer.s_c.weight.detach().clone(), P_out=layer.out_proj.weight.detach().clone())
