"""The adapter contract: how a sequence-mixing layer plugs into recallbench.

An adapter turns the ``model`` section of a config into Λ blocks, each mapping
``(B, L, D) -> (B, L, D)``, and says how big its recurrent state is.  The core
(:class:`recallbench.harness.module.RecallModule`) wraps them as::

    tokens (B, L) ─ embedding E (V, D) ─► blocks[0..Λ-1] ─► final_norm ─► logits = h Eᵀ (B, L, V)

Subclass, decorate with ``@ADAPTERS.register("name")`` (in-tree) or declare an
entry point in the ``recallbench.adapters`` group (third party)::

    class MyLayer(Adapter):
        def build_blocks(self, device):
            return nn.ModuleList(PreNormResidual(MyMixer(self.cfg.d_model), self.cfg.d_model)
                                 for _ in range(self.cfg.n_layers))
        def state_size(self):
            return self.cfg.n_layers * self.cfg.d_model * self.cfg.d_state

Heavy libraries are imported inside methods, never at module import, so that a
missing package shows up in ``availability()`` instead of breaking
``import recallbench``.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from recallbench.api.config import ModelConfig
from recallbench.api.errors import ConfigError
from recallbench.api.kernels import OWN


class Adapter:
    name: ClassVar[str] = "adapter"
    description: ClassVar[str] = ""
    library_class: ClassVar[str] = ""  # e.g. "mamba_ssm.Mamba", for the README table
    state_formula: ClassVar[str] = ""  # e.g. "Λ · expand · D · N"
    trainable: ClassVar[bool] = True  # False: evaluation only (fixed weights)
    # std of the (tied) embedding's normal init; None keeps torch's N(0, 1).  Library
    # models with a final norm use 0.02 (mamba-ssm's and fla's _init_weights), which keeps
    # the tied read-out's first logits O(1).
    embedding_std: ClassVar[float | None] = None
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
    def build_blocks(self, device: torch.device) -> nn.ModuleList:
        """Λ = cfg.n_layers blocks, each (B, L, D) -> (B, L, D)."""
        raise NotImplementedError

    def final_norm(self) -> nn.Module:
        """Applied after the last block, before the tied read-out (library models: a norm)."""
        return nn.Identity()

    def init_embedding(self, embedding: nn.Embedding, generator: torch.Generator) -> None:
        """Adapters with a designed embedding (fixed weights) set it here."""

    def state_size(self) -> int | None:
        """Scalars of recurrent state per sequence, all layers; None if it grows with L."""
        raise NotImplementedError

    def state_note(self) -> str:
        """How the state size is counted, for reports."""
        return self.state_formula


class PreNormResidual(nn.Module):
    """``x + mixer(norm(x))``: how mamba-ssm and fla stack their layers."""

    def __init__(self, mixer: nn.Module, d_model: int, norm: str = "rms", eps: float | None = None):
        super().__init__()
        kw = {} if eps is None else {"eps": eps}
        self.norm = nn.RMSNorm(d_model, **kw) if norm == "rms" else nn.LayerNorm(d_model, **kw)
        self.mixer = mixer

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        out = self.mixer(self.norm(x))
        if isinstance(out, tuple):  # fla layers return (output, attentions, cache)
            out = out[0]
        return x + out
