"""Gated linear attention: fla's GatedLinearAttention and SimpleGatedLinearAttention.

Both keep per head an N × P state decayed by a data-dependent gate before each write,
h_t = diag(α_t) h_{t−1} + k_tᵀ v_t: GLA with one decay per key channel (α_t ∈ (0, 1)^N),
simple GLA with one scalar decay per head (Mamba-2 / Lightning style).
"""
from __future__ import annotations

from recallbench.api.registry import ADAPTERS

from .base import ConvOptions, FlaAdapter, GateOptions


@ADAPTERS.register("gla")
class GLA(FlaAdapter, layer="fla.layers.gla.GatedLinearAttention", cpu=("fla.ops.gla.naive",)):
    description = ("fla GatedLinearAttention (Yang et al. 2023): data-dependent diagonal decay per key "
                   "channel; d_state = head_k_dim, expand = expand_v")

    class Options(GateOptions, ConvOptions):
        feature_map: str | None = None
        use_output_gate: bool = True
        gate_logit_normalizer: int = 16
        gate_low_rank_dim: int = 16
        clamp_min: float | None = None
        mode: str | None = None  # chunk | fused_recurrent | fused_chunk (CUDA); None: fla's choice


@ADAPTERS.register("simple-gla")
class SimpleGLA(FlaAdapter, layer="fla.layers.simple_gla.SimpleGatedLinearAttention",
                 cpu=("fla.ops.simple_gla.naive",)):
    description = ("fla SimpleGatedLinearAttention: GLA with one data-dependent decay per head "
                   "(Mamba-2 / Lightning style); d_state = head_k_dim, expand = expand_v")
    library_class = "fla.layers.simple_gla.SimpleGatedLinearAttention"
    gated_chunk_kernels = ("chunk_simple_gla",)

    class Options(GateOptions, ConvOptions):
        feature_map: str | None = None
        gate_logit_normalizer: int = 16
        mode: str | None = None  # chunk | fused_recurrent
