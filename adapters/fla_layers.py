"""Adapters around flash-linear-attention's real layer classes (``fla.layers``).

Each adapter builds Λ = ``n_layers`` blocks the way fla's own models stack them::

    x ─► x + Mixer(RMSNorm(x)) [─► x + GatedMLP(RMSNorm(x)) with options.mlp] ─► … ─► final RMSNorm

``Mixer`` is the fla layer class itself (projections, gates, short convs, norms,
initialisation all fla's).  By default the blocks are mixer-only: recall
comparisons (Zoology, the paper's tables) compare sequence mixers, and fla's
SwiGLU MLP adds ~8·D² parameters per block that hold no recurrent state.
``model.options.mlp: true`` adds fla's ``GatedMLP`` (hidden_ratio
``options.mlp_ratio``) as in fla's ``*Block`` classes.  The block norms are
``torch.nn.RMSNorm`` (what fla's blocks use with ``fuse_norm=False``; same maths as
``fla.modules.RMSNorm``), eps ``options.block_norm_eps`` (fla's models: 1e-6).

Config mapping, shared by all adapters (per-adapter exceptions in each class):

* ``d_model`` → ``hidden_size`` (D);  ``n_heads`` → ``num_heads`` (M)
* ``d_state`` → the key dimension per head, N (``head_k_dim``): passed as
  ``expand_k = M·N / D`` or ``head_dim = N``; HGRN2 ``expand_ratio``, Based
  ``feature_dim``, GSA ``num_slots``.
* ``expand`` → the value width: value dim per head P = expand·D / M (``expand_v``),
  so that a layer's state is M·N·P = expand·D·N, the same count as linear-mamba's
  D_in·N.  HGRN2, Based and GSA have no value expansion (P = D/M; GSA's output
  norm is d_model wide, so fla's GSA breaks with expand_v != 1).
* ``d_conv`` → ``use_short_conv = d_conv > 1``, ``conv_size = d_conv`` where the
  layer has a short convolution; ignored by RWKV6 (built-in token shift), Based and
  LinearAttention (none).
* ``options`` → other keyword arguments of the layer, validated against the
  adapter's ``Options`` dataclass (defaults: fla 0.6.0's), plus the block options.
  ``options.mode`` picks fla's kernel on CUDA; on CPU every mode runs the same
  reference.  Parameters keep the layer's own initialisation (fla's models
  re-initialise with ``_init_weights``; we do not).

State sizes are read from the BUILT layer's attributes (heads, head_k_dim, …) and
count the recurrent state only (scalars per sequence, all layers); short-conv and
token-shift buffers ((d_conv-1)·channels per layer) are not counted, as for the
other adapters.

On CPU the layers' Triton kernels are swapped for fla's pure-torch references
by :mod:`adapters.fla_cpu` (installed when blocks are built on a CPU device; on
CUDA nothing is swapped).  fla is imported only when a model is built or a state
size is asked for, so ``import recallbench`` works without it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import warnings
from typing import Any, ClassVar

import torch
from torch import nn

from recallbench.api.adapter import Adapter, PreNormResidual
from recallbench.api.fields import check_range, fail, from_mapping
from recallbench.api.registry import ADAPTERS

# warnings fla raises for settings we choose deliberately
_QUIET = ("According to Bo", "ShortConvolution is crucial", "Triton is not supported on current platform",
          "Instantiating GatedSlotAttention without passing `layer_idx`")


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        for msg in _QUIET:
            warnings.filterwarnings("ignore", message=msg)
        yield


def fla_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("flash-linear-attention")
    except Exception:
        return None


@dataclasses.dataclass
class BlockOptions:
    """``model.options`` common to every fla adapter (the block around the layer)."""

    mlp: bool = False  # add fla's GatedMLP (SwiGLU) sub-block, as fla's models do
    mlp_ratio: int = 4  # GatedMLP hidden_ratio (fla rounds the width up to a multiple of 256)
    block_norm_eps: float = 1e-6  # eps of the pre-norm and final RMSNorms


_BLOCK_FIELDS = {f.name for f in dataclasses.fields(BlockOptions)}


class FlaBlock(PreNormResidual):
    """``x + mixer(norm(x))``, then optionally ``x + mlp(mlp_norm(x))`` (fla's block layout)."""

    def __init__(self, mixer: nn.Module, d_model: int, eps: float, mlp: nn.Module | None = None):
        super().__init__(mixer, d_model, norm="rms", eps=eps)
        self.mlp_norm = nn.RMSNorm(d_model, eps=eps) if mlp is not None else None
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        x = super().forward(x)
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        return x


class FlaAdapter(Adapter):
    """Shared base: import, CPU swaps, block stacking, options, availability, state size."""

    distribution = "flash-linear-attention"

    layer_module: ClassVar[str] = ""  # e.g. "fla.layers.gla"
    layer_name: ClassVar[str] = ""  # e.g. "GatedLinearAttention"
    cpu_references: ClassVar[tuple[str, ...]] = ()  # fla/ops/... files the CPU path needs
    Options: ClassVar[type] = BlockOptions
    head_patterns = ("mha",)
    has_short_conv: ClassVar[bool] = True
    embedding_std = 0.02  # fla's models: initializer_range

    # -- registry / CLI ------------------------------------------------------
    @classmethod
    def availability(cls) -> tuple[bool, str]:
        spec = importlib.util.find_spec("fla")  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            return False, "flash-linear-attention is not installed (pip install flash-linear-attention)"
        if importlib.util.find_spec("triton") is None:
            return False, "fla needs triton to import, and triton is not installed"
        if torch.cuda.is_available():
            return True, ""
        root = list(spec.submodule_search_locations)[0]
        for ref in cls.cpu_references:
            if not os.path.exists(os.path.join(root, *ref.split(".")[1:]) + ".py"):
                return False, (f"needs CUDA: no pure-torch reference {ref} in fla {fla_version()} "
                               f"for {cls.library_class} on CPU")
        return True, ""

    def validate(self) -> None:
        super().validate()
        self.options = from_mapping(self.Options, self.cfg.options, "model.options")
        check_range("model.options.mlp_ratio", self.options.mlp_ratio, 1)
        self.check()
        self._layers: list[nn.Module] = []

    def check(self) -> None:
        """Adapter-specific ConfigErrors; by default the key-value layout's: M divides expand·D."""
        self._need_divisible("model.n_heads", self.cfg.n_heads, "expand·d_model", self.value_total)

    # helpers for check()
    def _need_divisible(self, field: str, value: int, what: str, total: int) -> None:
        if total % value:
            fail(field, value, f"must divide {what} = {total}")

    @property
    def key_total(self) -> int:  # M·N
        return self.cfg.n_heads * self.cfg.d_state

    @property
    def value_total(self) -> int:  # expand·D
        return self.cfg.expand * self.cfg.d_model

    # -- building --------------------------------------------------------------
    def layer_class(self) -> type:
        with _quiet():
            module = importlib.import_module(self.layer_module)
        return getattr(module, self.layer_name)

    def layer_kwargs(self, layer_idx: int) -> dict[str, Any]:
        """fla kwargs from the config merged with the layer options; by default the key-value
        layout (hidden_size, num_heads, expand_k, expand_v) and the short conv if the layer has one."""
        conv = self._conv_kwargs() if self.has_short_conv else {}
        return {**_kv(self), **conv, "layer_idx": layer_idx, **self._option_kwargs()}

    def _option_kwargs(self) -> dict[str, Any]:
        kw = {k: v for k, v in dataclasses.asdict(self.options).items() if k not in _BLOCK_FIELDS}
        if kw.get("mode", 0) is None:
            kw.pop("mode")  # None: fla's default kernel choice
        return kw

    def _conv_kwargs(self) -> dict[str, Any]:
        return {"use_short_conv": self.cfg.d_conv > 1, "conv_size": max(self.cfg.d_conv, 2)}

    def make_layer(self, layer_idx: int = 0) -> nn.Module:
        cls = self.layer_class()
        with _quiet():
            return cls(**self.layer_kwargs(layer_idx))

    def build_blocks(self, device: torch.device) -> nn.ModuleList:
        device = torch.device(device)
        if device.type == "cpu":
            from . import fla_cpu
            with _quiet():
                fla_cpu.install()  # CPU tensors go to torch references; others keep Triton
        cfg, opt = self.cfg, self.options
        blocks = []
        self._layers = []
        for i in range(cfg.n_layers):
            layer = self.make_layer(i)
            self._layers.append(layer)
            mlp = None
            if opt.mlp:
                from fla.modules import GatedMLP
                mlp = GatedMLP(hidden_size=cfg.d_model, hidden_ratio=opt.mlp_ratio, hidden_act="swish",
                               fuse_swiglu=False)
            blocks.append(FlaBlock(layer, cfg.d_model, opt.block_norm_eps, mlp))
        return nn.ModuleList(blocks).to(device)

    def final_norm(self) -> nn.Module:
        return nn.RMSNorm(self.cfg.d_model, eps=self.options.block_norm_eps)

    # -- state -----------------------------------------------------------------
    def layer_state(self, layer: nn.Module) -> int:
        """Recurrent-state scalars of one built layer, from its attributes."""
        return layer.num_heads * layer.head_k_dim * layer.head_v_dim

    def formula_state(self) -> int:
        """The same count from the config alone (used when fla is not installed)."""
        return self.cfg.n_layers * self.cfg.expand * self.cfg.d_model * self.cfg.d_state

    def state_size(self) -> int:
        if self._layers:
            return sum(self.layer_state(layer) for layer in self._layers)
        try:
            probe = self.make_layer(0)  # one layer on CPU, to read its real configuration
        except ImportError:
            return self.formula_state()
        return self.cfg.n_layers * self.layer_state(probe)

    def state_note(self) -> str:
        conv = (f"; short-conv buffers ({self.cfg.d_conv - 1}·channels per layer) not counted"
                if self.has_short_conv and self.cfg.d_conv > 1 else "")
        return f"{self.state_formula} (recurrent state of {self.library_class}{conv})"


def _kv(adapter: FlaAdapter) -> dict[str, Any]:
    """hidden_size, num_heads, expand_k (head_k_dim = N), expand_v (head_v_dim = expand·D/M)."""
    cfg = adapter.cfg
    return {"hidden_size": cfg.d_model, "num_heads": cfg.n_heads,
            "expand_k": adapter.key_total / cfg.d_model, "expand_v": float(cfg.expand)}


# ---------------------------------------------------------------------------
# the adapters
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class GLAOptions(BlockOptions):
    feature_map: str | None = None
    use_output_gate: bool = True
    gate_fn: str = "swish"
    gate_logit_normalizer: int = 16
    gate_low_rank_dim: int = 16
    clamp_min: float | None = None
    fuse_norm: bool = True
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_recurrent | fused_chunk (CUDA); None: fla's choice


@ADAPTERS.register("gla")
class GLA(FlaAdapter):
    description = ("fla GatedLinearAttention (Yang et al. 2023): data-dependent diagonal decay per key "
                   "channel; d_state = head_k_dim, expand = expand_v")
    library_class = "fla.layers.GatedLinearAttention"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.gla", "GatedLinearAttention"
    cpu_references = ("fla.ops.gla.naive",)
    Options = GLAOptions


@dataclasses.dataclass
class DeltaNetOptions(BlockOptions):
    use_beta: bool = True
    use_gate: bool = False
    qk_activation: str = "silu"
    qk_norm: str = "l2"
    allow_neg_eigval: bool = False
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("deltanet")
class DeltaNet(FlaAdapter):
    description = ("fla DeltaNet (Schlag et al. 2021; Yang et al. 2024): delta-rule state update with "
                   "L2-normalised keys; d_state = head_k_dim, expand = expand_v")
    library_class = "fla.layers.DeltaNet"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.delta_net", "DeltaNet"
    cpu_references = ("fla.ops.delta_rule.naive",)
    Options = DeltaNetOptions


@dataclasses.dataclass
class GatedDeltaNetOptions(BlockOptions):
    use_gate: bool = True
    allow_neg_eigval: bool = False
    norm_eps: float = 1e-5
    conv_bias: bool = False
    output_gate_activation: str = "swish"
    mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("gated-deltanet")
class GatedDeltaNet(FlaAdapter):
    description = ("fla GatedDeltaNet (Yang et al. 2024): delta rule with a Mamba-2 style scalar decay; "
                   "d_state = head_dim, head_v_dim = expand·D/M")
    library_class = "fla.layers.GatedDeltaNet"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.gated_deltanet", "GatedDeltaNet"
    cpu_references = ("fla.ops.gated_delta_rule.naive",)
    Options = GatedDeltaNetOptions

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


@dataclasses.dataclass
class RetNetOptions(BlockOptions):
    feature_map: str | None = None
    use_output_gate: bool = True
    gate_fn: str = "swish"
    fuse_norm: bool = True
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_chunk | parallel | fused_recurrent


@ADAPTERS.register("retnet")
class RetNet(FlaAdapter):
    description = ("fla MultiScaleRetention (Sun et al. 2023): fixed per-head decays 1 - 2^(-5-h), rotary "
                   "q/k; d_state = head_k_dim (even), expand = expand_v")
    library_class = "fla.layers.MultiScaleRetention"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.multiscale_retention", "MultiScaleRetention"
    cpu_references = ("fla.ops.retention.naive", "fla.ops.simple_gla.naive")
    Options = RetNetOptions

    def check(self):
        super().check()
        if self.cfg.d_state % 2:
            fail("model.d_state", self.cfg.d_state, "must be even for retnet (rotary embedding on keys)")


@dataclasses.dataclass
class HGRN2Options(BlockOptions):
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_recurrent | fused_chunk


@ADAPTERS.register("hgrn2")
class HGRN2(FlaAdapter):
    description = ("fla HGRN2Attention (Qin et al. 2024): gated outer-product state, key = 1 - forget gate; "
                   "d_state = expand_ratio, heads = D / d_state (fla derives them), no value expansion")
    library_class = "fla.layers.HGRN2Attention"
    state_formula = "Λ · (D/N) · N · N = Λ · D · N"
    layer_module, layer_name = "fla.layers.hgrn2", "HGRN2Attention"
    cpu_references = ("fla.ops.gla.naive",)
    Options = HGRN2Options

    def check(self):
        cfg = self.cfg
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


@dataclasses.dataclass
class RWKV6Options(BlockOptions):
    gate_fn: str = "swish"
    proj_low_rank_dim: int = 32
    gate_low_rank_dim: int = 64
    fuse_norm: bool = True
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("rwkv6")
class RWKV6(FlaAdapter):
    description = ("fla RWKV6Attention (Peng et al. 2024, Finch): data-dependent decay, bonus u, token "
                   "shift; d_state = head_k_dim, expand = expand_v; d_conv not used")
    library_class = "fla.layers.RWKV6Attention"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.rwkv6", "RWKV6Attention"
    cpu_references = ("fla.ops.rwkv6.recurrent_naive", "fla.modules.token_shift")
    Options = RWKV6Options
    has_short_conv = False


def _feature_dim(feature_map, head_k_dim: int) -> int:
    """Width of a built feature map's output for one head_k_dim-wide input."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla's feature maps use torch.utils.checkpoint
        p = next(iter(feature_map.parameters()), None) if isinstance(feature_map, nn.Module) else None
        x = torch.zeros(1, 1, 1, head_k_dim, device=p.device if p is not None else "cpu",
                        dtype=p.dtype if p is not None else torch.float32)
        return int(feature_map(x).shape[-1])


@dataclasses.dataclass
class BasedOptions(BlockOptions):
    eps: float = 1e-12
    mode: str = "parallel"  # parallel | chunk | fused_chunk


@ADAPTERS.register("based")
class Based(FlaAdapter):
    description = ("fla BasedLinearAttention (Arora et al. 2024): 2nd-order Taylor feature map of "
                   "exp(q·k); d_state = feature_dim (pre-map), no value expansion, no short conv")
    library_class = "fla.layers.BasedLinearAttention"
    state_formula = "Λ · M · F · (D/M + 1),  F = 1 + N + N(N+1)/2 (Taylor features; +1: the normaliser)"
    layer_module, layer_name = "fla.layers.based", "BasedLinearAttention"
    cpu_references = ("fla.ops.based.naive", "fla.ops.linear_attn.naive")
    Options = BasedOptions
    has_short_conv = False

    def check(self):
        cfg = self.cfg
        self._need_divisible("model.n_heads", cfg.n_heads, "d_model", cfg.d_model)
        if self.options.mode == "parallel" and cfg.d_state > 128:
            fail("model.d_state", cfg.d_state, "must be <= 128 for based's parallel kernel")

    def layer_kwargs(self, layer_idx):
        cfg = self.cfg
        return {"hidden_size": cfg.d_model, "feature_dim": cfg.d_state, "num_heads": cfg.n_heads,
                "num_key_value_heads": cfg.n_heads, **self._option_kwargs()}

    def layer_state(self, layer):
        F_ = _feature_dim(layer.feature_map, layer.head_k_dim)
        return layer.num_heads * F_ * (layer.head_v_dim + 1)

    def formula_state(self):
        N, cfg = self.cfg.d_state, self.cfg
        return cfg.n_layers * cfg.n_heads * (1 + N + N * (N + 1) // 2) * (cfg.d_model // cfg.n_heads + 1)


@dataclasses.dataclass
class LinearAttentionOptions(BlockOptions):
    feature_map: str = "elementwise_product"  # hedgehog | t2r | elementwise_product | dpfp | elu | relu | identity
    tie_feature_map_qk: bool = False
    output_norm: str = "rmsnorm"
    norm_q: bool = False
    norm_k: bool = False
    do_feature_map_norm: bool = False
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    mode: str | None = None  # chunk | fused_chunk | fused_recurrent


@ADAPTERS.register("linear-attention")
class LinearAttention(FlaAdapter):
    description = ("fla LinearAttention (Katharopoulos et al. 2020) with a chosen feature map φ; "
                   "d_state = head_k_dim before φ, expand = expand_v; no short conv")
    library_class = "fla.layers.LinearAttention"
    state_formula = ("Λ · M · F · (expand·D/M) = Λ · expand · D · F,  F = width of φ (N; hedgehog 2N, dpfp 8N)"
                     " (+ Λ · M · F with do_feature_map_norm)")
    layer_module, layer_name = "fla.layers.linear_attn", "LinearAttention"
    cpu_references = ("fla.ops.linear_attn.naive",)
    Options = LinearAttentionOptions
    has_short_conv = False
    _FEATURE_MULT: ClassVar[dict[str, int]] = {"hedgehog": 2, "dpfp": 8}


    def layer_state(self, layer):
        F_ = _feature_dim(layer.feature_map_q, layer.head_k_dim)
        return layer.num_heads * F_ * (layer.head_v_dim + (1 if layer.do_feature_map_norm else 0))

    def formula_state(self):
        cfg = self.cfg
        F_ = cfg.d_state * self._FEATURE_MULT.get(self.options.feature_map, 1)
        P = self.value_total // cfg.n_heads + (1 if self.options.do_feature_map_norm else 0)
        return cfg.n_layers * cfg.n_heads * F_ * P


@dataclasses.dataclass
class GSAOptions(BlockOptions):
    expand_k: float = 1.0  # key dim per head = expand_k·D/M
    gate_logit_normalizer: int = 8
    feature_map: str = "swish"
    use_output_gate: bool = False
    use_norm: bool = True
    scale: float | None = 1.0
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("gsa")
class GSA(FlaAdapter):
    description = ("fla GatedSlotAttention (Zhang et al. 2024): two gated linear-attention passes through "
                   "N memory slots; d_state = num_slots, key dim = options.expand_k·D, value dim = D "
                   "(expand not used: fla's output norm is d_model wide)")
    library_class = "fla.layers.GatedSlotAttention"
    state_formula = "Λ · M · N · (K/M + V/M) = Λ · N · (expand_k·D + D)"
    layer_module, layer_name = "fla.layers.gsa", "GatedSlotAttention"
    cpu_references = ("fla.ops.gsa.naive",)
    Options = GSAOptions

    def check(self):
        cfg = self.cfg
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


@dataclasses.dataclass
class SimpleGLAOptions(BlockOptions):
    feature_map: str | None = None
    gate_fn: str = "swish"
    gate_logit_normalizer: int = 16
    fuse_norm: bool = True
    elementwise_affine: bool = True
    norm_eps: float = 1e-5
    conv_bias: bool = False
    mode: str | None = None  # chunk | fused_recurrent


@ADAPTERS.register("simple-gla")
class SimpleGLA(FlaAdapter):
    description = ("fla SimpleGatedLinearAttention: GLA with one data-dependent decay per head "
                   "(Mamba-2 / Lightning style); d_state = head_k_dim, expand = expand_v")
    library_class = "fla.layers.simple_gla.SimpleGatedLinearAttention"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"
    layer_module, layer_name = "fla.layers.simple_gla", "SimpleGatedLinearAttention"
    cpu_references = ("fla.ops.simple_gla.naive",)
    Options = SimpleGLAOptions


FLA_ADAPTERS = ("gla", "deltanet", "gated-deltanet", "retnet", "hgrn2", "rwkv6", "based",
                "linear-attention", "gsa", "simple-gla")
