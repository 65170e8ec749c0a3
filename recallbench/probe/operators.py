"""The invariant operators of a recall circuit (the paper's eq. 11) and their block structure.

For a :class:`~recallbench.api.circuit.Circuit` (V tokens, conv window W)::

    Π_v,in = Ê_in (D_in, W·V)      Π_v,out = Eᵀ P_out (V, D_in)
    Π_k,in = S_B Ê_in (N, W·V)     Π_q,in = S_C Ê_in (N, W·V)
    G_vv = Π_v,out Π_v,in   (V, W·V)      G_kq = Π_k,inᵀ Π_q,in   (W·V, W·V)

so that ``logits_t = Σ_{τ≤t} G_vv ξ_τ · (ξ_τᵀ G_kq ξ_t)``.  Both are unchanged by any
orthogonal re-mixing of the hidden coordinates (P_in → P_in Q, E → Qᵀ E), which is why
they, and not the weights, can be compared with the designed construction (eq. 12): there
G_vv reads only the current token x_τ (its last block, the identity on values) and G_kq
pairs only the stored key x_{τ-1} (block W-2 on the key side) with the query x_t (block
W-1 on the query side).  A model without the previous-token tap (d_conv = 1) has no such
block: its key-query score is 0 by construction.

Example: the designed model at D = N = V (Thm 3.1, E = I) has both block fractions and
both identity scores equal to 1.
"""
from __future__ import annotations

import torch

from recallbench.api.circuit import Circuit


def g_vv(c: Circuit) -> torch.Tensor:
    """G_vv = Eᵀ P_out Ê_in, (V, W·V), in float64."""
    return c.E.double().t() @ c.P_out.double() @ c.E_in.double()


def g_kq(c: Circuit) -> torch.Tensor:
    """G_kq = (S_B Ê_in)ᵀ (S_C Ê_in), (W·V, W·V), in float64."""
    E_in = c.E_in.double()
    return (c.S_B.double() @ E_in).t() @ (c.S_C.double() @ E_in)


def _block(G: torch.Tensor, V: int, row: int | None, col: int) -> torch.Tensor:
    rows = G if row is None else G[row * V:(row + 1) * V]
    return rows[:, col * V:(col + 1) * V]


def block_fraction(part: torch.Tensor, whole: torch.Tensor) -> float:
    """‖part‖²_F / ‖whole‖²_F: 1 when all of an operator's weight sits in the block."""
    total = whole.square().sum()
    return float(part.square().sum() / total) if total > 0 else 0.0


def identity_score(block: torch.Tensor, tokens: torch.Tensor) -> float:
    """Cosine between the block restricted to ``tokens`` (rows and columns) and the identity:
    tr(B) / (‖B‖_F √n), 1 for a multiple of I, about 0 for a random matrix."""
    sub = block[tokens][:, tokens]
    norm = sub.norm()
    return float(sub.diagonal().sum() / (norm * len(tokens) ** 0.5)) if norm > 0 else 0.0


def operator_scores(c: Circuit, keys: torch.Tensor, values: torch.Tensor) -> dict[str, float | None]:
    """How close G_vv and G_kq are to the designed construction's blocks.

    ``keys`` / ``values``: the token ids the task asks about (for the identity scores).
    Returns ``vv_block_fraction`` (weight of G_vv on the current token), ``kq_block_fraction``
    (weight of G_kq on stored key × query), and the identity scores of those two blocks on
    the value tokens and on the key tokens.  With W = 1 the key-query entries are 0.
    """
    V, W = c.vocab_size, c.width
    Gvv, Gkq = g_vv(c), g_kq(c)
    vv = _block(Gvv, V, None, W - 1)
    out = {"vv_block_fraction": block_fraction(vv, Gvv),
           "vv_identity": identity_score(vv, values)}
    if W < 2:
        out.update(kq_block_fraction=0.0, kq_identity=0.0)
    else:
        kq = _block(Gkq, V, W - 2, W - 1)
        out.update(kq_block_fraction=block_fraction(kq, Gkq), kq_identity=identity_score(kq, keys))
    return out
