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
#: the default ``chunk_size``: auto uses the parallel form up to this many tokens
CHUNK_SIZE = 64
#: auto's chunk length beyond ``chunk_size`` tokens: 16 for a state of N·P ≤ 512 per head, 32
#: above (at most ``chunk_size``)
SMALL_CHUNK, SMALL_STATE, LARGE_CHUNK = 16, 512, 32


def chunk_length(n: int, p: int) -> int:
    """Auto's chunk length for a state of N × P per head: 16 tokens for N·P ≤ 512
    (linear-mamba at D = 32, N ≤ 8, P = 64), 32 beyond.  The state products each chunk adds
    (N × P, and a prefix sum over chunks) favour longer chunks as the state grows; the
    intra-chunk products (c × c) favour shorter ones.  ``python benchmarks/bench_chunk.py``
    times the forms at a capacity card's shapes: at N = 8, P = 64 and L = 104 to 256, chunks
    of 16 took 1.4 to 1.7 times less than the former chunks of 64."""
    return SMALL_CHUNK if n * p <= SMALL_STATE else LARGE_CHUNK


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            chunk_size: int = CHUNK_SIZE, form: str = "auto") -> torch.Tensor:
    """``form``: auto, parallel, chunked (chunks of ``chunk_size``), or recurrent (the slow
    reference).  Auto is the parallel form up to ``chunk_size`` tokens and, beyond, the
    chunked form in chunks of ``min(chunk_size, chunk_length(N, P))``.  The forms give the
    same sums in another order."""
    L = q.shape[-2]
    if form == "recurrent":
        return causal_linear_attention_recurrent(q, k, v)
    if form == "chunked":
        return _chunked(q, k, v, chunk_size)
    if form == "auto" and L > chunk_size:
        return _chunked(q, k, v, min(chunk_size, chunk_length(q.shape[-1], v.shape[-1])))
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
