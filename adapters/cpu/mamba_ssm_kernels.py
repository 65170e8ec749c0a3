"""mamba-ssm's kernels in pure torch, built on the references mamba-ssm ships itself.

Each function takes the signature of the mamba-ssm kernel it stands in for;
:mod:`recallbench.adapters.cpu.mamba_ssm_swaps` says which names get them.  Mamba-1's
selective scan has its own module, :mod:`recallbench.adapters.cpu.selective_scan_fused`.

* :func:`causal_conv1d_cpu`: causal-conv1d's ``causal_conv1d_fn`` as shifted multiply-adds
  in the (batch, L, channels) layout.  Bound in ``mamba_simple``, it also sends ``Mamba``
  down its fused branch, to :func:`mamba_inner_cpu`.
* :func:`mamba_inner_cpu`: ``mamba_inner_fn`` (conv, x_proj, dt_proj, selective scan,
  out_proj) as ``mamba_inner_ref`` does it, in the (batch, L, ·) layout throughout: the
  projections' outputs are the scan's inputs as they are, and the scan's output is
  out_proj's input, with no transposing copies (``Mamba``'s unfused branch makes six).

* :func:`chunk_scan_cpu`: ``mamba_chunk_scan_combined`` (Triton) as :func:`ssd_batched`, which is
  ``ssd_minimal_discrete`` (Listing 1 of the Mamba-2 paper) in batched matmuls, with the
  dt / D / z handling of the kernel.
* :func:`split_conv1d_scan_cpu`: ``mamba_split_conv1d_scan_combined`` step by step:
  :func:`causal_conv_blc` + SiLU, :func:`chunk_scan_cpu`, the gated ``rms_norm_ref``, out_proj.
* :func:`layer_norm_fn_cpu` / :func:`rms_norm_fn_cpu`: the Triton layer norms as
  ``layer_norm_ref`` / ``rms_norm_ref``.

``ssd_chunk_scan_combined_ref`` is deliberately NOT used: its gradients in dt, A, B, C are
non-finite (measured: L = 64, A ∈ [−16, 0]), and it fails an assertion when L is not a
multiple of chunk_size (it pads dt but not x).  :func:`chunk_scan_cpu` runs
:func:`ssd_batched` with chunks of ``min(chunk_size, L)`` (the chunking changes the
floating-point order only, not the result), so a short sequence is not padded to 256.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .selective_scan_fused import selective_scan_cpu


class _CausalConv(torch.autograd.Function):
    """The causal depthwise conv in (batch, L, d) with a hand-written backward: each tap is one
    in-place ``addcmul_`` on a shifted slice, forward and backward, with no padded copies
    (autograd through pad, mul and add made three temporaries per tap and kept them all)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        seqlen, width = x.shape[1], weight.shape[1]
        y = x * weight[:, -1] if bias is None else torch.addcmul(bias, x, weight[:, -1])
        for j in range(width - 1):  # a loop over the kernel width, never over time
            shift = width - 1 - j  # this tap reads x_{t − shift}
            if shift < seqlen:
                y[:, shift:].addcmul_(x[:, :seqlen - shift], weight[:, j])
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        seqlen, width = x.shape[1], weight.shape[1]
        grad = grad.contiguous()
        gx = grad * weight[:, -1]
        gw = torch.zeros_like(weight)
        gw[:, -1] = (grad * x).sum((0, 1))
        for j in range(width - 1):
            shift = width - 1 - j
            if shift < seqlen:  # y_t reads x_{t−shift}: x_s gets g_{s+shift} · w_j
                gx[:, :seqlen - shift].addcmul_(grad[:, shift:], weight[:, j])
                gw[:, j] = (grad[:, shift:] * x[:, :seqlen - shift]).sum((0, 1))
        return gx, gw, (grad.sum((0, 1)) if ctx.has_bias else None)


def causal_conv_blc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """Causal depthwise conv of x (batch, L, d) with weight (d, width) [+ bias (d,)] → (batch, L, d).

    y_t = Σ_j w_j ⊙ x_{t−(W−1)+j}: W shifted, scaled copies of x, as conv1d with padding W−1."""
    return _CausalConv.apply(x, weight, bias)


def causal_conv1d_cpu(x, weight, bias=None, seq_idx=None, initial_states=None,
                      return_final_states=False, final_states_out=None, activation=None):
    """causal-conv1d's ``causal_conv1d_fn`` (same signature): x (batch, d, L), weight (d, width)."""
    if seq_idx is not None or initial_states is not None or return_final_states:
        raise NotImplementedError("causal_conv1d_fn with seq_idx or states needs causal-conv1d's kernels")
    y = causal_conv_blc(x.transpose(1, 2).contiguous(), weight, bias)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y.transpose(1, 2)


