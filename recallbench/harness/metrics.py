"""Recall as a torchmetrics ``Metric``: counts first, ratios derived.

The paper's accuracy is micro-averaged over every query of every sequence
(``correct / total``); top-k (listwise) accuracy counts a query as recalled when
the right value is among the k highest logits.  The raw counts are kept so that
binomial confidence intervals can be computed later.
"""
from __future__ import annotations

import torch
from torchmetrics import Metric

from recallbench.api.task import IGNORE


def recall_counts(logits: torch.Tensor, answers: torch.Tensor, top_k: int) -> tuple[int, int, int]:
    """(correct, correct in the top k, total) of logits (Q, V) against answers (Q,), as
    :class:`RecallAccuracy` counts them, for the run's own validation (plain ints: no
    Metric state to sync or reset)."""
    k = min(top_k, logits.shape[-1])
    hits = logits.topk(k, dim=-1).indices == answers[:, None]  # column 0: the argmax
    return int(hits[:, 0].sum()), int(hits.any(dim=-1).sum()), answers.numel()


class RecallAccuracy(Metric):
    full_state_update = False
    higher_is_better = True

    def __init__(self, top_k: int = 5, **kwargs):
        super().__init__(**kwargs)
        self.top_k = top_k
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("correct_topk", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits (B, L, V), targets (B, L) with IGNORE where nothing is asked."""
        mask = targets != IGNORE
        picked = logits[mask]  # (Q, V)
        answer = targets[mask]  # (Q,)
        k = min(self.top_k, picked.shape[-1])
        top = picked.topk(k, dim=-1).indices  # (Q, k), top[:, 0] is the argmax
        hits = top == answer[:, None]
        self.correct += hits[:, 0].sum()
        self.correct_topk += hits.any(dim=-1).sum()
        self.total += answer.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        total = self.total.clamp_min(1).double()
        return {"accuracy": self.correct / total, "accuracy_topk": self.correct_topk / total,
                "correct": self.correct, "correct_topk": self.correct_topk, "total": self.total}
