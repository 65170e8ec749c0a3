"""The adapter contract: how a sequence-mixing layer plugs into recallbench.

An adapter supplies the MIXER, ``(B, L, D) -> (B, L, D)``, and says how big its recurrent
state is; the harness (:mod:`recallbench.harness.model`) builds the same model around every
mixer, so that two layers compare on the layer alone::

    tokens (B, L) ─ E (V, D), N(0, 0.02²) ─► Λ × [h + mixer_l(RMSNorm(h))] ─► RMSNorm ─► h Eᵀ

This is the whole of a third-party adapter (the README's "Extending recallbench" shows it
with a mixer and its entry point: ``examples/minimal_adapter.py``, run by the tests)::

    class MyLayer(Adapter):
        def build_mixer(self, layer_idx, device):
            return MyMixer(self.cfg.d_model, self.cfg.d_state)
        def state_size(self):
            return self.cfg.n_layers * self.cfg.d_model * self.cfg.d_state

The wrapper around the mixers has defaults (:data:`WRAPPER_DEFAULTS`): the embedding's
init std (0.02, as mamba-ssm's and fla's models; None keeps torch's N(0, 1)), the block
(``"prenorm"``: ``h + mixer(norm(h))``; ``"none"``: the mixer is the block, it adds its own
residual if any), the block norm (``"rms"`` or ``"layer"``), the eps of every norm (None:
torch's default) and the final norm (``"rms"``, ``"layer"`` or None).  An adapter changes
one only by declaring it in :attr:`Adapter.wrapper` (a class attribute, or set in
``validate()`` when it depends on the options), and every run's record shows the
resulting wrapper and which keys were overridden (``record["wrapper"]``)::

    class PaperModel(Adapter):
        wrapper = {"block": "none", "final_norm": None, "embedding_std": None}

Three hooks build a part themselves, each shown in the record as an override:
``build_blocks(device)`` (Λ whole blocks, e.g. a library's own block layout, or an
adapter written before ``build_mixer``; ``"block": "adapter"``), ``final_norm()`` (a
module; ``"final_norm": "adapter"``) and ``init_embedding`` (fixed embeddings;
``"embedding_init": "adapter"``).  An ``embedding_std`` class attribute (the older way to
declare it) is read as ``wrapper["embedding_std"]``.

The state's shape: ``state_shape()`` names the factors of ``state_size()`` in the layer's
own terms, e.g. ``{"layers": Λ, "heads": M, "key": N, "value": P}`` (their product is S;
None when the state grows with L or its shape is not known), and ``shape_overrides(term,
value)`` the model-config overrides that set one term at the same S (``capacity --shapes``;
:func:`realisable` keeps those whose built adapter has that S and that term).

Subclass, decorate with ``@ADAPTERS.register("name")`` (in-tree) or declare an entry
point in the ``recallbench.adapters`` group (third party).  Heavy libraries are imported
inside methods, never at module import, so that a missing package shows up in
``availability()`` instead of breaking ``import recallbench``.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import torch
from torch import nn

from recallbench.api.config import ModelConfig
from recallbench.api.errors import ConfigError
from recallbench.api.kernels import OWN

#: the harness's wrapper around the mixers; an adapter overrides keys in ``Adapter.wrapper``
WRAPPER_DEFAULTS: dict[str, Any] = {
    "embedding_std": 0.02,  # std of the tied embedding's normal init; None: torch's N(0, 1)
    "block": "prenorm",  # "prenorm": h + mixer(norm(h)); "none": h = mixer(h)
    "norm": "rms",  # the pre-norm: "rms" (RMSNorm) or "layer" (LayerNorm)
    "norm_eps": 1e-5,  # eps of the block and final norms (mamba-ssm's); None: torch's default
    "final_norm": "rms",  # before the tied read-out: "rms", "layer" or None (none)
}
BLOCKS = ("prenorm", "none")
NORMS = ("rms", "layer")


def check_wrapper(name: str, wrapper: Any) -> dict[str, Any]:
    """An adapter's declared wrapper overrides, checked: ConfigError names a bad key."""
    if not isinstance(wrapper, Mapping):
        raise ConfigError(f"adapter {name}: wrapper must be a mapping of "
                          f"{', '.join(WRAPPER_DEFAULTS)}")
    allowed = {"block": BLOCKS, "norm": NORMS, "final_norm": (*NORMS, None)}
    for key, value in wrapper.items():
        where = f"adapter {name}: wrapper[{key!r}]"
        if key not in WRAPPER_DEFAULTS:
            raise ConfigError(f"{where} is not a wrapper key; allowed: {', '.join(WRAPPER_DEFAULTS)}")
        if key in allowed and value not in allowed[key]:
            raise ConfigError(f"{where} = {value!r:.40} is not allowed: one of "
                              + ", ".join(map(repr, allowed[key])))
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in ("embedding_std", "norm_eps") and value is not None \
                and not (number and math.isfinite(value) and value > 0):
            raise ConfigError(f"{where} = {value!r:.40} is not allowed: a number > 0 or None")
    return dict(wrapper)


