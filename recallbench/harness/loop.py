"""A bare PyTorch training loop, without Lightning.

Used where Lightning's machinery is not wanted: the adapters' smoke tests,
benchmarks that measure Lightning's overhead against it, and quick checks::

    losses = train_steps(model, task, steps=50, batch_size=32, lr=3e-3, seed=0)
"""
from __future__ import annotations

import torch
from torch import nn

from recallbench.api.task import IGNORE, Task


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0):
    """Cross-entropy over labelled positions only. logits (B, L, V), targets (B, L)."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                       ignore_index=IGNORE, label_smoothing=label_smoothing)


def asked(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (Q, V) and answers (Q,) at the Q positions that ask a question
    (``targets != IGNORE``).  A model with ``logits_at`` (as
    :class:`recallbench.harness.model.RecallModel`) reads out only those positions; any other is
    read out everywhere and then selected."""
    mask = targets != IGNORE
    logits = model.logits_at(inputs, mask) if hasattr(model, "logits_at") else model(inputs)[mask]
    return logits, targets[mask]


def labelled_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """:func:`masked_loss` of ``model(inputs)``, computed from :func:`asked` (a quarter of
    the read-out for MQAR when the model has ``logits_at``)."""
    return nn.functional.cross_entropy(*asked(model, inputs, targets),
                                       label_smoothing=label_smoothing)


def train_steps(model: nn.Module, task: Task, steps: int, batch_size: int = 32,
                lr: float = 3e-3, seed: int = 0, device: str | torch.device = "cpu",
                grad_clip: float | None = 1.0, full_readout: bool = False) -> list[float]:
    """AdamW on fresh batches; returns the loss of every step.  ``full_readout``: read out
    every position and mask the loss afterwards (the same loss, slower; for benchmarks)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(steps):
        inputs, targets = task.sample(batch_size, gen)
        inputs, targets = inputs.to(device), targets.to(device)
        loss = (masked_loss(model(inputs), targets) if full_readout
                else labelled_loss(model, inputs, targets))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        losses.append(loss.item())
    return losses
