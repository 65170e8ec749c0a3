"""RWKV-6 (Finch): fla's RWKV6Attention.

Per head an N × P state with a data-dependent decay per key channel and a bonus u for
the current token, h_t = diag(w_t) h_{t−1} + k_tᵀ v_t, read as r_t (h_{t−1} + diag(u) k_tᵀ v_t).
Its token shift takes the place of a short convolution, so ``d_conv`` is not used.
"""
from __future__ import annotations

from recallbench.api.registry import ADAPTERS

from .base import FlaAdapter, GateOptions


@ADAPTERS.register("rwkv6")
class RWKV6(FlaAdapter, layer="fla.layers.rwkv6.RWKV6Attention",
             cpu=("fla.ops.rwkv6.recurrent_naive", "fla.modules.token_shift")):
    description = ("fla RWKV6Attention (Peng et al. 2024, Finch): data-dependent decay, bonus u, token "
                   "shift; d_state = head_k_dim, expand = expand_v; d_conv not used")
    has_short_conv = False

    class Options(GateOptions):
        proj_low_rank_dim: int = 32
        gate_low_rank_dim: int = 64
        mode: str | None = None  # chunk | fused_recurrent
