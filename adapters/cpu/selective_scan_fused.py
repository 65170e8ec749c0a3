"""mamba-ssm's selective scan for real A on a CPU: one autograd function, time loop in cache.

:func:`selective_scan_cpu` stands in for ``selective_scan_fn`` (mamba-ssm's CUDA extension)
with its signature and its arithmetic: Δ = softplus(Δ + bias), then per channel d and state n

    x_t = exp(Δ_t A) ⊙ x_{t−1} + Δ_t u_t B_t,    y_t = ⟨x_t, C_t⟩ + D u_t,    out = y · SiLU(z).

Mamba-1's decay exp(Δ_t A) has one value per (channel, state): the tensors of the scan are
(L, batch, N, D), and no matrix form helps.  The chunked form that Mamba-2 uses (segment
sums of Δ·A inside chunks of length c, a quadratic intra-chunk product, a short loop over
chunks) does c times the work of the recurrence here, because its (c × c) decay matrix is
per (channel, state) too.  So the recurrence runs as it is, like the CUDA kernel:

* Layout (L, batch, N, D), D innermost: step t is one contiguous slice, and every
  elementwise product runs along contiguous rows of D (torch vectorizes along the
  innermost axis; N is short).  u, Δ, z are made time-major once.
* The forward builds each step's decay and input and adds the carried state in one pass
  over t, while that step's slices are in cache; it keeps the decays and the states.
* The backward is written out: one reverse loop for the state gradient
  g_t = C_t ∂y_t + exp(Δ_{t+1} A) g_{t+1}, which also reduces ∂/∂(Δ_t A) to the Δ and A
  gradients step by step; the B, C and Δ·u gradients are one batched product each over all
  (t, batch).  No per-step autograd graph, no O(L²) indexing gradients.

B and C shared by all channels (what ``Mamba`` passes) go to the compiled loop of
:mod:`selective_scan_compiled` (the same recurrence in C++, D and the z gate fused in) where
it builds; the torch scan below serves the other shapes of B and C, and everything when
there is no compiler.  Complex A is sent to mamba-ssm's ``selective_scan_ref`` unchanged.  Inputs in float64 are
scanned in float64 (the reference casts to float32), which is what the tests compare with.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import selective_scan_compiled

# How B (or C) enters, by its shape (see _time_major)
SHARED, PER_CHANNEL, FIXED = "tbn", "tbdn", "dn"


def _steps(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, ·, L) → (L, batch, ·), contiguous: step t is one contiguous slice."""
    return x.to(dtype).permute(2, 0, 1).contiguous()


