"""Run flash-linear-attention's real layers on CPU: swap its Triton kernels for pure torch.

fla 0.6.0 imports on a machine without a GPU (when triton is installed), but every
Triton kernel it launches fails there ("0 active drivers").  Its layer classes
(``fla.layers.*``) are plain PyTorch around those kernels, and most kernel families
ship a pure-torch reference in ``fla/ops/<op>/naive.py``.  This module is the ONE
place where recallbench replaces the kernels with those references, so that the
real layer classes (their projections, gates, initialisation) run on CPU.

What is swapped, one line of :data:`SWAPS` each: ``target`` is ``module:name``
(a function looked up by name in that module at call time, e.g. the kernel a layer
module imported into its namespace) or ``module:Class.method``; ``replacement``
is the torch function below; ``reference`` is what it is built from.

Rules:

* Nothing is patched at import.  :func:`install` patches, :func:`uninstall`
  restores the exact original objects, :func:`cpu_reference` does both as a
  context manager.  :func:`is_installed` tells.
* Every patched name dispatches per call: when the first tensor argument lives on
  CPU the torch reference runs, otherwise the ORIGINAL object is called, so the
  Triton kernels on CUDA are untouched even while the swaps are installed.  The
  adapters in :mod:`adapters.fla_layers` install only when building on CPU.
* The references cover what recallbench uses: full sequences from position 0,
  optional initial / final states.  Variable-length packing (``cu_seqlens``) and
  reversed scans raise ``NotImplementedError`` instead of silently differing.

The naive references loop over time steps in Python (except retention and
Based, which are quadratic parallel forms), so they are for small CPU runs.
"""
from __future__ import annotations

import dataclasses
import importlib
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _naive(op: str, name: str, module: str = "naive") -> Callable:
    """``fla.ops.<op>.<module>.<name>``, fla's pure-torch reference (imported on first use)."""
    return getattr(importlib.import_module(f"fla.ops.{op}.{module}"), name)


def _no_varlen(cu_seqlens, what: str, reverse: bool = False) -> None:
    if cu_seqlens is not None:
        raise NotImplementedError(f"fla_cpu: {what} with cu_seqlens (packed sequences) has no CPU reference")
    if reverse:
        raise NotImplementedError(f"fla_cpu: {what} with reverse=True has no CPU reference")


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
    _no_varlen(cu_seqlens, "gla", reverse)
    if gv is not None:
        raise NotImplementedError("fla_cpu: gla with a value gate gv has no CPU reference")
    gk = g if gk is None else gk
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o, ht = _naive("gla", "naive_recurrent_gla")(q, k, v, gk, _t_state(initial_state, state_v_first),
                                                 output_final_state)
    return o, _t_state(ht, state_v_first)


def simple_gla(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False,
               state_v_first=False, cu_seqlens=None, reverse=False, g_gamma=None, **_):
    """chunk_simple_gla / fused_recurrent_simple_gla -> naive_recurrent_simple_gla. g: (B, T, H)."""
    _no_varlen(cu_seqlens, "simple_gla", reverse)
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
    _no_varlen(cu_seqlens, "delta_rule")
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if beta is None:
        beta = torch.ones_like(q[..., 0])
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o, ht = _naive("delta_rule", "delta_rule_recurrence")(*_bhtd(q, k, v, beta), initial_state,
                                                          output_final_state)
    return o.transpose(1, 2), (ht if output_final_state else None)


def gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                     state_v_first=False, cu_seqlens=None, use_gate_in_kernel=False, A_log=None,
                     dt_bias=None, gk=None, gv=None, **_):
    """chunk_gated_delta_rule / fused_recurrent_gated_delta_rule -> naive_recurrent_gated_delta_rule.

    The kernel flags are applied here exactly as the kernels document them: l2-normalised q, k;
    beta = sigmoid(beta) (× 2 with allow_neg_eigval); g = -exp(A_log) · softplus(g + dt_bias).
    """
    _no_varlen(cu_seqlens, "gated_delta_rule")
    if gk is not None or gv is not None:
        raise NotImplementedError("fla_cpu: gated_delta_rule with gk/gv has no CPU reference")
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if use_gate_in_kernel:
        gf = g.float() + (dt_bias.float() if dt_bias is not None else 0.0)
        g = -A_log.float().exp() * F.softplus(gf)
    HV, H = v.shape[2], q.shape[2]
    if HV != H:  # grouped value heads: each q/k head serves HV/H value heads
        q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
    o, ht = _naive("gated_delta_rule", "naive_recurrent_gated_delta_rule")(
        q, k, v, beta, g, scale, _t_state(initial_state, state_v_first), output_final_state)
    return o.to(v.dtype), _t_state(ht, state_v_first)


def retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              reverse=False, state_v_first=False, output_attentions=False, **_):
    """chunk/fused_chunk/parallel/fused_recurrent_retention -> naive_retention (parallel form).

    With a state in or out, the same decays γ_h = 1 - 2^(-5-h) run through
    naive_recurrent_simple_gla instead (naive_retention has no state).
    """
    _no_varlen(cu_seqlens, "retention", reverse)
    if initial_state is not None or output_final_state:
        H = q.shape[2]
        g_gamma = (1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float, device=q.device))).log()
        return simple_gla(q, k, v, None, scale, initial_state, output_final_state, state_v_first,
                          g_gamma=g_gamma)
    q = _scale_q(q, scale, q.shape[-1] ** -0.5)
    o = _naive("retention", "naive_retention")(*_bhtd(q, k, v)).transpose(1, 2)
    return o, None


def rwkv6(r, k, v, w, u, scale=None, initial_state=None, output_final_state=False, reverse=False,
          cu_seqlens=None, **_):
    """chunk_rwkv6 / fused_recurrent_rwkv6 -> rwkv6.recurrent_naive.naive_recurrent_rwkv6 ((B, H, T, D))."""
    _no_varlen(cu_seqlens, "rwkv6", reverse)
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
    _no_varlen(cu_seqlens, "linear_attn", reverse)
    return _naive("linear_attn", "naive_recurrent_linear_attn")(q, k, v, scale, initial_state,
                                                                output_final_state, normalize)


def gsa(q, k, v, s, g=None, scale=None, initial_state=None, output_final_state=False, reverse=False,
        cu_seqlens=None, **_):
    """chunk_gsa / fused_recurrent_gsa -> naive_recurrent_gsa (same layout)."""
    _no_varlen(cu_seqlens, "gsa", reverse)
    return _naive("gsa", "naive_recurrent_gsa")(q, k, v, s, g, scale, initial_state, output_final_state)


# ---------------------------------------------------------------------------
# modules and small fused ops -> torch
# ---------------------------------------------------------------------------
def causal_conv1d(x, weight, bias=None, residual=None, initial_state=None, output_final_state=False,
                  activation=None, cu_seqlens=None, **_):
    """fla's causal_conv1d: depthwise causal conv over (B, T, D) with weight (D, W), optional silu."""
    _no_varlen(cu_seqlens, "causal_conv1d")
    B, T, D = x.shape
    W = weight.shape[-1]
    xt = x.transpose(1, 2)  # (B, D, T)
    if initial_state is not None:  # (B, D, W): the last W inputs of the previous call
        xt_full = torch.cat([initial_state[..., 1:].to(x.dtype), xt], dim=-1)
        y = F.conv1d(xt_full, weight.unsqueeze(1), bias, groups=D)
    else:
        y = F.conv1d(xt, weight.unsqueeze(1), bias, padding=W - 1, groups=D)[..., :T]
    y = y.transpose(1, 2)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    if residual is not None:
        y = y + residual
    final = None
    if output_final_state:
        hist = xt if initial_state is None else torch.cat([initial_state.to(x.dtype), xt], dim=-1)
        final = F.pad(hist, (max(0, W - hist.shape[-1]), 0))[..., -W:]
    return y, final


def short_convolution_forward(self, x, residual=None, mask=None, cache=None, output_final_state=False,
                              cu_seqlens=None, chunk_indices=None, **_):
    """ShortConvolution.forward (an nn.Conv1d with weight (D, 1, W)) in torch."""
    if mask is not None:
        x = x * mask.unsqueeze(-1)
    return causal_conv1d(x, self.weight.squeeze(1), self.bias, residual, cache, output_final_state,
                         self.activation, cu_seqlens)


