"""The recall model: embedding → Λ blocks around the adapter's mixers → final norm → tied read-out.

Shapes (B batch, L length, D = d_model, V = vocab_size)::

    tokens  (B, L) long
    h = E[tokens]                 (B, L, D)   E: nn.Embedding(V, D), the paper's E, N(0, 0.02²)
    h = h + mixer_l(norm_l(h))    (B, L, D)   l < Λ, the pre-norm residual block (RMSNorm)
    h = final_norm(h)             (B, L, D)   RMSNorm
    logits = h Eᵀ                 (B, L, V)   tied output: the paper reads out through Eᵀ

The harness owns this wrapper, the same for every adapter, so that recall compares the
mixers alone; an adapter changes a part of it only by declaring it
(:attr:`recallbench.api.adapter.Adapter.wrapper`), and :func:`resolve_wrapper` says what
was built, for the record.

The final norm and the read-out act on each position alone, so :meth:`RecallModel.logits_at`
computes them only where a question is asked (a quarter of the positions for MQAR at
L = 4·N_f; at V = 512 the read-out is most of a small model's step).

This is plain PyTorch so that benchmarks, ensembles and the pytest plugin can
use it without Lightning; :mod:`recallbench.harness.module` wraps it for training.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from recallbench.api.errors import ConfigError
from recallbench.api.adapter import (WRAPPER_DEFAULTS, Adapter, PreNormResidual, check_wrapper,
                                     make_norm)

ADAPTER = "adapter"  # a wrapper part the adapter builds itself (an older hook)


def _own(adapter: Adapter, attr: str) -> bool:
    """Whether a subclass defines ``attr`` (an older contract's hook)."""
    return any(attr in vars(cls) for cls in type(adapter).__mro__ if cls is not Adapter
               and issubclass(cls, Adapter))


def resolve_wrapper(adapter: Adapter) -> dict[str, Any]:
    """What the harness builds around this adapter's mixers: the defaults, the older hooks
    it implements (``build_blocks``, ``final_norm()``, ``embedding_std``,
    ``init_embedding``), then its declared ``wrapper``; ``overrides`` lists the keys that
    differ from the defaults.  Parts that are not built are None."""
    out = dict(WRAPPER_DEFAULTS)
    if _own(adapter, "embedding_std"):
        out["embedding_std"] = check_wrapper(adapter.name, {"embedding_std": adapter.embedding_std}
                                             )["embedding_std"]
    out.update(adapter.wrapper)
    if _own(adapter, "build_blocks"):
        out["block"] = ADAPTER
    if _own(adapter, "final_norm"):
        out["final_norm"] = ADAPTER
    out["embedding_init"] = ADAPTER if _own(adapter, "init_embedding") else None
    out["overrides"] = sorted(k for k in out if out[k] != WRAPPER_DEFAULTS.get(k))
    if out["block"] != "prenorm":
        out["norm"] = None  # no block norm is built
    if out["norm"] is None and out["final_norm"] in (None, ADAPTER):
        out["norm_eps"] = None  # nor any norm of the harness's
    return out


def build_blocks(adapter: Adapter, wrapper: dict[str, Any], device: torch.device) -> nn.ModuleList:
    """The Λ blocks: each mixer in the declared block (or the adapter's own blocks)."""
    if wrapper["block"] == ADAPTER:
        return adapter.build_blocks(device)
    d, mixers = adapter.cfg.d_model, [adapter.build_mixer(i, device)
                                      for i in range(adapter.cfg.n_layers)]
    for mixer in mixers:
        if not isinstance(mixer, nn.Module):
            raise ConfigError(f"adapter {adapter.name}: build_mixer returned "
                            f"{type(mixer).__name__}, expected an nn.Module")
    if wrapper["block"] == "prenorm":
        mixers = [PreNormResidual(m, d, wrapper["norm"], wrapper["norm_eps"]) for m in mixers]
    return nn.ModuleList(mixers).to(device)


class RecallModel(nn.Module):
    def __init__(self, adapter: Adapter, vocab_size: int, device: torch.device | str = "cpu",
                 generator: torch.Generator | None = None):
        super().__init__()
        self.wrapper = resolve_wrapper(adapter)
        d = adapter.cfg.d_model
        self.embedding = nn.Embedding(vocab_size, d)
        if self.wrapper["embedding_std"] is not None:
            with torch.no_grad():
                self.embedding.weight.normal_(0.0, self.wrapper["embedding_std"], generator=generator)
        adapter.init_embedding(self.embedding, generator or torch.Generator().manual_seed(0))
        self.blocks = build_blocks(adapter, self.wrapper, torch.device(device))
        final = self.wrapper["final_norm"]
        self.norm = adapter.final_norm() if final == ADAPTER else \
            make_norm(final, d, self.wrapper["norm_eps"])
        if not adapter.trainable:
            self.requires_grad_(False)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) long -> h (B, L, D), the last block's output (before the norm)."""
        h = self.embedding(tokens)
        for block in self.blocks:
            h = block(h)
        return h

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """h (..., D) -> logits (..., V): the final norm, then the tied read-out Eᵀ.

        Eᵀ is copied to a contiguous (D, V) matrix first (D·V floats): then both gradient
        matmuls read the big (Q, V) gradient of the logits row by row, where the transposed
        view ``E.t()`` sends one of the gradients down a strided path.  On CPU that speeds
        up the read-out at small D; ``python benchmarks/bench_train.py`` §6 measures the
        gain at D = 4, 16 and 64.
        """
        return self.norm(h) @ self.embedding.weight.t().contiguous()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) long -> logits (B, L, V)."""
        return self.readout(self.hidden(tokens))

    def logits_at(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """tokens (B, L), mask (B, L) bool -> logits (Q, V) at the Q positions of ``mask``:
        ``forward(tokens)[mask]``, without the read-out of the other positions."""
        return self.readout(self.hidden(tokens)[mask])
