"""The delta rule and the gated delta rule in chunked (WY / UT-transform) pure-torch form.

fla's naive references (:mod:`~recallbench.adapters.cpu.fla_kernels`) step through time in
a Python loop: a few small autograd ops per step, so a training step's cost grows with
the sequence length in interpreter overhead.  Here the sequence is cut into chunks of C
steps; within a chunk the recurrence

    S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t   (S: K × V)

is solved at once (Yang et al. 2024, "Parallelizing linear transformers with the delta
rule over sequence length").  With γ the within-chunk cumulative log decay (γ_i = Σ_{j≤i}
log α_j; the delta rule has α = 1) and Γ_ij = exp(γ_i − γ_j) for j ≤ i:

    A = strict_tril(diag(β) (K Kᵀ ⊙ Γ)),   [U | W] = (I + A)⁻¹ [diag(β) V | diag(β e^γ) K]
    V' = U − W S,   O = (Q ⊙ e^γ) S + tril(Q Kᵀ ⊙ Γ) V',
    S ← e^{γ_C} S + (K ⊙ e^{γ_C − γ})ᵀ V'

(``torch.linalg.solve_triangular`` with a unit diagonal does the inverse).  Only the
state is carried across chunks, so the Python loop runs T / C times instead of T times.
A sequence whose length is no multiple of C is padded with k = v = β = log α = 0 steps,
which leave the state unchanged.  Computed in float32 (float64 inputs stay float64).

The functions take the kernels' signatures and flags; the tests compare them, values and
gradients, with fla's recurrent references and with a float64 run.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import fla_kernels
from .fla_kernels import _l2norm, _t_state, no_varlen

CHUNK = 64  # fastest at L = 64 (benchmarks/bench_fla_chunked_delta.py)


def _pad_time(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Pad dimension 2 of (B, H, T[, D]) with ``pad`` zeros at the end."""
    if not pad:
        return x
    return F.pad(x, (0, 0, 0, pad) if x.dim() == 4 else (0, pad))


def chunked_delta(q, k, v, beta, g, scale: float, initial_state=None, output_final_state=False,
                  chunk: int = CHUNK):
    """The chunked recurrence on (B, H, T, K|V) tensors; beta, g (B, H, T), g = log α or None.

    Returns o (B, H, T, V) and the final state (B, H, K, V) (or None).
    """
    dtype = torch.promote_types(q.dtype, torch.float32)
    B, H, T, _ = k.shape
    C = min(chunk, T)
    pad = -T % C
    N = (T + pad) // C

    def chunks(x):  # (B, H, T[, D]) -> (B, H, N, C[, D]), padded
        x = _pad_time(x.to(dtype), pad)
        return x.reshape(B, H, N, C, -1) if x.dim() == 4 else x.reshape(B, H, N, C)

    S = None if initial_state is None else initial_state.to(dtype)
    qk, Tb, q, k_out, k_in, chunk_decay = _within_chunks(
        chunks(q) * scale, chunks(k), chunks(beta), None if g is None else chunks(g))
    v = chunks(v)
    if S is None and N == 1:  # no state enters: O = tril(Q Kᵀ ⊙ Γ) (I + A)⁻¹ diag(β) V
        o = ((qk @ Tb) @ v).squeeze(2)  # squeeze, not [:, :, 0]: no zero-filled gradient
        ht = (k_out.transpose(-1, -2) @ (Tb @ v)).squeeze(2) if output_final_state else None
        return (o[:, :, :T] if pad else o), ht
    U, W = Tb @ v, Tb @ k_in
    outs = []
    # unbind, not indexing: one backward stack instead of a zero-filled full-size gradient per chunk
    steps = zip(*(x.unbind(2) if x is not None else [None] * N for x in (qk, U, W, q, k_out, chunk_decay)))
    for n, (qk_n, u_n, w_n, q_n, k_n, decay_n) in enumerate(steps):  # only the state crosses chunks
        if S is None:
            u = u_n
            outs.append(qk_n @ u)
        else:
            u = u_n - w_n @ S
            outs.append(qk_n @ u + q_n @ S)
        if n + 1 < N or output_final_state:
            kv = k_n.transpose(-1, -2) @ u
            if S is None:
                S = kv
            else:
                S = (S if decay_n is None else S * decay_n) + kv
    o = torch.stack(outs, 2).reshape(B, H, N * C, -1)
    return (o[:, :, :T] if pad else o), (S if output_final_state else None)


