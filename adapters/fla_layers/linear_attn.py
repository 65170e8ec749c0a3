"""Feature-map linear attention: fla's LinearAttention and BasedLinearAttention.

Per head the sum h_t = h_{t−1} + φ(k_t)ᵀ v_t of F × P outer products, read as φ(q_t) h_t
(no decay), F the width of the feature map φ.  LinearAttention takes φ from a list
(F = N; hedgehog 2N, dpfp 8N) and may normalise by φ(q_t) Σ φ(k_τ)ᵀ, one more column of
state; Based uses the 2nd-order Taylor map of exp(q·k), F = 1 + N + N(N+1)/2, always
normalised.

Neither layer has a short convolution, and without one a single layer cannot bind a key
to the value that follows it: a query reads a sum over keys that carry no trace of their
neighbours, so one-layer MQAR stays at the guess (cpu-v2 with ``d_conv = 1``: 0.19–0.22
at N_f = 4, 0.03 at N_f = 32, at all three budgets).  Based's own architecture
interleaves it with short gated convolutions (BaseConv), and Zoology's recall baselines
give every mixer a short conv.  So, as the attention adapter does, these adapters put a
causal depthwise conv of width ``d_conv`` in front of fla's layer, ``mixer(x) =
Layer(Conv1D(x))`` on the d_model channels (:class:`ConvFront`); ``d_conv = 1`` builds
fla's layer alone.  The conv's (d_conv − 1)·D buffer is not counted as state, as for
every adapter's short conv.
"""
from __future__ import annotations

import math
import warnings
from typing import ClassVar

import torch
from torch import nn

from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from ..linear_mamba import CausalDepthwiseConv
from .base import BlockOptions, FlaAdapter, NormOptions


class ConvFront(nn.Module):
    """``layer(Conv1D(x))``: a causal depthwise conv of width W over the D input channels,
    then fla's layer (kept as ``.layer``; its output tuple is passed through)."""

    def __init__(self, layer: nn.Module, d_model: int, width: int):
        super().__init__()
        self.conv = CausalDepthwiseConv(d_model, width)
        self.layer = layer

    def forward(self, x: torch.Tensor):  # (B, L, D) -> fla's (output (B, L, D), attentions, cache)
        return self.layer(self.conv(x))


class _ConvFrontAdapter(FlaAdapter):
    """Builds :class:`ConvFront` around the layer when d_conv > 1; the state is the layer's."""

    def make_layer(self, layer_idx: int = 0) -> nn.Module:
        layer = super().make_layer(layer_idx)
        return ConvFront(layer, self.cfg.d_model, self.cfg.d_conv) if self.cfg.d_conv > 1 else layer

    def layer_state(self, layer) -> int:
        return self.fla_state(getattr(layer, "layer", layer))

    def fla_state(self, layer) -> int:
        """Recurrent-state scalars of fla's built layer."""
        raise NotImplementedError

    def layer_shape(self, layer) -> dict[str, int]:
        """Heads × key F (the feature map's width) × value per head (+1: the normaliser)."""
        layer = getattr(layer, "layer", layer)
        key = self.fla_state(layer) // (layer.num_heads * self.value_width(layer))
        return {"heads": layer.num_heads, "key": key, "value": self.value_width(layer)}

    def value_width(self, layer) -> int:
        """The value side of a head's state: head_v_dim, + 1 with the normaliser."""
        return layer.head_v_dim + 1

    def state_note(self) -> str:
        conv = (f"; a short conv of width {self.cfg.d_conv} in front of the layer, its "
                f"{self.cfg.d_conv - 1}·D buffer not counted" if self.cfg.d_conv > 1 else "")
        return f"{self.state_formula} (recurrent state of {self.library_class}{conv})"