def mamba_inner_cpu(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                    out_proj_weight, out_proj_bias, A, B=None, C=None, D=None, delta_bias=None,
                    B_proj_bias=None, C_proj_bias=None, delta_softplus=True, checkpoint_lvl=1,
                    b_rms_weight=None, c_rms_weight=None, dt_rms_weight=None,
                    b_c_dt_rms_eps=1e-6):
    """``mamba_inner_fn`` (same signature) as ``mamba_inner_ref``, for real A and input-dependent B, C.

    xz (batch, 2d, L) → out (batch, L, d_model).  The transposes handed to
    ``selective_scan_cpu`` are views of (batch, L, ·) tensors, which is the layout it scans in."""
    if A.is_complex() or B is not None or C is not None or (b_rms_weight, c_rms_weight, dt_rms_weight) != (None,) * 3:
        raise NotImplementedError("mamba_inner_fn with complex A, fixed B/C or B/C/dt norms "
                                  "needs mamba-ssm's CUDA kernels")
    rank, n = delta_proj_weight.shape[1], A.shape[1]
    x, z = xz.transpose(1, 2).chunk(2, dim=-1)  # (batch, L, d) each
    x = F.silu(causal_conv_blc(x.contiguous(), conv1d_weight[:, 0], conv1d_bias))
    dt, B, C = F.linear(x, x_proj_weight).split([rank, n, n], dim=-1)
    if B_proj_bias is not None:
        B = B + B_proj_bias.to(B.dtype)
    if C_proj_bias is not None:
        C = C + C_proj_bias.to(C.dtype)
    delta = F.linear(dt, delta_proj_weight)
    y = selective_scan_cpu(x.transpose(1, 2), delta.transpose(1, 2), A, B.transpose(1, 2),
                           C.transpose(1, 2), D, z.transpose(1, 2), delta_bias, delta_softplus)
    return F.linear(y.transpose(1, 2), out_proj_weight, out_proj_bias)


def ssd_batched(X, A, B, C, block_len, initial_states=None):
    """``ssd_minimal_discrete`` (Listing 1 of the Mamba-2 paper; same arguments and result)
    with each of its multi-operand einsums written as batched matmuls over (b, c, h).

    X (b, l, h, p), A (b, l, h), B and C (b, l, h, n), l a multiple of ``block_len``;
    initial_states (b, 1, h, p, n) or None.  Returns Y (b, l, h, p), final state (b, h, p, n).
    Without opt_einsum, torch contracts ``"bclhn,bcshn,bhcls,bcshp->bclhp"`` left to right
    through a (b, c, l, h, s, n) product; here it is (C Bᵀ ⊙ L) X.
    """
    from mamba_ssm.modules.ssd_minimal import segsum

    b, length, h, p = X.shape
    c = length // block_len
    # (b, c, h, l, ·): batched over b, chunk and head
    Xc, Bc, Cc = (t.reshape(b, c, block_len, h, t.shape[-1]).transpose(2, 3) for t in (X, B, C))
    Ac = A.reshape(b, c, block_len, h).permute(0, 3, 1, 2)  # (b, h, c, l)
    A_cumsum = torch.cumsum(Ac, dim=-1)
    L = torch.exp(segsum(Ac)).transpose(1, 2)  # (b, c, h, l, s)
    y_diag = ((Cc @ Bc.transpose(-1, -2)) * L) @ Xc  # (b, c, h, l, p)
    decay_states = torch.exp(A_cumsum[..., -1:] - A_cumsum).transpose(1, 2)  # (b, c, h, l)
    states = Xc.transpose(-1, -2) @ (Bc * decay_states[..., None])  # (b, c, h, p, n)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    states = torch.cat([initial_states, states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[..., -1], (1, 0))))  # (b, h, c+1, c+1)
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    decay_out = torch.exp(A_cumsum).transpose(1, 2)[..., None]  # (b, c, h, l, 1)
    y_off = (Cc @ states.transpose(-1, -2)) * decay_out  # (b, c, h, l, p)
    return (y_diag + y_off).transpose(2, 3).reshape(b, length, h, p), final_state