def _within_chunks(q, k, beta, g):
    """Everything that needs no state, for all chunks at once ((B, H, N, C, ·) tensors).

    Returns tril(Q Kᵀ ⊙ Γ), (I + A)⁻¹ diag(β) (U and W are it times V and K ⊙ e^γ), the
    queries and keys as the state sees them (Q ⊙ e^γ, K ⊙ e^{γ_C − γ}), K ⊙ e^γ and e^{γ_C}
    (None without decay).
    """
    A = (k * beta[..., None]) @ k.transpose(-1, -2)
    qk = q @ k.transpose(-1, -2)
    if g is None:
        qk, k_out, k_in, chunk_decay = qk.tril(), k, k, None
    else:
        gc = g.cumsum(-1)  # γ
        C = gc.shape[-1]
        incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        decay = (gc[..., :, None] - gc[..., None, :]).masked_fill(~incl, float("-inf")).exp()  # Γ
        A, qk = A * decay, qk * decay
        eg = gc.exp()[..., None]
        q, k_in, k_out = q * eg, k * eg, k * (gc[..., -1:] - gc).exp()[..., None]
        chunk_decay = gc[..., -1].exp()[..., None, None]  # e^{γ_C}, (B, H, N, 1, 1)
    # (I + A) Tb = diag(β) as Tbᵀ (I + A)ᵀ = diag(β): a unit triangular solve that reads (and
    # differentiates) only A's strict lower triangle; in this transposed form A's row-major
    # storage is already LAPACK's column-major layout (no transposing copy)
    Tb = torch.linalg.solve_triangular(A.mT, torch.diag_embed(beta), upper=True, left=False,
                                       unitriangular=True).mT
    return qk, Tb, q, k_out, k_in, chunk_decay


def delta_rule(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk=CHUNK, **_):
    """chunk_delta_rule / fused_recurrent_delta_rule in chunked form. (B, T, H, K|V).

    A per-value-channel beta (B, T, H, V) decouples the value channels; it runs through
    fla's recurrent reference (:func:`fla_kernels.delta_rule`) instead.
    """
    no_varlen(cu_seqlens, "delta_rule")
    if beta is not None and beta.dim() == v.dim():
        return fla_kernels.delta_rule(q, k, v, beta, scale, initial_state, output_final_state,
                                      use_qk_l2norm_in_kernel)
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if beta is None:
        beta = torch.ones_like(q[..., 0])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, ht = chunked_delta(*(x.transpose(1, 2) for x in (q, k, v, beta)), None, scale,
                          initial_state, output_final_state, chunk)
    return o.transpose(1, 2).to(q.dtype), ht


def gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                     state_v_first=False, chunk=CHUNK, **flags):
    """chunk_gated_delta_rule / fused_recurrent_gated_delta_rule in chunked form. (B, T, H|HV, K|V).

    The kernel flags (l2norm, beta sigmoid, gate, grouped value heads) are applied by
    :func:`fla_kernels.gated_delta_inputs`, as for the recurrent reference.
    """
    q, k, beta, g = fla_kernels.gated_delta_inputs(q, k, v, g, beta, **flags)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, ht = chunked_delta(*(x.transpose(1, 2) for x in (q, k, v, beta, g)), scale,
                          _t_state(initial_state, state_v_first), output_final_state, chunk)
    return o.transpose(1, 2).to(v.dtype), _t_state(ht, state_v_first)
