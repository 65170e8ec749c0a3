"""Gated slot attention: fla's GatedSlotAttention.

Two gated linear-attention passes through N memory slots per head: the keys write into
a K/M × N slot-key state and the values into an N × V/M slot-value state, both decayed by
the same data-dependent forget gate; a query reads the slots by softmax over the first and
mixes their values through the second.  d_state = N (``num_slots``); the key width is
``options.expand_k``·D and the value width D (fla's output norm is d_model wide).
"""
from __future__ import annotations

from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from .base import ConvOptions, FlaAdapter, NormOptions


@ADAPTERS.register("gsa")
class GSA(FlaAdapter, layer="fla.layers.gsa.GatedSlotAttention", cpu=("fla.ops.gsa.naive",)):
    description = ("fla GatedSlotAttention (Zhang et al. 2024): two gated linear-attention passes through "
                   "N memory slots; d_state = num_slots, key dim = options.expand_k·D, value dim = D "
                   "(expand not used: fla's output norm is d_model wide)")
    state_formula = "Λ · M · N · (K/M + V/M) = Λ · N · (expand_k·D + D)"

    class Options(NormOptions, ConvOptions):
        expand_k: float = 1.0  # key dim per head = expand_k·D/M
        gate_logit_normalizer: int = 8
        feature_map: str = "swish"
        use_output_gate: bool = False
        use_norm: bool = True
        scale: float | None = 1.0
        mode: str | None = None  # chunk | fused_recurrent

    def check(self):
        cfg = self.cfg
        self._no_value_dim()
        self._need_divisible("model.n_heads", cfg.n_heads, "d_model", cfg.d_model)
        K = self.options.expand_k * cfg.d_model
        if K != int(K) or int(K) % cfg.n_heads:
            fail("model.options.expand_k", self.options.expand_k,
                 f"expand_k·d_model must be an integer divisible by n_heads = {cfg.n_heads}")

    def layer_kwargs(self, layer_idx):
        cfg = self.cfg
        return {"hidden_size": cfg.d_model, "num_heads": cfg.n_heads, "expand_v": 1.0,
                "num_slots": cfg.d_state, **self._conv_kwargs(), "layer_idx": layer_idx,
                **self._option_kwargs()}

    def layer_state(self, layer):
        return layer.num_heads * layer.num_slots * (layer.head_k_dim + layer.head_v_dim)

    def formula_state(self):
        cfg = self.cfg
        return cfg.n_layers * cfg.d_state * (int(self.options.expand_k * cfg.d_model) + cfg.d_model)

    def layer_shape(self, layer):
        """Its own terms: heads × N slots × (key + value per head), the two slot states."""
        return {"heads": layer.num_heads, "slots": layer.num_slots,
                "key_value": layer.head_k_dim + layer.head_v_dim}

    def formula_shape(self):
        cfg = self.cfg
        kv = (int(self.options.expand_k * cfg.d_model) + cfg.d_model) // cfg.n_heads
        return {"layers": cfg.n_layers, "heads": cfg.n_heads, "slots": cfg.d_state, "key_value": kv}

    def shape_overrides(self, term, value):
        """``heads`` = h only: S = Λ·N·(K + V) fixes the slots N at one S."""
        return {"n_heads": value} if term == "heads" else None
