"""What every fla adapter shares: the block around fla's layer, options, availability, state.

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

``model.options`` are validated against the adapter's ``Options`` dataclass: the block
options (:class:`BlockOptions`) plus the layer's own keyword arguments (defaults: fla
0.6.0's), assembled from the groups below where layers share them.  ``options.mode``
picks fla's kernel on CUDA; on CPU every mode runs the same reference.  Parameters keep
the layer's own initialisation (fla's models re-initialise with ``_init_weights``; we do
not).

State sizes and shapes (layers × heads × key × value, or the layer's own terms) are read
from the BUILT layer's attributes (heads, head_k_dim, …) and
count the recurrent state only (scalars per sequence, all layers); short-conv and
token-shift buffers ((d_conv-1)·channels per layer) are not counted, as for the
other adapters.  On CPU the layers' Triton kernels are swapped for fla's pure-torch
references (:data:`recallbench.adapters.cpu.fla_swaps.SWAPS`, kept installed once blocks
are built on a CPU device); on CUDA nothing is swapped, except the kernels fla refuses on
that GPU (``gated_chunk_kernels`` on Hopper with Triton < 3.7.1), which are routed to the
same references on the GPU (:meth:`FlaAdapter.kernel_path`,
:func:`recallbench.adapters.kernel_choice.fla`).
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

from recallbench.api import kernels
from recallbench.api.adapter import Adapter, PreNormResidual
from recallbench.api.fields import check_range, fail, from_mapping

from .. import kernel_choice
from ..cpu.fla_swaps import SWAPS as CPU_SWAPS

# warnings fla raises for settings we choose deliberately
_QUIET = ("According to Bo", "ShortConvolution is crucial", "Triton is not supported on current platform",
          "Instantiating GatedSlotAttention without passing `layer_idx`")


@contextlib.contextmanager
def _quiet():
    """Silence the warnings fla raises for settings we choose deliberately."""
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


# -- options: the block's, then groups of layer arguments that several layers share --------
@dataclasses.dataclass
class BlockOptions:
    """``model.options`` common to every fla adapter (the block around the layer)."""

    mlp: bool = False  # add fla's GatedMLP (SwiGLU) sub-block, as fla's models do
    mlp_ratio: int = 4  # GatedMLP hidden_ratio (fla rounds the width up to a multiple of 256)
    block_norm_eps: float = 1e-6  # eps of the pre-norm and final RMSNorms
    #: the layer's value width over all heads, in place of expand·D (fla's expand_v =
    #: value_dim / D, which may be below 1): how ``capacity --shapes`` gives a layer keys
    #: wider than S / D; null: expand·D.  Layers without a value expansion refuse it.
    value_dim: int | None = None


_BLOCK_FIELDS = {f.name for f in dataclasses.fields(BlockOptions)}


@dataclasses.dataclass
class NormOptions(BlockOptions):
    """The layer's output norm."""

    elementwise_affine: bool = True
    norm_eps: float = 1e-5


@dataclasses.dataclass
class GateOptions(NormOptions):
    """The output gate, applied with the output norm (fused into one kernel on CUDA)."""

    gate_fn: str = "swish"
    fuse_norm: bool = True


