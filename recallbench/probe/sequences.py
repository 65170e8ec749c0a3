"""The circuit read on task sequences: the conv's copy-and-shift test and the state as a table.

Shapes: tokens x (B, L); ξ (B, L, W·V) the one-hot conv windows (tokens before position 0
are absent: zero blocks).

* Copy and shift (the paper's Fig. 15): M_vv[t, τ] = x_tᵀ G_vv ξ_τ should be the indicator
  [x_τ = x_t] (the value path copies the current token) and M_kq[t, τ] = ξ_τᵀ G_kq ξ_t the
  indicator [x_{τ-1} = x_t] (the key path shifts by one).  Each score is the cosine between
  the measured and the ideal matrix over the causal pairs τ ≤ t, averaged over sequences;
  the copy score reads the rows whose token x_t is a value (only values are read out).
* The state as a hash table (eq. 13–15, Fig. 3): the compressed table
  H'_t = P_out Σ_{τ≤t} x̂_τ B_τᵀ (D, N), decompressed on both sides,
  H''_t = Eᵀ H'_t Ẽ with Ẽ = S_C Ê_in^(W-1) (N, V) the hash of a token read as a query,
  should match the exact table H_t = Σ_{τ≤t} x_τ x_{τ-1}ᵀ on the rows of values and the
  columns of keys.  Reading H''_t at each query's key (argmax over the value tokens) gives
  ``state_decode_accuracy``.  The designed model hashes keys and queries with one Ẽ = F E;
  a trained one has two, and only the query side is safe: (S_C, P_out) → (−S_C, −P_out)
  leaves the model unchanged but would flip a table decompressed with the key hash S_B.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from recallbench.api.circuit import Circuit
from recallbench.probe.operators import g_kq, g_vv


def windows(x: torch.Tensor, V: int, W: int) -> torch.Tensor:
    """tokens (B, L) -> ξ (B, L, W·V) float64: block j one-hot of x_{t-(W-1)+j}, zero before 0."""
    one = F.one_hot(x, V).double()
    shifted = [F.pad(one, (0, 0, W - 1 - j, 0))[:, :x.shape[1]] for j in range(W)]
    return torch.cat(shifted, dim=-1)


def _cosine(m: torch.Tensor, ideal: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over the batch of cos(m, ideal) over the entries of ``mask``."""
    m, ideal = m * mask, ideal * mask
    num = (m * ideal).sum((1, 2))
    den = m.norm(dim=(1, 2)) * ideal.norm(dim=(1, 2))
    ok = den > 0
    return float((num[ok] / den[ok]).mean()) if ok.any() else 0.0


def copy_shift(c: Circuit, x: torch.Tensor, values: torch.Tensor
               ) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """The copy (M_vv) and shift (M_kq) matrices of each sequence and their cosine scores."""
    V, W = c.vocab_size, c.width
    xi = windows(x, V, W)  # (B, L, W·V)
    L = x.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()  # [t, τ]: τ ≤ t
    m_vv = g_vv(c)[x] @ xi.transpose(1, 2)  # (B, L, L): x_tᵀ G_vv ξ_τ
    m_kq = (xi @ g_kq(c) @ xi.transpose(1, 2)).transpose(1, 2)  # [t, τ] = ξ_τᵀ G_kq ξ_t
    same = (x[:, :, None] == x[:, None, :]).double()  # [t, τ]: x_τ = x_t
    prev = F.pad(x, (1, 0), value=-1)[:, :-1]  # x_{τ-1}, -1 before the start
    shift = (x[:, :, None] == prev[:, None, :]).double()  # [t, τ]: x_{τ-1} = x_t
    value_rows = torch.isin(x, values)[:, :, None]  # (B, L, 1): x_t is a value token
    scores = {"copy_score": _cosine(m_vv, same, causal & value_rows),
              "shift_score": _cosine(m_kq, shift, causal)}
    return scores, {"M_vv": m_vv[0], "M_kq": m_kq[0], "copy_ideal": same[0], "shift_ideal": shift[0]}


def state_table(c: Circuit, x: torch.Tensor, targets: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, ignore: int) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """H''_t against H_t at the last position, and decoding every query through H''_t."""
    V, W = c.vocab_size, c.width
    xh = windows(x, V, W) @ c.E_in.double().t()  # x̂ (B, L, D_in)
    Bk = xh @ c.S_B.double().t()  # B_t (B, L, N)
    query_hash = c.S_C.double() @ c.tap(W - 1).double()  # Ẽ (N, V)
    read = c.E.double().t() @ c.P_out.double()  # Eᵀ P_out (V, D_in)
    # H''_t e_{x_t} = Eᵀ P_out Σ_{τ≤t} x̂_τ ⟨B_τ, Ẽ e_{x_t}⟩ for every t at once
    L = x.shape[1]
    s = (query_hash.t()[x] @ Bk.transpose(1, 2)) * torch.ones(L, L, dtype=torch.float64).tril()
    decoded = (s @ xh) @ read.t()  # (B, L, V)
    asked = targets != ignore
    pred = values[decoded[..., values].argmax(-1)]
    accuracy = float((pred[asked] == targets[asked]).double().mean()) if asked.any() else 0.0
    # the tables at the last position
    H1 = torch.einsum("bld,bln->bdn", xh, Bk)  # Σ x̂_τ B_τᵀ (B, D_in, N)
    H2 = read @ H1 @ query_hash  # H'' (B, V, V)
    one = F.one_hot(x, V).double()
    exact = torch.einsum("blv,blk->bvk", one[:, 1:], one[:, :-1])  # Σ x_τ x_{τ-1}ᵀ
    sub = torch.ones(1, len(values), len(keys), dtype=torch.bool)
    cos = _cosine(H2[:, values][:, :, keys], exact[:, values][:, :, keys], sub)
    compressed = c.P_out.double() @ H1[0]  # H' (D, N)
    return ({"state_cosine": cos, "state_decode_accuracy": accuracy},
            {"H": exact[0], "H_compressed": compressed, "H_decoded": H2[0]})
