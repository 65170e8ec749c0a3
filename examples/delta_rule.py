"""A delta-rule layer written as a bare module, for ``recallbench capacity --factory``.

    recallbench capacity --factory examples.delta_rule:make_mixer --state-size 256 \\
        --d-model 32 --d-state 4 --out cards/delta-k32

One head; the key of step t comes from the previous token (a width-2 causal shift), the
query and the value from the current one; keys and queries are L2-normalised and the write
strength β_t = sigmoid(w·x_t).  The state W ∈ R^{d_v × d_k} follows the delta rule
(Widrow-Hoff; Schlag et al. 2021, "Linear Transformers Are Secretly Fast Weight
Programmers"):

    W_t = W_{t−1} + β_t (v_t − W_{t−1} k_t) k_tᵀ,    y_t = W_t q_t

so S = d_k·d_v scalars per sequence (256 at ``key_dim`` 32, ``value_dim`` 8, or at 4 and
64).  Shapes: x (B, L, D) → k, q (B, L, d_k), v (B, L, d_v), β (B, L, 1) → y (B, L, D).
A step-by-step loop: slow at long L, exact, and independent of any library's kernel.
fla's DeltaNet at the same S = 256 and each of these shapes (keys 4, 8, 16, 32; values
64 down to 8) is ``recallbench capacity --adapter deltanet --d-model 32 --d-state 4
--shapes key=4,8,16,32``, one card per shape.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DeltaRule(nn.Module):
    """The layer of the module docstring."""

    def __init__(self, d_model: int, key_dim: int = 32, value_dim: int = 8):
        super().__init__()
        self.key_dim, self.value_dim = key_dim, value_dim
        self.k = nn.Linear(d_model, key_dim, bias=False)
        self.q = nn.Linear(d_model, key_dim, bias=False)
        self.v = nn.Linear(d_model, value_dim, bias=False)
        self.beta = nn.Linear(d_model, 1)
        self.out = nn.Linear(value_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        prev = F.pad(x, (0, 0, 1, 0))[:, :length]  # x_{t-1}, zeros at t = 0
        k = F.normalize(self.k(prev), dim=-1)                      # (B, L, d_k)
        q = F.normalize(self.q(x), dim=-1)                         # (B, L, d_k)
        v = self.v(x)                                              # (B, L, d_v)
        beta = torch.sigmoid(self.beta(x))                         # (B, L, 1)
        w = x.new_zeros(b, self.value_dim, self.key_dim)           # (B, d_v, d_k)
        ys = []
        for t in range(length):
            kt = k[:, t].unsqueeze(-1)                             # (B, d_k, 1)
            err = v[:, t].unsqueeze(-1) - w @ kt                   # (B, d_v, 1)
            w = w + beta[:, t].unsqueeze(-1) * err @ kt.transpose(1, 2)
            ys.append((w @ q[:, t].unsqueeze(-1)).squeeze(-1))     # (B, d_v)
        return self.out(torch.stack(ys, dim=1))                    # (B, L, D)


def make_mixer(d_model: int, key_dim: int = 32, value_dim: int = 8) -> DeltaRule:
    """One layer's mixer: keys 32 and values 8 (S = 256) unless told otherwise."""
    return DeltaRule(d_model, key_dim, value_dim)


def make_mixer_k4(d_model: int) -> DeltaRule:
    """The same S = 256 with keys 4 and values 64 (fla's deltanet shape at d_state 4)."""
    return DeltaRule(d_model, 4, 64)
