"""fla's gated-linear-attention kernels in chunked pure torch: GLA, simple GLA, RWKV-6, GSA, linear attention.

The references in :mod:`~recallbench.adapters.cpu.fla_kernels` loop over time steps in
Python; here a sequence is cut into chunks of C steps and each chunk is one set of
batched matrix products (the form fla's own chunk kernels take):

* within a chunk, o_i = Σ_{j≤i} (q_i ⊙ exp(D_ij)) · k_j v_jᵀ, where D_ij = Σ_{j<t≤i} g_t is the
  log-decay between the two steps.  When no channel's Σ|g| within either half of a chunk
  exceeds LIMIT, exp(D_ij) = exp(G_i − G_h) · exp(G_h − G_j) with G the cumulative decay since
  the chunk start and h its middle step, and the chunk is two matrix products ("factored";
  every factor within e^±LIMIT, far from float32's range; the pairs j > i, up to e^(2·LIMIT),
  are masked after the product).  Otherwise (strong decays) D_ij is summed directly over (j, i] for each
  pair (a "segment sum", never a difference of two long cumulative sums) and set to −∞
  above the diagonal before exp, so no factor exceeds 1 however strong the decays; this
  costs a (C, C, D) tensor per chunk, so those chunks are short (KEY_CHUNK).  :func:`plan`
  picks the form and the chunk length from the decays of each call;
* across chunks, the state entering each chunk is carried by a loop over the T/C chunks,
  with the decays from the chunk start (≤ 1) on the query side and those to the chunk end
  (≤ 1) on the key side.

A head-wise scalar decay (simple GLA) or none (linear attention) always takes segment sums,
whose (C, C) matrix is cheap, over chunks of up to 64 steps.  The maths runs in float32 (float64 stays float64);
outputs come back in the input's dtype, states in float32.  Every function takes the
signature of the fla kernel it replaces, like its counterpart in ``fla_kernels``, which
the tests compare it with (values and gradients).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import fla_kernels as K

KEY_CHUNK = 16  # steps per chunk with segment sums per channel (cost C·D per step)
HEAD_CHUNK = 64  # steps per chunk with a scalar or no decay (cost C per step)
FACTORED_CHUNKS = (64, 32, 16)  # chunk lengths tried for the factored per-channel form
LIMIT = 40.0  # largest Σ|log-decay| within half a chunk that the factored form takes: e^±40 ≈ 2e±17


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------
def _chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """(B, T, H[, D]) -> (B, H, N, C, D|1) in float32 (or wider), zero-padded to N·C steps."""
    if x.dim() == 3:
        x = x.unsqueeze(-1)
    x = x.to(torch.promote_types(x.dtype, torch.float32)).transpose(1, 2)
    if x.shape[2] % C:
        x = F.pad(x, (0, 0, 0, -x.shape[2] % C))
    return x.unflatten(2, (-1, C)).contiguous()  # strided operands send CPU bmm to a slow path


class _ContiguousGrad(torch.autograd.Function):
    """The identity, whose backward hands on its gradient made contiguous: the gradient of a
    (B, T, H, V) output arrives strided in the (B, H, N, C, V) chunk layout, and CPU ``bmm`` on
    such operands falls back to one small product (and copy) per batch entry."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def _steps(o: torch.Tensor, T: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, H, N, C, V) -> (B, T, H, V) in ``dtype`` (padding dropped)."""
    return _ContiguousGrad.apply(o).flatten(2, 3)[:, :, :T].transpose(1, 2).to(dtype)


def _chunk_size(T: int, C: int) -> int:
    return min(C, max(T, 1))


# ---------------------------------------------------------------------------
# the chunked recurrence
# ---------------------------------------------------------------------------
def _segsum(g: torch.Tensor, strict: bool) -> torch.Tensor:
    """g (..., C, D) log-decays -> (..., C, C, D): Σ g_t over j < t ≤ i (``strict``: j < t < i).

    Entries with j > i (``strict``: j ≥ i) are −∞, so their exp is 0 and so is their gradient.
    """
    C = g.shape[-2]
    if strict:  # the decay between j and i excludes step i itself: shift g down by one
        g = F.pad(g, (0, 0, 1, 0))[..., :-1, :]
    i = torch.arange(C, device=g.device)
    gap = (i[:, None] - i[None, :]).unsqueeze(-1)  # i - j
    x = g.unsqueeze(-2).expand(*g.shape[:-1], C, g.shape[-1]).masked_fill(gap <= int(strict), 0.0)
    return x.cumsum(-3).masked_fill(gap < int(strict), float("-inf"))


