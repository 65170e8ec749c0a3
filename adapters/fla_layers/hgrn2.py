"""HGRN2: fla's HGRN2Attention, a gated linear RNN with an outer-product state.

Each of D/N heads keeps an N × N state, h_t = diag(f_t) h_{t−1} + (1 − f_t) i_tᵀ: the
forget gate f_t decays it and its complement 1 − f_t is the key.  fla derives the heads
from ``expand_ratio`` = N, so the state is Λ · D · N, with no value expansion.
"""
from __future__ import annotations

from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from .base import ConvOptions, FlaAdapter, NormOptions


@ADAPTERS.register("hgrn2")
class HGRN2(FlaAdapter, layer="fla.layers.hgrn2.HGRN2Attention", cpu=("fla.ops.gla.naive",)):
    description = ("fla HGRN2Attention (Qin et al. 2024): gated outer-product state, key = 1 - forget gate; "
                   "d_state = expand_ratio, heads = D / d_state (fla derives them), no value expansion")
    state_formula = "Λ · (D/N) · N · N = Λ · D · N"

    class Options(NormOptions, ConvOptions):
        mode: str | None = None  # chunk | fused_recurrent | fused_chunk

    def check(self):
        cfg = self.cfg
        self._no_value_dim()
        self._need_divisible("model.d_state", cfg.d_state, "d_model", cfg.d_model)
        heads = cfg.d_model // cfg.d_state
        if cfg.n_heads not in (1, heads):
            fail("model.n_heads", cfg.n_heads,
                 f"hgrn2 takes its heads from d_model / d_state = {heads}: leave n_heads at 1 or set {heads}")

    def layer_kwargs(self, layer_idx):
        return {"hidden_size": self.cfg.d_model, "expand_ratio": self.cfg.d_state, **self._conv_kwargs(),
                "layer_idx": layer_idx, **self._option_kwargs()}

    def layer_state(self, layer):
        return layer.num_heads * layer.head_f_dim * layer.head_i_dim

    def formula_state(self):
        return self.cfg.n_layers * self.cfg.d_model * self.cfg.d_state

    def layer_shape(self, layer):
        """D/N heads of key N (the forget gate's complement) × value N; at one S the key
        follows D, so ``--shapes`` cannot set it (no shape_overrides)."""
        return {"heads": layer.num_heads, "key": layer.head_f_dim, "value": layer.head_i_dim}

    def formula_shape(self):
        cfg = self.cfg
        return {"layers": cfg.n_layers, "heads": cfg.d_model // cfg.d_state, "key": cfg.d_state,
                "value": cfg.d_state}

    def shape_overrides(self, term, value):
        return None
