"""Causal linear attention with a token shift, the zoo's one layer.

Its recurrent state is S_t = S_{t-1} + k_t v_tᵀ (N × D per sequence, N = ``d_state``), read
out as y_t = q_tᵀ S_t.  The key comes from the previous token and the value from the
current one, so the state binds each token to the one after it (what associative recall
asks); :meth:`TinyLinearAttention.forward` computes the recurrence in parallel with a
causal mask.
"""
from __future__ import annotations

import torch
from torch import nn


class TinyLinearAttention(nn.Module):
    """(B, L, D) -> (B, L, D); queries and keys of width ``d_state``."""

    def __init__(self, d_model: int, d_state: int):
        super().__init__()
        self.q = nn.Linear(d_model, d_state, bias=False)
        self.k = nn.Linear(d_model, d_state, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        previous = nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]  # x_{t-1}, zeros at t = 0
        q, k, v = self.q(x), self.k(previous), self.v(x)
        scores = torch.tril(q @ k.transpose(1, 2))  # (B, L, L): position t sees s <= t
        return self.out(scores @ v)