def _feature_dim(feature_map, head_k_dim: int) -> int:
    """Width of a built feature map's output for one head_k_dim-wide input."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla's feature maps use torch.utils.checkpoint
        p = next(iter(feature_map.parameters()), None) if isinstance(feature_map, nn.Module) else None
        x = torch.zeros(1, 1, 1, head_k_dim, device=p.device if p is not None else "cpu",
                        dtype=p.dtype if p is not None else torch.float32)
        return int(feature_map(x).shape[-1])


@ADAPTERS.register("linear-attention")
class LinearAttention(_ConvFrontAdapter, layer="fla.layers.linear_attn.LinearAttention",
                       cpu=("fla.ops.linear_attn.naive",)):
    description = ("fla LinearAttention (Katharopoulos et al. 2020) with a chosen feature map φ; "
                   "d_state = head_k_dim before φ, expand = expand_v; a short conv of width d_conv in front")
    state_formula = ("Λ · M · F · (expand·D/M) = Λ · expand · D · F,  F = width of φ (N; hedgehog 2N, dpfp 8N)"
                     " (+ Λ · M · F with do_feature_map_norm)")
    has_short_conv = False
    _FEATURE_MULT: ClassVar[dict[str, int]] = {"hedgehog": 2, "dpfp": 8}

    class Options(NormOptions):
        feature_map: str = "elementwise_product"  # hedgehog | t2r | elementwise_product | dpfp | elu | relu | identity
        tie_feature_map_qk: bool = False
        output_norm: str = "rmsnorm"
        norm_q: bool = False
        norm_k: bool = False
        do_feature_map_norm: bool = False
        mode: str | None = None  # chunk | fused_chunk | fused_recurrent

    def fla_state(self, layer):
        F_ = _feature_dim(layer.feature_map_q, layer.head_k_dim)
        return layer.num_heads * F_ * (layer.head_v_dim + (1 if layer.do_feature_map_norm else 0))

    def formula_state(self):
        return math.prod(self.formula_shape().values())

    def value_width(self, layer):
        return layer.head_v_dim + (1 if layer.do_feature_map_norm else 0)

    def formula_shape(self):
        cfg = self.cfg
        P = self.value_total // cfg.n_heads + (1 if self.options.do_feature_map_norm else 0)
        return {"layers": cfg.n_layers, "heads": cfg.n_heads,
                "key": cfg.d_state * self._FEATURE_MULT.get(self.options.feature_map, 1), "value": P}

    def shape_overrides(self, term, value):
        """``key`` = F: d_state = F / (the map's widening) and the value width that keeps S
        (``heads`` as every fla layer)."""
        if term != "key":
            return super().shape_overrides(term, value)
        mult = self._FEATURE_MULT.get(self.options.feature_map, 1)
        if value % mult:
            return None
        over = super().shape_overrides("key", value)
        return over and {**over, "d_state": value // mult}


@ADAPTERS.register("based")
class Based(_ConvFrontAdapter, layer="fla.layers.based.BasedLinearAttention",
             cpu=("fla.ops.based.naive", "fla.ops.linear_attn.naive")):
    description = ("fla BasedLinearAttention (Arora et al. 2024): 2nd-order Taylor feature map of "
                   "exp(q·k); d_state = feature_dim (pre-map), no value expansion; a short conv of "
                   "width d_conv in front")
    state_formula = "Λ · M · F · (D/M + 1),  F = 1 + N + N(N+1)/2 (Taylor features; +1: the normaliser)"
    has_short_conv = False

    class Options(BlockOptions):
        eps: float = 1e-12
        mode: str = "parallel"  # parallel | chunk | fused_chunk

    def check(self):
        cfg = self.cfg
        self._no_value_dim()
        self._need_divisible("model.n_heads", cfg.n_heads, "d_model", cfg.d_model)
        if self.options.mode == "parallel" and cfg.d_state > 128:
            fail("model.d_state", cfg.d_state, "must be <= 128 for based's parallel kernel")

    def layer_kwargs(self, layer_idx):
        cfg = self.cfg
        return {"hidden_size": cfg.d_model, "feature_dim": cfg.d_state, "num_heads": cfg.n_heads,
                "num_key_value_heads": cfg.n_heads, **self._option_kwargs()}

    def fla_state(self, layer):
        F_ = _feature_dim(layer.feature_map, layer.head_k_dim)
        return layer.num_heads * F_ * (layer.head_v_dim + 1)

    def formula_state(self):
        return math.prod(self.formula_shape().values())

    def formula_shape(self):
        N, cfg = self.cfg.d_state, self.cfg
        return {"layers": cfg.n_layers, "heads": cfg.n_heads, "key": 1 + N + N * (N + 1) // 2,
                "value": cfg.d_model // cfg.n_heads + 1}

    def shape_overrides(self, term, value):
        """None: S = F·(D + M) with the Taylor key F = 1 + N + N(N+1)/2, so at one S
        neither the key nor the heads can change."""
        return None