def _excl_cumsum(g: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    """Σ g_t over the steps of the chunk before (``reverse``: after) each step, along dim -2."""
    if reverse:
        return _excl_cumsum(g.flip(-2)).flip(-2)
    return F.pad(g[..., :-1, :], (0, 0, 1, 0)).cumsum(-2)


def _intra(q, k, v, E, value_decay: bool) -> torch.Tensor:
    """Within-chunk outputs from the decay factors E = exp(segment sums), (..., C, C, D|1)."""
    if value_decay:  # GSA's first pass: decays act on the value (slot) channels
        return ((q @ k.transpose(-1, -2)).unsqueeze(-1) * E * v.unsqueeze(-3)).sum(-2)
    if E.shape[-1] == 1:  # one decay per head
        return ((q @ k.transpose(-1, -2)) * E.squeeze(-1)) @ v
    return torch.einsum("...id,...ijd,...jd->...ij", q, E, k) @ v


def _factors(g: torch.Tensor, strict: bool):
    """The factored form's decays from one cumulative sum G of g over the chunk, taken relative
    to G_h at the chunk's middle step h = C//2 − 1: ``up`` = exp(G_i − G_h), or exp(G_i − g_i −
    G_h) when ``strict``, ``down`` = exp(G_h − G_j), so that up_i · down_j is the decay from j to
    i; ``start`` = exp(G_h), which turns ``up`` into the decay from the chunk start (what the state
    entering the chunk takes to reach step i), and ``tail`` = exp(G_C − G_h), which turns ``down``
    into the decay from step j to the chunk end; ``total`` = exp(G_C), the whole chunk's.  Each
    factor within e^±LIMIT when neither half of the chunk decays by more (see :func:`plan`)."""
    G = g.cumsum(-2)
    h = G[..., G.shape[-2] // 2 - 1:G.shape[-2] // 2, :] if G.shape[-2] > 1 else torch.zeros_like(G)
    up = (G - g - h if strict else G - h).exp()
    last = G[..., -1:, :]
    return up, (h - G).exp(), h.exp(), (last - h).exp(), last.exp()


def _scan_factored(q, k, v, g, h0, final: bool, strict: bool, value_decay: bool, bonus):
    """:func:`gated_scan` in the factored form: the query-side and key-side products are made
    once and serve both the within-chunk outputs and the state carried across chunks; RWKV-6's
    bonus is the diagonal of the within-chunk matrix."""
    up, down, start, tail, total = _factors(g, strict)
    carry = not (q.shape[2] == 1 and h0 is None and not final)
    if value_decay:  # GSA's first pass: decays act on the value (slot) channels
        vd = v * down
        o = up * (torch.tril(q @ k.transpose(-1, -2), -int(strict)) @ vd)
        if not carry:
            return o, None
        kv = (k.transpose(-1, -2) @ vd) * tail  # (…, K, V) · (…, 1, V)
        entering, S = _carry(kv, total, h0, final)
        return o + (q @ entering) * (up * start), (S if final else None)
    qu, kd = q * up, k * down
    A = torch.tril(qu @ kd.transpose(-1, -2), -int(strict))
    if bonus is not None:
        A = A + torch.diag_embed((q * bonus * k).sum(-1))
    if not carry:
        return A @ v, None
    kv = kd.transpose(-1, -2) @ v * tail.transpose(-1, -2)  # (…, K, V) · (…, K, 1)
    entering, S = _carry(kv, total.transpose(-1, -2), h0, final)
    o = torch.baddbmm(((qu * start) @ entering).flatten(0, 2), A.flatten(0, 2), v.flatten(0, 2))
    return o.view(*A.shape[:-1], v.shape[-1]), (S if final else None)


def _carry(kv: torch.Tensor, decay: torch.Tensor, h0: torch.Tensor | None, final: bool):
    """States entering each chunk, (B, H, N, K, V), and the final one: S_n = decay_n S_{n−1} + kv_n."""
    N = kv.shape[2]
    S = h0
    entering = []
    for n in range(N):
        entering.append(torch.zeros_like(kv[:, :, n]) if S is None else S)
        if n < N - 1 or final:
            S = kv[:, :, n] if S is None else S * decay[:, :, n] + kv[:, :, n]
    return torch.stack(entering, 2), S


def gated_scan(q, k, v, g, h0=None, final=False, *, bonus=None, value_decay=False, factored=False):
    """The chunked gated recurrence on chunked tensors (B, H, N, C, ·).

    h_t = Diag(exp g_t) h_{t−1} + k_t v_tᵀ (``value_decay``: h_{t−1} Diag(exp g_t)); o_t = q_tᵀ h_t,
    or with ``bonus`` u (RWKV-6) o_t = q_tᵀ (h_{t−1} + Diag(u) k_t v_tᵀ).  g is (…, C, D) with
    D = K (or V) per channel, or D = 1 for one decay per head; ``factored`` (see :func:`plan`)
    when no chunk decays by more than e^−LIMIT.  Returns o (B, H, N, C, V) and, when ``final``,
    the final state (B, H, K, V).
    """
    strict = bonus is not None
    if factored:
        return _scan_factored(q, k, v, g, h0, final, strict, value_decay, bonus)
    o = _intra(q, k, v, _segsum(g, strict).exp(), value_decay)
    if bonus is not None:
        o = o + (q * bonus * k).sum(-1, keepdim=True) * v
    if q.shape[2] == 1 and h0 is None and not final:
        return o, None
    since = (_excl_cumsum(g) if strict else g.cumsum(-2)).exp()  # decay from the chunk start
    to_end = _excl_cumsum(g, reverse=True).exp()  # decay from each step to the chunk end
    total = g.sum(-2).exp().unsqueeze(-1 if not value_decay else -2)  # whole chunk, per channel
    kv = k.transpose(-1, -2) @ (v * to_end) if value_decay else (k * to_end).transpose(-1, -2) @ v
    entering, S = _carry(kv, total, h0, final)
    o = o + ((q @ entering) * since if value_decay else (q * since) @ entering)
    return o, (S if final else None)


@torch.no_grad()
def plan(g: torch.Tensor) -> tuple[int, bool]:
    """Chunk length and form for per-channel log-decays g (B, T, H, D): the longest of
    FACTORED_CHUNKS over which no channel's Σ|g_t| within either half of a chunk (split as
    :func:`_factors` splits it) exceeds LIMIT, factored; else KEY_CHUNK steps with segment sums
    (exact for any decay)."""
    T = g.shape[1]
    run = F.pad(g.detach().abs().double().cumsum(1).movedim(1, -1), (1, 0))  # Σ|g| before each step
    for C in FACTORED_CHUNKS:
        C = _chunk_size(T, C)
        starts = torch.arange(0, T, C, device=g.device)
        cuts = torch.cat((starts, (starts + max(C // 2, 1)).clamp(max=T))).unique()  # sorted
        ends = torch.cat((cuts[1:], cuts.new_tensor([T])))
        if (run[..., ends] - run[..., cuts]).amax() <= LIMIT:
            return C, True
    return _chunk_size(T, KEY_CHUNK), False


def _state_in(s, v_first: bool):
    return None if s is None else K._t_state(s, v_first).to(torch.promote_types(s.dtype, torch.float32))


# ---------------------------------------------------------------------------
# kernels (fla signatures)
# ---------------------------------------------------------------------------
def gla(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False,
        state_v_first=False, cu_seqlens=None, gk=None, gv=None, reverse=False, **_):
    """chunk_gla / fused_chunk_gla / fused_recurrent_gla: a log-decay per key channel, gk (B, T, H, K)."""
    K.no_varlen(cu_seqlens, "gla", reverse)
    if gv is not None:
        raise NotImplementedError("fla CPU swap: gla with a value gate gv has no CPU reference")
    gk = g if gk is None else gk
    T, (C, factored) = q.shape[1], plan(gk)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, S = gated_scan(_chunks(q * scale, C), _chunks(k, C), _chunks(v, C), _chunks(gk, C),
                      _state_in(initial_state, state_v_first), output_final_state, factored=factored)
    return _steps(o, T, q.dtype), (K._t_state(S, state_v_first) if output_final_state else None)


def simple_gla(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False,
               state_v_first=False, cu_seqlens=None, reverse=False, g_gamma=None, **_):
    """chunk_simple_gla / fused_recurrent_simple_gla: one log-decay per head, g (B, T, H) or g_gamma (H,)."""
    K.no_varlen(cu_seqlens, "simple_gla", reverse)
    B, T, H = q.shape[:3]
    if g is None:
        g = (q.new_zeros(B, T, H, dtype=torch.float32) if g_gamma is None
             else g_gamma.float().view(1, 1, H).expand(B, T, H))
    C = _chunk_size(T, HEAD_CHUNK)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, S = gated_scan(_chunks(q * scale, C), _chunks(k, C), _chunks(v, C), _chunks(g, C),
                      _state_in(initial_state, state_v_first), output_final_state)
    return _steps(o, T, q.dtype), (K._t_state(S, state_v_first) if output_final_state else None)


def retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              reverse=False, state_v_first=False, **kw):
    """chunk/fused_chunk/parallel/fused_recurrent_retention: fla's parallel form without a state,
    :func:`simple_gla` with the decays γ_h = 1 − 2^(−5−h) with one."""
    if initial_state is None and not output_final_state:
        return K.retention(q, k, v, scale, cu_seqlens=cu_seqlens, reverse=reverse, **kw)
    return simple_gla(q, k, v, None, scale, initial_state, output_final_state, state_v_first,
                      cu_seqlens, reverse, g_gamma=K.retention_log_gamma(q.shape[2], q.device))


def rwkv6(r, k, v, w, u, scale=None, initial_state=None, output_final_state=False, reverse=False,
          cu_seqlens=None, **_):
    """chunk_rwkv6 / fused_recurrent_rwkv6: GLA read before the write, plus the bonus u (H, K)."""
    K.no_varlen(cu_seqlens, "rwkv6", reverse)
    T, (C, factored) = r.shape[1], plan(w)
    scale = r.shape[-1] ** -0.5 if scale is None else scale
    u = u.to(torch.promote_types(u.dtype, torch.float32))[None, :, None, None]  # (1, H, 1, 1, K)
    o, S = gated_scan(_chunks(r * scale, C), _chunks(k, C), _chunks(v, C), _chunks(w, C),
                      _state_in(initial_state, False), output_final_state, bonus=u, factored=factored)
    return _steps(o, T, r.dtype), S


def linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=False,
                cu_seqlens=None, reverse=False, **_):
    """chunk/fused_chunk/fused_recurrent_linear_attn; ``normalize`` divides by q·Σk (fla's semantics,
    a (state, Σk) pair in and out)."""
    K.no_varlen(cu_seqlens, "linear_attn", reverse)
    B, T, H = q.shape[:3]
    kv0, z0 = initial_state if (normalize and isinstance(initial_state, tuple)) else (initial_state, None)
    C = _chunk_size(T, HEAD_CHUNK)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qs = q.float() * scale
    no_decay = q.new_zeros(B, T, H, dtype=torch.float32)
    o, S = gated_scan(_chunks(qs, C), _chunks(k, C), _chunks(v, C), _chunks(no_decay, C),
                      _state_in(kv0, False), output_final_state)
    o = _ContiguousGrad.apply(o).flatten(2, 3)[:, :, :T].transpose(1, 2)
    if normalize:
        k_cum = k.float().cumsum(1) if z0 is None else k.float().cumsum(1) + z0
        o = o / ((qs * k_cum).sum(-1, keepdim=True) + 1e-10)
        return o.to(q.dtype), ((S, k_cum[:, -1:]) if output_final_state else None)
    return o.to(q.dtype), S


def gsa(q, k, v, s, g=None, scale=None, initial_state=None, output_final_state=False, reverse=False,
        cu_seqlens=None, **_):
    """chunk_gsa / fused_recurrent_gsa: keys write slots s (B, T, H, M) with decays g on the slots, a
    softmax over the slots read, then a second pass reads the values through the same slots."""
    K.no_varlen(cu_seqlens, "gsa", reverse)
    T, NG = q.shape[1], q.shape[2] // k.shape[2]
    if g is None:  # fla's default: the slots' softmax normaliser as the forget gate
        z = s.float().logcumsumexp(1)
        g = torch.cat((z[:, :1], z[:, :-1]), 1) - z
        s = torch.exp(s.float() - z)
    k, v, s, g = (x.repeat_interleave(NG, dim=2) for x in (k, v, s, g))
    hk0, hv0 = (None, None) if initial_state is None else (
        _state_in(x.repeat_interleave(NG, dim=1), False) for x in initial_state)
    C, factored = plan(g)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    sc, gc = _chunks(s, C), _chunks(g, C)
    ok, hk = gated_scan(_chunks(q * scale, C), _chunks(k, C), sc, gc, hk0, output_final_state,
                        value_decay=True, factored=factored)
    ov, hv = gated_scan(ok.softmax(-1), sc, _chunks(v, C), gc, hv0, output_final_state, factored=factored)
    return _steps(ov, T, q.dtype), ((hk[:, ::NG], hv[:, ::NG]) if output_final_state else None)