def chunk_scan_cpu(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                   initial_states=None, seq_idx=None, cu_seqlens=None, dt_softplus=False,
                   dt_limit=(0.0, float("inf")), return_final_states=False,
                   return_varlen_states=False):
    """``mamba_chunk_scan_combined`` (same signature) on :func:`ssd_batched`.

    x (b, l, h, p), dt (b, l, h), A (h,), B and C (b, l, g, n) with g | h (head i reads
    group i // (h/g)), D (h,) or (h, p), z (b, l, h, p), dt_bias (h,), initial_states
    (b, h, p, n).  Returns y (b, l, h, p) [, final state (b, h, p, n)].
    """
    if seq_idx is not None or cu_seqlens is not None or return_varlen_states:
        raise NotImplementedError("packed sequences (seq_idx / cu_seqlens) need mamba-ssm's CUDA kernels")
    batch, seqlen, nheads, headdim = x.shape
    ngroups = B.shape[2]
    dtype = x.dtype
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    if tuple(dt_limit) != (0.0, float("inf")):
        dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    xf = x.float()
    Bf = B.float().repeat_interleave(nheads // ngroups, dim=2)
    Cf = C.float().repeat_interleave(nheads // ngroups, dim=2)
    block = max(1, min(chunk_size, seqlen))
    pad = (-seqlen) % block  # zero dt and x: decay 1, no input, so the final state is unchanged
    X, dA, Bp, Cp = xf * dt[..., None], dt * A.float(), Bf, Cf
    if pad:
        X, Bp, Cp = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (X, Bp, Cp))
        dA = F.pad(dA, (0, 0, 0, pad))
    init = None if initial_states is None else initial_states.float()[:, None]
    y, final = ssd_batched(X, dA, Bp, Cp, block, initial_states=init)
    y = y[:, :seqlen]
    if D is not None:
        y = y + xf * (D.float() if D.dim() == 2 else D.float()[:, None])
    if z is not None:
        y = y * F.silu(z.float())
    y = y.to(dtype)
    return (y, final) if return_final_states else y


def split_conv1d_scan_cpu(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size,
                          initial_states=None, seq_idx=None, dt_limit=(0.0, float("inf")),
                          return_final_states=False, activation="silu", rmsnorm_weight=None,
                          rmsnorm_eps=1e-6, outproj_weight=None, outproj_bias=None,
                          headdim=None, ngroups=1, norm_before_gate=True):
    """``mamba_split_conv1d_scan_combined`` (same signature), step by step as its fused forward.

    zxbcdt (b, l, 2·d_mlp + d + d + 2·g·n + h) → split [zx0, z, xBC, dt]; causal depthwise
    conv of xBC (+ SiLU); SSD scan with D; gated RMSNorm in groups of d/g (or z-gating when
    there is no norm); SwiGLU of zx0 prepended; out_proj.
    """
    from mamba_ssm.ops.triton.layernorm_gated import rms_norm_ref

    if D.dim() == 1:
        nheads = D.shape[0]
    else:
        nheads, headdim = D.shape
    batch, seqlen, _ = zxbcdt.shape
    dim = nheads * headdim
    dstate = (conv1d_weight.shape[0] - dim) // ngroups // 2
    d_nonssm = (zxbcdt.shape[-1] - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    zx0, z, xBC, dt = torch.split(zxbcdt, [2 * d_nonssm, dim, dim + 2 * ngroups * dstate, nheads], dim=-1)
    xBC = causal_conv_blc(xBC.contiguous(), conv1d_weight, conv1d_bias)  # (b, l, ·), contiguous
    if activation in ("silu", "swish"):
        xBC = F.silu(xBC)
    x, B, C = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.reshape(batch, seqlen, nheads, headdim)
    B = B.reshape(batch, seqlen, ngroups, dstate)
    C = C.reshape(batch, seqlen, ngroups, dstate)
    zh = z.reshape(batch, seqlen, nheads, headdim)
    res = chunk_scan_cpu(x, dt, A, B, C, chunk_size, D=D, z=None if rmsnorm_weight is not None else zh,
                         dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
                         dt_softplus=True, dt_limit=dt_limit, return_final_states=return_final_states)
    y, final = res if return_final_states else (res, None)
    y = y.reshape(batch, seqlen, dim)
    if rmsnorm_weight is not None:
        y = rms_norm_ref(y, rmsnorm_weight, None, z=z, eps=rmsnorm_eps, group_size=dim // ngroups,
                         norm_before_gate=norm_before_gate)
    if d_nonssm > 0:
        z0, x0 = zx0.chunk(2, dim=-1)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y


def layer_norm_fn_cpu(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6,
                      dropout_p=0.0, rowscale=None, prenorm=False, residual_in_fp32=False,
                      is_rms_norm=False, return_dropout_mask=False):
    """``layer_norm.layer_norm_fn`` (same signature) on ``layer_norm_ref`` / ``rms_norm_ref``."""
    from mamba_ssm.ops.triton import layer_norm as ln

    if return_dropout_mask:
        raise NotImplementedError("return_dropout_mask needs mamba-ssm's Triton layer norm")
    ref = ln.rms_norm_ref if is_rms_norm else ln.layer_norm_ref
    out = ref(x, weight, bias, residual=residual, x1=x1, weight1=weight1, bias1=bias1, eps=eps,
              dropout_p=dropout_p, rowscale=rowscale, prenorm=prenorm)
    if prenorm and residual_in_fp32:  # the fused kernel returns the residual stream in fp32
        out = (*out[:-1], out[-1].float())
    return out


def rms_norm_fn_cpu(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6,
                    dropout_p=0.0, rowscale=None, prenorm=False, residual_in_fp32=False,
                    return_dropout_mask=False):
    """``layer_norm.rms_norm_fn`` (same signature) on ``rms_norm_ref``."""
    return layer_norm_fn_cpu(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale,
                             prenorm, residual_in_fp32, True, return_dropout_mask)
