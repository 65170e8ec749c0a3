"""The probe contract: a one-layer linear recall circuit, in the paper's symbols (§3, eq. 10).

An adapter whose trained model is such a circuit returns one from ``Adapter.circuit(model)``;
:mod:`recallbench.probe` computes the invariant operators and the mechanistic scores from it
and needs nothing else about the adapter.  Glossary (paper → field; V tokens, D width,
D_in inner channels, N state, W conv width)::

    E      (D, V)      token embedding, one column per token (the tied read-out is Eᵀ)
    Ê_in   (D_in, W·V) ``E_in``: x̂_t = Ê_in ξ_t, with ξ_t = (x_{t-W+1}; …; x_{t-1}; x_t) the
                       one-hot tokens of the conv window stacked oldest first (block j of Ê_in
                       is diag(W_conv^j) P_in E)
    S_B    (N, D_in)   the key (input) projection: B_t = S_B x̂_t
    S_C    (N, D_in)   the query (output) projection: C_t = S_C x̂_t
    P_out  (D, D_in)   the output projection: y_t = P_out Σ_{τ≤t} x̂_τ ⟨B_τ, C_t⟩

The model the circuit describes computes ``logits_t = Eᵀ y_t``: no gate, no norm, no
residual.  An adapter returns a circuit only for models that are exactly this.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Circuit:
    E: torch.Tensor
    E_in: torch.Tensor
    S_B: torch.Tensor
    S_C: torch.Tensor
    P_out: torch.Tensor

    def __post_init__(self):
        D, V = self.E.shape
        D_in, WV = self.E_in.shape
        N = self.S_B.shape[0]
        if WV % V or self.S_B.shape != (N, D_in) or self.S_C.shape != (N, D_in) \
                or self.P_out.shape != (D, D_in):
            raise ValueError(
                f"circuit shapes disagree: E {tuple(self.E.shape)}, E_in {tuple(self.E_in.shape)}, "
                f"S_B {tuple(self.S_B.shape)}, S_C {tuple(self.S_C.shape)}, "
                f"P_out {tuple(self.P_out.shape)}")

    @property
    def vocab_size(self) -> int:
        return self.E.shape[1]

    @property
    def width(self) -> int:
        """W, the conv window: ξ_t holds the tokens x_{t-W+1} … x_t."""
        return self.E_in.shape[1] // self.vocab_size

    def tap(self, j: int) -> torch.Tensor:
        """Block j of Ê_in (D_in, V): how token x_{t-(W-1)+j} enters x̂_t (j = W-1: x_t)."""
        V = self.vocab_size
        return self.E_in[:, j * V:(j + 1) * V]