@dataclasses.dataclass
class ConvOptions(BlockOptions):
    """The layer's short convolution."""

    conv_bias: bool = False


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
    """Shared base: import, CPU swaps, block stacking, options, availability, state size.

    A subclass names its fla layer and the fla files its CPU path needs as class
    keywords, ``class GLA(FlaAdapter, layer="fla.layers.gla.GatedLinearAttention",
    cpu=("fla.ops.gla.naive",))``, and its layer's keyword arguments as a nested
    ``Options`` class (made a dataclass here).  By default a layer has the key-value
    layout (``hidden_size``, ``num_heads``, ``expand_k = M·N / D``, ``expand_v = expand``)
    and a short conv; its state is M · N · P per layer with P = expand·D / M.
    Subclasses override what differs.
    """

    distribution = "flash-linear-attention"
    state_formula = "Λ · M · N · (expand·D/M) = Λ · expand · D · N"

    layer_module: ClassVar[str] = ""  # e.g. "fla.layers.gla"
    layer_name: ClassVar[str] = ""  # e.g. "GatedLinearAttention"
    cpu_references: ClassVar[tuple[str, ...]] = ()  # fla/ops/... files the CPU path needs
    #: kernels (names in layer_module) that run fla's gated chunk backward, which fla refuses
    #: on Hopper with Triton < 3.7.1: they fall back to their references on such a GPU
    gated_chunk_kernels: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = BlockOptions
    head_patterns = ("mha",)
    has_short_conv: ClassVar[bool] = True

    def __init_subclass__(cls, layer: str = "", cpu: tuple[str, ...] = (), **kwargs):
        super().__init_subclass__(**kwargs)
        if layer:
            cls.layer_module, _, cls.layer_name = layer.rpartition(".")
            cls.cpu_references = cpu
            if "library_class" not in cls.__dict__:  # the name fla.layers exports it under
                cls.library_class = f"fla.layers.{cls.layer_name}"
        if "Options" in cls.__dict__:
            cls.Options = dataclasses.dataclass(cls.Options)

    # -- registry / CLI ------------------------------------------------------
    @classmethod
    def availability(cls) -> tuple[bool, str]:
        spec = importlib.util.find_spec("fla")  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            return False, "flash-linear-attention is not installed (pip install flash-linear-attention)"
        if importlib.util.find_spec("triton") is None:
            return False, "fla needs triton to import, and triton is not installed"
        missing = cls.missing_reference()
        if missing and not torch.cuda.is_available():
            return False, (f"needs CUDA: no pure-torch reference {missing} in fla {fla_version()} "
                           f"for {cls.library_class} on CPU")
        return True, ""

    @classmethod
    def missing_reference(cls) -> str | None:
        """The first of ``cpu_references`` that the installed fla lacks, or None."""
        root = list(importlib.util.find_spec("fla").submodule_search_locations)[0]
        for ref in cls.cpu_references:
            if not os.path.exists(os.path.join(root, *ref.split(".")[1:]) + ".py"):
                return ref
        return None

    @classmethod
    def kernel_path(cls, device: torch.device) -> tuple[str, str]:
        device = torch.device(device)
        gpu = device.type != "cpu"
        return kernel_choice.fla(
            device.type, references=cls.cpu_references, missing_reference=cls.missing_reference(),
            refused=cls.gated_chunk_kernels, capability=kernels.cuda_capability(device),
            triton=kernels.triton_version(), tilelang=gpu and kernels.importable("tilelang"))

    def validate(self) -> None:
        super().validate()
        self.options = from_mapping(self.Options, self.cfg.options, "model.options")
        check_range("model.options.mlp_ratio", self.options.mlp_ratio, 1)
        self._probe = None
        if self.options.value_dim is not None:
            check_range("model.options.value_dim", self.options.value_dim, 1, 2**20)
            v, d = self.options.value_dim, self.cfg.d_model
            if int(d * (v / d)) != v:  # fla's value_dim = int(hidden_size · expand_v)
                fail("model.options.value_dim", v, f"not reproducible as int(d_model · "
                     f"value_dim / d_model) at d_model = {d}")
        # the harness's final RMSNorm and embedding init (std 0.02, fla's initializer_range)
        self.wrapper = {"norm_eps": self.options.block_norm_eps}
        self.check()
        self._layers: list[nn.Module] = []

    def check(self) -> None:
        """Adapter-specific ConfigErrors; by default the key-value layout's: M divides expand·D."""
        self._need_divisible("model.n_heads", self.cfg.n_heads, "expand·d_model", self.value_total)

    # helpers for check()
    def _no_value_dim(self) -> None:
        """check() of a layer without a value expansion: options.value_dim refused."""
        if self.options.value_dim is not None:
            fail("model.options.value_dim", self.options.value_dim,
                 f"null: {self.name} has no value expansion")

    def _need_divisible(self, field: str, value: int, what: str, total: int) -> None:
        if total % value:
            fail(field, value, f"must divide {what} = {total}")

    @property
    def key_total(self) -> int:  # M·N
        return self.cfg.n_heads * self.cfg.d_state

    @property
    def value_total(self) -> int:  # expand·D, or options.value_dim
        return self.options.value_dim or self.cfg.expand * self.cfg.d_model

    # -- building --------------------------------------------------------------
    def layer_class(self) -> type:
        with _quiet():
            module = importlib.import_module(self.layer_module)
        return getattr(module, self.layer_name)

    def layer_kwargs(self, layer_idx: int) -> dict[str, Any]:
        """fla kwargs from the config merged with the layer options; by default the key-value
        layout (hidden_size, num_heads, expand_k, expand_v) and the short conv if the layer has one."""
        cfg = self.cfg
        kv = {"hidden_size": cfg.d_model, "num_heads": cfg.n_heads,
              "expand_k": self.key_total / cfg.d_model, "expand_v": self.value_total / cfg.d_model}
        conv = self._conv_kwargs() if self.has_short_conv else {}
        return {**kv, **conv, "layer_idx": layer_idx, **self._option_kwargs()}

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
            with _quiet():
                CPU_SWAPS.keep_installed()  # CPU tensors go to torch references; others keep Triton
        elif self.kernel_path(device)[0] == kernels.REFERENCE:  # kernels fla refuses on this GPU
            with _quiet():
                CPU_SWAPS.route_everywhere(f"{self.layer_module}:{k}" for k in self.gated_chunk_kernels)
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

    # -- state -----------------------------------------------------------------
    def layer_state(self, layer: nn.Module) -> int:
        """Recurrent-state scalars of one built layer, from its attributes."""
        return layer.num_heads * layer.head_k_dim * layer.head_v_dim

    def formula_state(self) -> int:
        """The same count from the config alone (used when fla is not installed)."""
        return self.cfg.n_layers * self.value_total * self.cfg.d_state

    def layer_shape(self, layer: nn.Module) -> dict[str, int]:
        """One built layer's state shape; its product is :meth:`layer_state`."""
        return {"heads": layer.num_heads, "key": layer.head_k_dim, "value": layer.head_v_dim}

    def formula_shape(self) -> dict[str, int] | None:
        """The same shape from the config alone (when fla is not installed)."""
        cfg = self.cfg
        return {"layers": cfg.n_layers, "heads": cfg.n_heads, "key": cfg.d_state,
                "value": self.value_total // cfg.n_heads}

    def _probe_layer(self) -> nn.Module:
        """One layer on CPU, to read its real configuration (ImportError without fla)."""
        if self._probe is None:
            self._probe = self.make_layer(0)
        return self._probe

    def state_size(self) -> int:
        if self._layers:
            return sum(self.layer_state(layer) for layer in self._layers)
        try:
            probe = self._probe_layer()
        except ImportError:
            return self.formula_state()
        return self.cfg.n_layers * self.layer_state(probe)

    def state_shape(self) -> dict[str, int] | None:
        try:
            probe = self._layers[0] if self._layers else self._probe_layer()
        except ImportError:
            return self.formula_shape()
        return {"layers": self.cfg.n_layers, **self.layer_shape(probe)}

    def shape_overrides(self, term, value):
        """``key`` = k: d_state = k and the value width S / (Λ·k), as ``expand`` when it is a
        multiple of D (and options.value_dim is unset), else as ``options.value_dim``;
        ``heads`` = h: n_heads = h (the value per head shrinks)."""
        cfg = self.cfg
        if term == "heads":
            return {"n_heads": value}
        if term != "key":
            return None
        total, rest = divmod(self.state_size(), cfg.n_layers * value)
        if rest:
            return None
        if total % cfg.d_model == 0 and self.options.value_dim is None:
            return {"d_state": value, "expand": total // cfg.d_model}
        return {"d_state": value, "expand": 1, "options": {"value_dim": total}}

    def state_note(self) -> str:
        conv = (f"; short-conv buffers ({self.cfg.d_conv - 1}·channels per layer) not counted"
                if self.has_short_conv and self.cfg.d_conv > 1 else "")
        return f"{self.state_formula} (recurrent state of {self.library_class}{conv})"
