"""fla's recurrent kernels in pure torch: wrappers around fla's own ``fla/ops/<op>/naive.py``.

fla 0.6.0 imports on a machine without a GPU (when triton is installed), but every
Triton kernel it launches fails there ("0 active drivers").  Most kernel families ship a
pure-torch reference in ``fla/ops/<op>/naive.py``; each function here takes a kernel's
signature (q, k, v (B, T, H, K|V) and its flags) and calls that reference, adapting only
layouts and kernel flags.  :mod:`recallbench.adapters.cpu.fla_swaps` says which kernel
each one replaces.

The references cover what recallbench uses: full sequences from position 0, optional
initial / final states.  Variable-length packing (``cu_seqlens``) and reversed scans raise
``NotImplementedError`` instead of silently differing.  The naive references loop over
time steps in Python (except retention and Based, which are quadratic parallel forms),
so they are for small CPU runs; the swaps use chunked forms of most of them
(``fla_chunked_gla``, ``fla_chunked_delta``), which the tests compare with these.  The delta rules swap in chunked forms instead
(:mod:`~recallbench.adapters.cpu.fla_chunked_delta`); :func:`delta_rule` and
:func:`gated_delta_rule` here are the references those are tested against.
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _naive(op: str, name: str, module: str = "naive") -> Callable:
    """``fla.ops.<op>.<module>.<name>``, fla's pure-torch reference (imported on first use)."""
    return getattr(importlib.import_module(f"fla.ops.{op}.{module}"), name)


def no_varlen(cu_seqlens, what: str, reverse: bool = False) -> None:
    """Refuse what the references do not cover: packed sequences, reversed scans."""
    if cu_seqlens is not None:
        raise NotImplementedError(
            f"fla CPU swap: {what} with cu_seqlens (packed sequences) has no CPU reference")
    if reverse:
        raise NotImplementedError(f"fla CPU swap: {what} with reverse=True has no CPU reference")


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fla.modules.l2norm's maths: x / sqrt(sum x² + eps), in float32."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().sum(-1, keepdim=True) + eps)).to(x.dtype)


def _bhtd(*xs: torch.Tensor) -> list[torch.Tensor]:
    """(B, T, H, D) -> (B, H, T, D); (B, T, H) -> (B, H, T)."""
    return [x.transpose(1, 2) for x in xs]


def _t_state(s: torch.Tensor | None, v_first: bool) -> torch.Tensor | None:
    """fla's ``state_v_first=True`` stores states (B, H, V, K); the naive ones use (B, H, K, V)."""
    return s.transpose(-1, -2) if (s is not None and v_first) else s


def _scale_q(q: torch.Tensor, scale: float | None, native: float) -> torch.Tensor:
    """For references with a hard-wired scale ``native``: fold the requested one into q."""
    return q if scale is None or scale == native else q * (scale / native)


# ---------------------------------------------------------------------------
# kernels -> fla/ops/*/naive.py (wrappers adapt layouts and kernel flags only)
# ---------------------------------------------------------------------------
def gla(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False,
        state_v_first=False, cu_seqlens=None, gk=None, gv=None, reverse=False, **_):
    """chunk_gla / fused_chunk_gla / fused_recurrent_gla -> naive_recurrent_gla. (B, T, H, K)."""
    no_varlen(cu_seqlens, "gla", reverse)
    if gv is not None:
        raise NotImplementedError("fla CPU swap: gla with a value gate gv has no CPU reference")
    gk = g if gk is None else gk
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o, ht = _naive("gla", "naive_recurrent_gla")(q, k, v, gk, _t_state(initial_state, state_v_first),
                                                 output_final_state)
    return o, _t_state(ht, state_v_first)


def simple_gla(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False,
               state_v_first=False, cu_seqlens=None, reverse=False, g_gamma=None, **_):
    """chunk_simple_gla / fused_recurrent_simple_gla -> naive_recurrent_simple_gla. g: (B, T, H)."""
    no_varlen(cu_seqlens, "simple_gla", reverse)
    if g is None:  # head-wise constant decay (or none)
        B, T, H = q.shape[:3]
        g = (q.new_zeros(B, T, H, dtype=torch.float32) if g_gamma is None
             else g_gamma.float().view(1, 1, H).expand(B, T, H))
    o, ht = _naive("simple_gla", "naive_recurrent_simple_gla")(
        q, k, v, g, scale, _t_state(initial_state, state_v_first), output_final_state)
    return o, (_t_state(ht, state_v_first) if output_final_state else None)


def delta_rule(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **_):
    """chunk_delta_rule / fused_recurrent_delta_rule -> delta_rule_recurrence ((B, H, T, D) layout)."""
    no_varlen(cu_seqlens, "delta_rule")
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if beta is None:
        beta = torch.ones_like(q[..., 0])
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o, ht = _naive("delta_rule", "delta_rule_recurrence")(*_bhtd(q, k, v, beta), initial_state,
                                                          output_final_state)
    return o.transpose(1, 2), (ht if output_final_state else None)


