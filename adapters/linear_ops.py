"""Causal linear attention without decay: the op behind the simplified linear Mamba.

    y_t = Σ_{τ ≤ t} ⟨k_τ, q_t⟩ v_τ                      (per head)

which is the recurrence h_t = h_{t-1} + v_t k_tᵀ, y_t = h_t q_t of the paper's
Alg. 1 with A = I (k = B, q = C, v = x̂).  Three forms, one result:

- :func:`causal_linear_attention` — the fast path: a causal masked matmul for
  short sequences, chunked (intra-chunk masked matmul + inter-chunk prefix
  sums of the states) for long ones.  No Python loop over time.
- :func:`causal_linear_attention_recurrent` — the explicit slow reference, one
  state update per step, for tests and benchmarks.

Shapes: q, k (B, M, L, N); v (B, M, L, P); result (B, M, L, P).
"""
from __future__ import annotations

import torch


FORMS = ("auto", "parallel", "chunked", "recurrent")
#: default chunk length: auto uses the parallel form up to it, chunks of it beyond
#: (``python benchmarks/bench_train.py`` §2 times the parallel and chunked forms)
CHUNK_SIZE = 64


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            chunk_size: int = CHUNK_SIZE, form: str = "auto") -> torch.Tensor:
    """``form``: auto (parallel up to ``chunk_size`` tokens, chunked beyond), parallel,
    chunked, or recurrent (the slow reference)."""
    L = q.shape[-2]
    if form == "recurrent":
        return causal_linear_attention_recurrent(q, k, v)
    if form == "chunked" or (form == "auto" and L > chunk_size):
        return _chunked(q, k, v, chunk_size)
    scores = q @ k.transpose(-1, -2)  # (B, M, L, L): ⟨k_τ, q_t⟩
    return scores.tril() @ v  # causal: keep τ ≤ t (one pass; masked_fill copies, then fills)


def _chunked(q, k, v, c):
    B, M, L, N = q.shape
    P = v.shape[-1]
    pad = (-L) % c
    if pad:
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    n = (L + pad) // c
    qc, kc, vc = (t.reshape(B, M, n, c, t.shape[-1]) for t in (q, k, v))
    intra = (qc @ kc.transpose(-1, -2)).tril() @ vc  # (B, M, n, c, P)
    chunk_state = kc.transpose(-1, -2) @ vc  # (B, M, n, N, P): Σ_τ k_τ v_τᵀ within a chunk
    before = chunk_state.cumsum(dim=2) - chunk_state  # state entering each chunk
    inter = qc @ before  # (B, M, n, c, P)
    out = (intra + inter).reshape(B, M, n * c, P)
    return out[:, :, :L]


def causal_linear_attention_recurrent(q, k, v):
    """Step-by-step reference: h_t = h_{t-1} + k_t v_tᵀ (N × P per head), y_t = h_tᵀ q_t."""
    B, M, L, N = q.shape
    h = q.new_zeros(B, M, N, v.shape[-1])
    out = []
    for t in range(L):
        h = h + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, :, None] * h).sum(dim=-2))
    return torch.stack(out, dim=2)
