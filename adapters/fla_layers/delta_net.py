"""The delta rule: fla's DeltaNet and GatedDeltaNet.

Per head a P × N state corrected toward each new pair instead of only added to,
h_t = h_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ with L2-normalised keys; GatedDeltaNet
first decays it by a Mamba-2 style scalar per head (α_t h_{t−1} in place of h_{t−1}).
"""
from __future__ import annotations

import dataclasses

from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from .base import ConvOptions, FlaAdapter


@dataclasses.dataclass
class DeltaRuleOptions(ConvOptions):
    """The arguments both delta-rule layers take."""

    allow_neg_eigval: bool = False
    norm_eps: float = 1e-5


@ADAPTERS.register("deltanet")
class DeltaNet(FlaAdapter, layer="fla.layers.delta_net.DeltaNet", cpu=("fla.ops.delta_rule.naive",)):
    description = ("fla DeltaNet (Schlag et al. 2021; Yang et al. 2024): delta-rule state update with "
                   "L2-normalised keys; d_state = head_k_dim, expand = expand_v")

    class Options(DeltaRuleOptions):
        use_beta: bool = True
        use_gate: bool = False
        qk_activation: str = "silu"
        qk_norm: str = "l2"
        mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("gated-deltanet")
class GatedDeltaNet(FlaAdapter, layer="fla.layers.gated_deltanet.GatedDeltaNet",
                     cpu=("fla.ops.gated_delta_rule.naive",)):
    description = ("fla GatedDeltaNet (Yang et al. 2024): delta rule with a Mamba-2 style scalar decay; "
                   "d_state = head_dim, head_v_dim = expand·D/M")
    gated_chunk_kernels = ("chunk_gated_delta_rule",)

    class Options(DeltaRuleOptions):
        use_gate: bool = True
        output_gate_activation: str = "swish"
        mode: str | None = None  # chunk | fused_recurrent

    def check(self):
        super().check()
        cfg = self.cfg
        P = self.value_total // cfg.n_heads
        if int(cfg.d_state * (P / cfg.d_state)) != P:  # fla computes head_v_dim = int(head_dim · expand_v)
            fail("model.d_state", cfg.d_state,
                 f"head_v_dim = expand·d_model/n_heads = {P} is not reproducible as head_dim·expand_v; "
                 f"pick a d_state that divides {P}")

    def layer_kwargs(self, layer_idx):
        cfg = self.cfg
        P = self.value_total // cfg.n_heads
        return {"hidden_size": cfg.d_model, "num_heads": cfg.n_heads, "head_dim": cfg.d_state,
                "expand_v": P / cfg.d_state, **self._conv_kwargs(), "layer_idx": layer_idx,
                **self._option_kwargs()}

    def layer_state(self, layer):
        return layer.num_v_heads * layer.head_k_dim * layer.head_v_dim

    def layer_shape(self, layer):
        return {"heads": layer.num_v_heads, "key": layer.head_k_dim, "value": layer.head_v_dim}