def _time_major(M: torch.Tensor, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, str]:
    """B or C as selective_scan_ref takes it → (the scan's layout of it, its kind).

    (D, N) fixed → (N, D); (batch, N, L) shared by all channels → (L, batch, N);
    (batch, G, N, L) shared in G groups of channels → one row a channel, as the reference
    does → (L, batch, N, D).
    """
    if M.dim() == 2:
        return M.to(dtype).t().contiguous(), FIXED
    if M.dim() == 3:
        return _steps(M, dtype), SHARED
    M = M.to(dtype).repeat_interleave(dim // M.shape[1], dim=1)  # "B G N L -> B (G H) N L"
    return M.permute(3, 0, 2, 1).contiguous(), PER_CHANNEL


def _at(M: torch.Tensor, kind: str, t: int) -> torch.Tensor:
    """Step t of B or C, broadcastable to (batch, N, D)."""
    if kind == FIXED:
        return M
    return M[t][..., None] if kind == SHARED else M[t]


def _sum_n(X: torch.Tensor, M: torch.Tensor, kind: str) -> torch.Tensor:
    """Σ_n X ⊙ B (or C): (L, b, n, d) → (L, b, d)."""
    L, b, n, d = X.shape
    if kind == SHARED:  # one (n)·(n × d) product per (t, b)
        return torch.bmm(M.reshape(L * b, 1, n), X.view(L * b, n, d)).view(L, b, d)
    return (X * M).sum(2)


def _sum_to(X: torch.Tensor, v: torch.Tensor, kind: str) -> torch.Tensor:
    """Σ X ⊙ v over what B (or C) does not index: (L, b, n, d), v (L, b, d) → B's layout."""
    L, b, n, d = X.shape
    if kind == SHARED:  # one (n × d)·(d) product per (t, b)
        return torch.bmm(X.view(L * b, n, d), v.reshape(L * b, d, 1)).view(L, b, n)
    prod = X * v[:, :, None, :]
    return prod if kind == PER_CHANNEL else prod.sum((0, 1))


class _Scan(torch.autograd.Function):
    """(Δ (L,b,d), Δ·u (L,b,d), Aᵀ (n,d), B, C) → (y (L,b,d), last state (b,n,d)); zero initial state.

    The state is laid out (L, batch, N, D): D = expand·d_model is the long axis, innermost,
    so every elementwise product runs along contiguous rows of D.
    """

    @staticmethod
    def forward(ctx, delta, du, AT, B, C, b_kind, c_kind):
        L, batch, dim = delta.shape
        decay = delta.new_empty(L, batch, AT.shape[0], dim)   # exp(Δ_t A)
        states = torch.empty_like(decay)                       # x_t
        x = None
        for t in range(L):  # one step's slices stay in cache from the first use to the last
            torch.mul(du[t][:, None, :], _at(B, b_kind, t), out=states[t])
            torch.mul(delta[t][:, None, :], AT, out=decay[t]).exp_()
            x = states[t] if x is None else states[t].addcmul_(decay[t], x)
        ctx.save_for_backward(delta, du, AT, B, C, decay, states)
        ctx.kinds = b_kind, c_kind
        return _sum_n(states, C, c_kind), x.clone()

    @staticmethod
    def backward(ctx, grad_y, grad_last):
        delta, du, AT, B, C, decay, states = ctx.saved_tensors
        b_kind, c_kind = ctx.kinds
        grad_y = grad_y.contiguous()
        g = torch.empty_like(states)  # ∂/∂x_t = C_t ∂y_t + exp(Δ_{t+1} A) ∂/∂x_{t+1}
        torch.addcmul(grad_last, grad_y[-1][:, None, :], _at(C, c_kind, -1), out=g[-1])
        # ∂/∂(Δ_t A) = g_t ⊙ exp(Δ_t A) ⊙ x_{t−1}, zero at t = 0 (zero initial state); reduced
        # over n (for Δ) and over t, b (for A) a step at a time, while the step is in cache
        g_delta = torch.zeros_like(delta)
        g_AT = torch.zeros_like(states[0])
        step = torch.empty_like(states[0])
        for t in range(g.shape[0] - 1, 0, -1):
            torch.mul(decay[t], g[t], out=step)
            torch.addcmul(step, grad_y[t - 1][:, None, :], _at(C, c_kind, t - 1), out=g[t - 1])
            step.mul_(states[t - 1])
            g_AT.addcmul_(step, delta[t][:, None, :])
            torch.sum(step.mul_(AT), 1, out=g_delta[t])
        return (g_delta, _sum_n(g, B, b_kind), g_AT.sum(0), _sum_to(g, du, b_kind),
                _sum_to(states, grad_y, c_kind), None, None)


def selective_scan_cpu(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False):
    """``selective_scan_fn`` (same signature, same result as ``selective_scan_ref``).

    u, delta, z (batch, D, L); A (D, N); B, C (D, N), (batch, N, L) or (batch, G, N, L);
    D, delta_bias (D,).  Returns out (batch, D, L) in u's dtype [, last state (batch, D, N)].
    """
    if A.is_complex():
        from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

        return selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    dtype_in = u.dtype
    work = torch.promote_types(dtype_in, torch.float32)
    # the C++ loop reads host memory through data pointers: CPU tensors only (a GPU fallback
    # or a meta tensor takes the torch scan)
    compiled = (u.device.type == "cpu" and B.dim() == 3 and C.dim() == 3
                and selective_scan_compiled.library() is not None)
    # everything (batch, L, ·) for the compiled loop, (L, batch, ·) for the torch one, and
    # contiguous: mamba-ssm hands u, delta and z over in three different memory layouts, and
    # mixed strides are slow elementwise
    order = (0, 2, 1) if compiled else (2, 0, 1)
    u, delta = (x.to(work).permute(order).contiguous() for x in (u, delta))
    if delta_bias is not None:
        delta = delta + delta_bias.to(work)
    if delta_softplus:
        delta = F.softplus(delta)
    AT = A.to(work).t().contiguous()
    if compiled:
        B, C = (M.to(work).transpose(1, 2).contiguous() for M in (B, C))
        D = None if D is None else D.to(work).contiguous()
        z = None if z is None else z.to(work).transpose(1, 2).contiguous()
        out, last_state = selective_scan_compiled.CompiledScan.apply(delta, u, AT, B, C, D, z)
        out = out.transpose(1, 2).to(dtype=dtype_in)
        return out if not return_last_state else (out, last_state.transpose(1, 2))
    dim = A.shape[0]
    Bt, b_kind = _time_major(B, dim, work)
    Ct, c_kind = _time_major(C, dim, work)
    y, last_state = _Scan.apply(delta, delta * u, AT, Bt, Ct, b_kind, c_kind)
    out = y if D is None else y + u * D.to(work)
    if z is not None:
        out = out * F.silu(_steps(z, work))
    out = out.permute(1, 2, 0).to(dtype=dtype_in)
    return out if not return_last_state else (out, last_state.transpose(1, 2))