class Adapter:
    name: ClassVar[str] = "adapter"
    description: ClassVar[str] = ""
    library_class: ClassVar[str] = ""  # e.g. "mamba_ssm.Mamba", for the README table
    state_formula: ClassVar[str] = ""  # e.g. "Λ · expand · D · N"
    trainable: ClassVar[bool] = True  # False: evaluation only (fixed weights)
    #: the harness's wrapper keys this adapter overrides (:data:`WRAPPER_DEFAULTS`); set it
    #: in ``validate()`` when it depends on ``model.options``
    wrapper: Mapping[str, Any] = {}
    head_patterns: ClassVar[tuple[str, ...]] = ("mva",)  # patterns it implements; [0] is its default
    # -- what the core needs to know (declared here, never looked up by name in the core) --
    #: the model kind of the recall law (``recallbench.law.theory.MODEL_KINDS``: "designed",
    #: "linear", "full") when the config's D and N mean what the law's D and N mean; None
    #: otherwise (no law curve, no collapse fit: a black box that still gets S_eff).
    law_kind: ClassVar[str | None] = None
    #: the distribution whose code runs the mixer (e.g. "mamba-ssm"), for provenance; None
    #: when the mixer is written in the adapter's own package.
    distribution: ClassVar[str | None] = None

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        self.validate()
        check_wrapper(self.name, self.wrapper)

    # -- what the registry and the CLI ask -----------------------------------
    @classmethod
    def availability(cls) -> tuple[bool, str]:
        """(True, "") if it can run here, else (False, why not)."""
        return True, ""

    @classmethod
    def kernel_path(cls, device: torch.device) -> tuple[str, str]:
        """(path, reason): which kernels it runs on ``device`` once available, one of
        :data:`recallbench.api.kernels.PATHS`; an adapter around a library's GPU kernels
        declares "fused" / "reference" / "unavailable", by default it is its own code."""
        return OWN, "the adapter's own torch code, the same on every device"

    def validate(self) -> None:
        """Raise ConfigError for settings this adapter cannot honour."""
        self.head_pattern = self.cfg.head_pattern or self.head_patterns[0]
        if self.head_pattern not in self.head_patterns:
            raise ConfigError(
                f"model.head_pattern = {self.head_pattern!r} is not allowed for adapter "
                f"{self.name}: one of {', '.join(self.head_patterns)}")

    # -- what the model needs --------------------------------------------------
    def build_mixer(self, layer_idx: int, device: torch.device) -> nn.Module:
        """The mixer of layer ``layer_idx`` (< cfg.n_layers), (B, L, D) -> (B, L, D); in a
        ``"prenorm"`` block a tuple whose first item is that (as fla's layers return) is
        read as it."""
        raise NotImplementedError(f"adapter {self.name} defines no build_mixer(layer_idx, device)")

    def init_embedding(self, embedding: nn.Embedding, generator: torch.Generator) -> None:
        """Adapters with a designed embedding (fixed weights) set it here."""

    def state_size(self) -> int | None:
        """Scalars of recurrent state per sequence, all layers; None if it grows with L."""
        raise NotImplementedError

    def state_note(self) -> str:
        """How the state size is counted, for reports."""
        return self.state_formula

    def state_shape(self) -> dict[str, int] | None:
        """The factors of ``state_size()`` by name (their product is it), in the layer's own
        terms, e.g. ``{"layers": Λ, "heads": M, "key": N, "value": P}``; None (the default)
        when the state grows with L or its shape is not known."""
        return None

    def shape_overrides(self, term: str, value: int) -> dict[str, Any] | None:
        """Model-config overrides (``d_state``, ``expand``, ``options``, ...) that set the
        shape's ``term`` to ``value`` at this config's state size; None when this layer
        cannot change that term (the default).  A candidate only: :func:`realisable`
        builds it and keeps it when its state size and term are the ones asked for."""
        return None

    def circuit(self, model: nn.Module):
        """The trained ``model`` as a one-layer linear recall circuit
        (:class:`recallbench.api.circuit.Circuit`, the paper's symbols), for
        ``recallbench probe``; None (the default) when the model is not one."""
        return None


