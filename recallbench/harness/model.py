"""The recall model: embedding → Λ adapter blocks → tied read-out.

Shapes (B batch, L length, D = d_model, V = vocab_size)::

    tokens  (B, L) long
    h = E[tokens]            (B, L, D)     E: nn.Embedding(V, D), the paper's E
    h = block_l(h), l < Λ    (B, L, D)
    h = final_norm(h)        (B, L, D)
    logits = h Eᵀ            (B, L, V)     tied output: the paper reads out through Eᵀ

The final norm and the read-out act on each position alone, so :meth:`RecallModel.logits_at`
computes them only where a question is asked (a quarter of the positions for MQAR at
L = 4·N_f; at V = 512 the read-out is most of a small model's step).

This is plain PyTorch so that benchmarks, ensembles and the pytest plugin can
use it without Lightning; :mod:`recallbench.harness.module` wraps it for training.
"""
from __future__ import annotations

import torch
from torch import nn

from recallbench.api.adapter import Adapter


class RecallModel(nn.Module):
    def __init__(self, adapter: Adapter, vocab_size: int, device: torch.device | str = "cpu",
                 generator: torch.Generator | None = None):
        super().__init__()
        cfg = adapter.cfg
        self.embedding = nn.Embedding(vocab_size, cfg.d_model)
        if adapter.embedding_std is not None:
            with torch.no_grad():
                self.embedding.weight.normal_(0.0, adapter.embedding_std, generator=generator)
        adapter.init_embedding(self.embedding, generator or torch.Generator().manual_seed(0))
        self.blocks = adapter.build_blocks(torch.device(device))
        self.norm = adapter.final_norm()
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