def gated_delta_inputs(q, k, v, g, beta, *, use_qk_l2norm_in_kernel=False,
                       use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                       use_gate_in_kernel=False, A_log=None, dt_bias=None, gk=None, gv=None,
                       cu_seqlens=None, **_):
    """(q, k, beta, g) as the gated-delta-rule kernels use them, from the kernels' flags,
    applied exactly as the kernels document them: l2-normalised q, k; beta = sigmoid(beta)
    (× 2 with allow_neg_eigval); g = -exp(A_log) · softplus(g + dt_bias) (fla's
    ``naive_gdn_gate``); HV value heads share each of the H q/k heads in groups of HV / H
    (q and k repeated).  Shared by this reference and the chunked form; the kernels' other
    keywords are ignored."""
    no_varlen(cu_seqlens, "gated_delta_rule")
    if gk is not None or gv is not None:
        raise NotImplementedError("fla CPU swap: gated_delta_rule with gk/gv has no CPU reference")
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if use_gate_in_kernel:
        g = _naive("gated_delta_rule", "naive_gdn_gate", "gate")(g, A_log, dt_bias)
    HV, H = v.shape[2], q.shape[2]
    if HV != H:  # grouped value heads: each q/k head serves HV/H value heads
        q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
    return q, k, beta, g


def gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                     state_v_first=False, **flags):
    """chunk_gated_delta_rule / fused_recurrent_gated_delta_rule -> naive_recurrent_gated_delta_rule,
    the kernel flags applied by :func:`gated_delta_inputs`."""
    q, k, beta, g = gated_delta_inputs(q, k, v, g, beta, **flags)
    o, ht = _naive("gated_delta_rule", "naive_recurrent_gated_delta_rule")(
        q, k, v, beta, g, scale, _t_state(initial_state, state_v_first), output_final_state)
    return o.to(v.dtype), _t_state(ht, state_v_first)


def retention_log_gamma(H: int, device) -> torch.Tensor:
    """RetNet's fixed log-decays per head, log(1 - 2^(-5-h)), h = 0 … H-1."""
    return (1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float, device=device))).log()


def retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              reverse=False, state_v_first=False, output_attentions=False, **_):
    """chunk/fused_chunk/parallel/fused_recurrent_retention -> naive_retention (parallel form).

    With a state in or out, the same decays γ_h = 1 - 2^(-5-h) run through
    naive_recurrent_simple_gla instead (naive_retention has no state).
    """
    no_varlen(cu_seqlens, "retention", reverse)
    if initial_state is not None or output_final_state:
        return simple_gla(q, k, v, None, scale, initial_state, output_final_state, state_v_first,
                          g_gamma=retention_log_gamma(q.shape[2], q.device))
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o = _naive("retention", "naive_retention")(*_bhtd(q, k, v)).transpose(1, 2)
    return o, None


def rwkv6(r, k, v, w, u, scale=None, initial_state=None, output_final_state=False, reverse=False,
          cu_seqlens=None, **_):
    """chunk_rwkv6 / fused_recurrent_rwkv6 -> rwkv6.recurrent_naive.naive_recurrent_rwkv6 ((B, H, T, D))."""
    no_varlen(cu_seqlens, "rwkv6", reverse)
    fn = _naive("rwkv6", "naive_recurrent_rwkv6", "recurrent_naive")
    o, ht = fn(*_bhtd(r, k, v, w), u, scale, initial_state, output_final_state)
    return o.transpose(1, 2), ht


def based(q, k, v, scale=None, use_norm=True, **_):
    """parallel_based -> naive_parallel_based ((B, H, T, D) layout; the exact quadratic form)."""
    o = _naive("based", "naive_parallel_based")(*_bhtd(q, k, v), scale, use_norm)
    return o.transpose(1, 2).to(v.dtype)


def linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=False,
                cu_seqlens=None, reverse=False, **_):
    """chunk/fused_chunk/fused_recurrent_linear_attn -> naive_recurrent_linear_attn (same layout).

    The chunk kernels default to ``normalize=True``; the layers always pass it explicitly.
    """
    no_varlen(cu_seqlens, "linear_attn", reverse)
    return _naive("linear_attn", "naive_recurrent_linear_attn")(q, k, v, scale, initial_state,
                                                                output_final_state, normalize)


def gsa(q, k, v, s, g=None, scale=None, initial_state=None, output_final_state=False, reverse=False,
        cu_seqlens=None, **_):
    """chunk_gsa / fused_recurrent_gsa -> naive_recurrent_gsa (same layout)."""
    no_varlen(cu_seqlens, "gsa", reverse)
    return _naive("gsa", "naive_recurrent_gsa")(q, k, v, s, g, scale, initial_state, output_final_state)
