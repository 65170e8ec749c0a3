"""fla's Triton modules and small fused ops in pure torch: short conv, norms, rotary, token shift.

Each function takes the signature of the fla function (or ``Module.forward``) it stands in
for and computes the same maths in torch, float32 inside, output in the input's dtype;
where fla ships a reference (``rotary_embedding_ref``, ``token_shift_ref``) it is called.
:mod:`recallbench.adapters.cpu.fla_swaps` says which fla name each one replaces.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .fla_kernels import no_varlen


def causal_conv1d(x, weight, bias=None, residual=None, initial_state=None, output_final_state=False,
                  activation=None, cu_seqlens=None, **_):
    """fla's causal_conv1d: depthwise causal conv over (B, T, D) with weight (D, W), optional silu."""
    no_varlen(cu_seqlens, "causal_conv1d")
    B, T, D = x.shape
    W = weight.shape[-1]
    xt = x.transpose(1, 2)  # (B, D, T)
    if initial_state is not None:  # (B, D, W): the last W inputs of the previous call
        xt_full = torch.cat([initial_state[..., 1:].to(x.dtype), xt], dim=-1)
        y = F.conv1d(xt_full, weight.unsqueeze(1), bias, groups=D)
    else:
        y = F.conv1d(xt, weight.unsqueeze(1), bias, padding=W - 1, groups=D)[..., :T]
    y = y.transpose(1, 2).contiguous()  # a strided y sends silu's backward to a non-vectorised path
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


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y


def _rms(x, weight, bias, eps):
    xf = x.float()
    return _affine(xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps), weight, bias)


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
    if not self.is_rms_norm:  # a layer norm per group: torch's layer_norm, the same maths
        xf = x_in.float()
        w, b = (None if t is None else t.float() for t in (self.weight, self.bias))
        if G == 1:
            y = F.layer_norm(xf, xf.shape[-1:], w, b, self.eps)
        else:
            y = _affine(F.layer_norm(xf.unflatten(-1, (G, -1)), (xf.shape[-1] // G,),
                                     eps=self.eps).flatten(-2), w, b)
        return (y.to(x.dtype), res) if prenorm else y.to(x.dtype)
    xf = x_in.float().unflatten(-1, (G, -1))
    y = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)).flatten(-2)
    y = _affine(y, self.weight, self.bias).to(x.dtype)
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
    no_varlen(cu_seqlens, "rotary_embedding")
    if not isinstance(seqlen_offsets, int):
        raise NotImplementedError("fla CPU swap: rotary_embedding with per-sequence offsets has no CPU reference")
    from fla.modules.rotary.ops import rotary_embedding_ref
    T = x.shape[1]
    c, s = cos[seqlen_offsets:seqlen_offsets + T], sin[seqlen_offsets:seqlen_offsets + T]
    return rotary_embedding_ref(x.float(), c.float(), s.float(), interleaved).to(x.dtype)


def token_shift(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla.modules.token_shift.token_shift -> fla's own token_shift_ref (x_{t-1} - x_t)."""
    if cache is not None or output_cache:
        raise NotImplementedError("fla CPU swap: token_shift with a cache has no CPU reference")
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