def _rms(x, weight, bias, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y


def _with_residual(x, residual, residual_in_fp32):
    if residual is None:
        return x, x
    s = (x.float() + residual.float()) if residual_in_fp32 else x + residual
    return s, s


def rms_norm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    """fla.modules.RMSNorm.forward in torch (float32 maths, output in x's dtype)."""
    x_in, res = _with_residual(x, residual, residual_in_fp32)
    y = _rms(x_in, self.weight, self.bias, self.eps).to(x.dtype)
    return (y, res) if prenorm else y


def group_norm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    """fla.modules.GroupNorm.forward in torch: per-group layer (or RMS) norm, then affine."""
    x_in, res = _with_residual(x, residual, residual_in_fp32)
    G = self.num_groups
    xf = x_in.float().unflatten(-1, (G, -1))
    if not self.is_rms_norm:
        xf = xf - xf.mean(-1, keepdim=True)
    y = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)).flatten(-2)
    if self.weight is not None:
        y = y * self.weight.float()
    if self.bias is not None:
        y = y + self.bias.float()
    y = y.to(x.dtype)
    return (y, res) if prenorm else y


def _gate(g: torch.Tensor, activation: str) -> torch.Tensor:
    gf = g.float()
    return gf * torch.sigmoid(gf) if activation in ("swish", "silu") else torch.sigmoid(gf)


def fused_rms_norm_gated_forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    """fla.modules.FusedRMSNormGated.forward in torch: RMSNorm(x) · act(g), act = swish | sigmoid."""
    x_in, res = _with_residual(x, residual, residual_in_fp32)
    y = (_rms(x_in, self.weight, self.bias, self.eps) * _gate(g, self.activation)).to(x.dtype)
    return (y, res) if prenorm else y


def rms_norm_linear(x, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-5,
                    prenorm=False, residual_in_fp32=False):
    """fla.modules.layernorm.rms_norm_linear in torch: Linear(RMSNorm(x))."""
    x_in, res = _with_residual(x, residual, residual_in_fp32)
    y = F.linear(_rms(x_in, norm_weight, norm_bias, eps).to(linear_weight.dtype), linear_weight, linear_bias)
    return (y, res) if prenorm else y


def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     chunk_indices=None):
    """fla.modules.rotary.rotary_embedding -> fla's own rotary_embedding_ref, with an int offset."""
    _no_varlen(cu_seqlens, "rotary_embedding")
    if not isinstance(seqlen_offsets, int):
        raise NotImplementedError("fla_cpu: rotary_embedding with per-sequence offsets has no CPU reference")
    from fla.modules.rotary.ops import rotary_embedding_ref
    T = x.shape[1]
    c, s = cos[seqlen_offsets:seqlen_offsets + T], sin[seqlen_offsets:seqlen_offsets + T]
    return rotary_embedding_ref(x.float(), c.float(), s.float(), interleaved).to(x.dtype)


