"""Retention: fla's MultiScaleRetention (RetNet).

Linear attention with a fixed decay per head, γ_h = 1 − 2^(−5−h), and rotary q/k (so the
key dimension N must be even): h_t = γ_h h_{t−1} + k_tᵀ v_t.
"""
from __future__ import annotations

from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from .base import ConvOptions, FlaAdapter, GateOptions


@ADAPTERS.register("retnet")
class RetNet(FlaAdapter, layer="fla.layers.multiscale_retention.MultiScaleRetention",
              cpu=("fla.ops.retention.naive", "fla.ops.simple_gla.naive")):
    description = ("fla MultiScaleRetention (Sun et al. 2023): fixed per-head decays 1 - 2^(-5-h), rotary "
                   "q/k; d_state = head_k_dim (even), expand = expand_v")

    class Options(GateOptions, ConvOptions):
        feature_map: str | None = None
        use_output_gate: bool = True
        mode: str | None = None  # chunk | fused_chunk | parallel | fused_recurrent

    def check(self):
        super().check()
        if self.cfg.d_state % 2:
            fail("model.d_state", self.cfg.d_state, "must be even for retnet (rotary embedding on keys)")