def shape_product(shape: Mapping[str, int] | None) -> int | None:
    """The product of a state shape's terms (None for no shape)."""
    return math.prod(int(v) for v in shape.values()) if shape else None


def with_overrides(cfg: ModelConfig, overrides: Mapping[str, Any]) -> ModelConfig:
    """``cfg`` with model-config ``overrides`` (``options`` merged key by key; a None option
    removed), validated."""
    import dataclasses

    fields = dict(overrides)
    options = dict(cfg.options)
    for k, v in (fields.pop("options", None) or {}).items():
        if v is None:
            options.pop(k, None)
        else:
            options[k] = v
    new = dataclasses.replace(cfg, **fields, options=options)
    new.validate()
    return new


#: the values a shape term is tried at (:func:`realisable`): 1 to 2^12
SHAPE_VALUES = tuple(range(1, 4097))


def realisable(adapter: "Adapter", term: str) -> dict[int, ModelConfig]:
    """The values of ``term`` the adapter's layer realises at its own state size S, each
    with its model config: every ``shape_overrides(term, v)`` for v a divisor of S (at most
    4096) whose built adapter validates, has state size S, and has ``term`` = v."""
    state, shape = adapter.state_size(), adapter.state_shape()
    if not state or not shape or term not in shape:
        return {}
    out: dict[int, ModelConfig] = {}
    for v in SHAPE_VALUES:
        if v > state:
            break
        overrides = adapter.shape_overrides(term, v) if state % v == 0 else None
        if overrides is None:
            continue
        try:
            cfg = with_overrides(adapter.cfg, overrides)
            other = type(adapter)(cfg)
            if other.state_size() == state and (other.state_shape() or {}).get(term) == v:
                out[v] = cfg
        except (ConfigError, ValueError, AssertionError):  # a layer's own refusal
            continue
    return out


def make_norm(kind: str | None, d_model: int, eps: float | None) -> nn.Module:
    """The wrapper's norm: RMSNorm, LayerNorm, or nothing (None)."""
    if kind is None:
        return nn.Identity()
    kw = {} if eps is None else {"eps": eps}
    return nn.RMSNorm(d_model, **kw) if kind == "rms" else nn.LayerNorm(d_model, **kw)


class PreNormResidual(nn.Module):
    """``x + mixer(norm(x))``: the harness's block, and how mamba-ssm and fla stack their layers."""

    def __init__(self, mixer: nn.Module, d_model: int, norm: str = "rms",
                 eps: float | None = WRAPPER_DEFAULTS["norm_eps"]):
        super().__init__()
        self.norm = make_norm(norm, d_model, eps)
        self.mixer = mixer

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        out = self.mixer(self.norm(x))
        if isinstance(out, tuple):  # fla layers return (output, attentions, cache)
            out = out[0]
        return x + out