def token_shift(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla.modules.token_shift.token_shift -> fla's own token_shift_ref (x_{t-1} - x_t)."""
    if cache is not None or output_cache:
        raise NotImplementedError("fla_cpu: token_shift with a cache has no CPU reference")
    from fla.modules.token_shift import token_shift_ref
    return token_shift_ref(x, cu_seqlens)


# activations: the *_fwd / *_bwd helpers that fla's autograd Functions call by name
def swish_fwd(x, output_contiguous=False):
    return F.silu(x.float()).to(x.dtype)


def swish_bwd(x, dy, output_contiguous=False):
    s = torch.sigmoid(x.float())
    return (dy.float() * s * (1 + x.float() * (1 - s))).to(x.dtype)


def sigmoid_fwd(x, output_contiguous=False):
    return torch.sigmoid(x.float()).to(x.dtype)


def sigmoid_bwd(x, dy, output_contiguous=False):
    s = torch.sigmoid(x.float())
    return (dy.float() * s * (1 - s)).to(x.dtype)


def logsigmoid_fwd(x, temperature=1.0, output_contiguous=False):
    return (F.logsigmoid(x.float()) / temperature).to(x.dtype)


def logsigmoid_bwd(x, dy, temperature=1.0, output_contiguous=False):
    return (dy.float() * torch.sigmoid(-x.float()) / temperature).to(x.dtype)


def swiglu(x, y):
    """fla.modules.activations.swiglu: silu(x) · y."""
    return (F.silu(x.float()) * y.float()).to(x.dtype)


def swiglu_linear(x, y, weight, bias):
    """fla.modules.activations.swiglu_linear: Linear(silu(x) · y)."""
    return F.linear(swiglu(x, y), weight, bias)


# ---------------------------------------------------------------------------
# the swap table
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Swap:
    target: str  # "module:name" or "module:Class.method"
    replacement: Callable
    reference: str  # what the torch version is (for docs and reports)


L = "fla.layers."
NORM, FGATE = "fla.modules.norm.layernorm", "fla.modules.norm.fused_norm_gate"
ACT = "fla.modules.activations.ops"

SWAPS: tuple[Swap, ...] = (
    # -- recurrent kernels, looked up by name in each layer module ------------------------------
    Swap(L + "gla:chunk_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "gla:fused_chunk_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "gla:fused_recurrent_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "hgrn2:chunk_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "hgrn2:fused_chunk_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "hgrn2:fused_recurrent_gla", gla, "fla.ops.gla.naive.naive_recurrent_gla"),
    Swap(L + "simple_gla:chunk_simple_gla", simple_gla, "fla.ops.simple_gla.naive.naive_recurrent_simple_gla"),
    Swap(L + "simple_gla:fused_recurrent_simple_gla", simple_gla,
         "fla.ops.simple_gla.naive.naive_recurrent_simple_gla"),
    Swap(L + "delta_net:chunk_delta_rule", delta_rule, "fla.ops.delta_rule.naive.delta_rule_recurrence"),
    Swap(L + "delta_net:fused_recurrent_delta_rule", delta_rule,
         "fla.ops.delta_rule.naive.delta_rule_recurrence"),
    Swap(L + "gated_deltanet:chunk_gated_delta_rule", gated_delta_rule,
         "fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule"),
    Swap(L + "gated_deltanet:fused_recurrent_gated_delta_rule", gated_delta_rule,
         "fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule"),
    Swap(L + "multiscale_retention:chunk_retention", retention, "fla.ops.retention.naive.naive_retention"),
    Swap(L + "multiscale_retention:fused_chunk_retention", retention, "fla.ops.retention.naive.naive_retention"),
    Swap(L + "multiscale_retention:parallel_retention", retention, "fla.ops.retention.naive.naive_retention"),
    Swap(L + "multiscale_retention:fused_recurrent_retention", retention,
         "fla.ops.retention.naive.naive_retention"),
    Swap(L + "rwkv6:chunk_rwkv6", rwkv6, "fla.ops.rwkv6.recurrent_naive.naive_recurrent_rwkv6"),
    Swap(L + "rwkv6:fused_recurrent_rwkv6", rwkv6, "fla.ops.rwkv6.recurrent_naive.naive_recurrent_rwkv6"),
    Swap(L + "based:parallel_based", based, "fla.ops.based.naive.naive_parallel_based"),
    Swap(L + "based:chunk_linear_attn", linear_attn, "fla.ops.linear_attn.naive.naive_recurrent_linear_attn"),
    Swap(L + "based:fused_chunk_linear_attn", linear_attn,
         "fla.ops.linear_attn.naive.naive_recurrent_linear_attn"),
    Swap(L + "linear_attn:chunk_linear_attn", linear_attn,
         "fla.ops.linear_attn.naive.naive_recurrent_linear_attn"),
    Swap(L + "linear_attn:fused_chunk_linear_attn", linear_attn,
         "fla.ops.linear_attn.naive.naive_recurrent_linear_attn"),
    Swap(L + "linear_attn:fused_recurrent_linear_attn", linear_attn,
         "fla.ops.linear_attn.naive.naive_recurrent_linear_attn"),
    Swap(L + "gsa:chunk_gsa", gsa, "fla.ops.gsa.naive.naive_recurrent_gsa"),
    Swap(L + "gsa:fused_recurrent_gsa", gsa, "fla.ops.gsa.naive.naive_recurrent_gsa"),
    # -- short convolution ----------------------------------------------------------------------
    Swap("fla.modules.causal_conv1d.ops:ShortConvolution.forward", short_convolution_forward,
         "torch depthwise F.conv1d, causal padding, optional silu"),
    Swap(L + "gated_deltanet:causal_conv1d", causal_conv1d,
         "torch depthwise F.conv1d (GatedDeltaNet's fused q/k/v conv path)"),
    # -- norms ----------------------------------------------------------------------------------
    Swap(NORM + ":RMSNorm.forward", rms_norm_forward, "torch RMSNorm (fla.modules.layernorm.rms_norm_ref maths)"),
    Swap(NORM + ":GroupNorm.forward", group_norm_forward, "torch GroupNorm (fla group_norm_ref maths)"),
    Swap(FGATE + ":FusedRMSNormGated.forward", fused_rms_norm_gated_forward, "torch RMSNorm(x) · swish/sigmoid(g)"),
    Swap(L + "hgrn2:rms_norm_linear", rms_norm_linear, "torch Linear(RMSNorm(x))"),
    Swap(L + "gsa:rms_norm_linear", rms_norm_linear, "torch Linear(RMSNorm(x))"),
    # -- rotary, token shift, activations, MLP --------------------------------------------------
    Swap("fla.modules.rotary.ops:rotary_embedding", rotary_embedding,
         "fla.modules.rotary.ops.rotary_embedding_ref"),
    Swap(L + "rwkv6:token_shift", token_shift, "fla.modules.token_shift.token_shift_ref"),
    Swap(ACT + ":swish_fwd", swish_fwd, "torch silu (used by fla's swish / ACT2FN['swish'] / SwishFeatureMap)"),
    Swap(ACT + ":swish_bwd", swish_bwd, "torch silu derivative"),
    Swap(ACT + ":sigmoid_fwd", sigmoid_fwd, "torch sigmoid"),
    Swap(ACT + ":sigmoid_bwd", sigmoid_bwd, "torch sigmoid derivative"),
    Swap(ACT + ":logsigmoid_fwd", logsigmoid_fwd, "torch logsigmoid / temperature"),
    Swap(ACT + ":logsigmoid_bwd", logsigmoid_bwd, "torch logsigmoid derivative"),
    Swap("fla.modules.mlp:swiglu", swiglu, "torch silu(x) · y (GatedMLP, fuse_swiglu=False)"),
    Swap("fla.modules.mlp:swiglu_linear", swiglu_linear, "torch Linear(silu(x) · y) (GatedMLP, fuse_swiglu=True)"),
)


# ---------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------
_lock = threading.RLock()
_originals: dict[str, tuple[Any, str, Any]] = {}  # target -> (owner, attribute, original object)


def _first_tensor(args, kwargs) -> torch.Tensor | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a
    return None


def _dispatching(original: Callable, replacement: Callable, target: str) -> Callable:
    """Call ``replacement`` for CPU tensors, ``original`` (the Triton path) for anything else."""

    def swapped(*args, **kwargs):
        t = _first_tensor(args, kwargs)
        if t is not None and t.device.type == "cpu":
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    swapped.__name__ = getattr(original, "__name__", target)
    swapped.__doc__ = f"fla_cpu swap of {target}: {replacement.__doc__ or replacement.__name__}"
    swapped.__wrapped_original__ = original  # type: ignore[attr-defined]
    swapped.__fla_cpu_target__ = target  # type: ignore[attr-defined]
    return swapped


def _resolve(target: str) -> tuple[Any, str]:
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, attr = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    return owner, attr


def install() -> None:
    """Patch every target in :data:`SWAPS` (idempotent).  Imports fla (slow: seconds)."""
    with _lock:
        for swap in SWAPS:
            if swap.target in _originals:
                continue
            owner, attr = _resolve(swap.target)
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            setattr(owner, attr, _dispatching(original, swap.replacement, swap.target))
            _originals[swap.target] = (owner, attr, original)


def uninstall() -> None:
    """Restore every original object that :func:`install` replaced."""
    with _lock:
        for target in list(_originals):
            owner, attr, original = _originals.pop(target)
            setattr(owner, attr, original)


def is_installed() -> bool:
    with _lock:
        return bool(_originals)


def current(target: str) -> Any:
    """The object now bound at ``target`` (for tests: is it the original?)."""
    owner, attr = _resolve(target)
    return owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)


@contextmanager
def cpu_reference() -> Iterator[None]:
    """``with cpu_reference(): ...`` installs the swaps; restores the previous state on exit."""
    with _lock:
        was = is_installed()
        install()
    try:
        yield
    finally:
        if not was:
            uninstall()
