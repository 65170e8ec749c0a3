"""mamba-ssm's kernels in pure torch, built on the references mamba-ssm ships itself.

Each function takes the signature of the mamba-ssm kernel it stands in for;
:mod:`recallbench.adapters.cpu.mamba_ssm_swaps` says which names get them.

* :func:`selective_scan_cpu`: ``selective_scan_fn`` (the CUDA extension) as mamba-ssm's
  ``selective_scan_ref`` (a Python loop over L), with that reference's O(L²) backward removed.
* :func:`chunk_scan_cpu`: ``mamba_chunk_scan_combined`` (Triton) as ``ssd_minimal_discrete``
  (Listing 1 of the Mamba-2 paper) with the dt / D / z handling of the kernel.
* :func:`split_conv1d_scan_cpu`: ``mamba_split_conv1d_scan_combined`` step by step:
  ``F.conv1d`` + SiLU, :func:`chunk_scan_cpu`, the gated ``rms_norm_ref``, out_proj.
* :func:`layer_norm_fn_cpu` / :func:`rms_norm_fn_cpu`: the Triton layer norms as
  ``layer_norm_ref`` / ``rms_norm_ref``.

``ssd_chunk_scan_combined_ref`` is deliberately NOT used: its gradients in dt, A, B, C are
non-finite (measured: L = 64, A ∈ [−16, 0]), and it fails an assertion when L is not a
multiple of chunk_size (it pads dt but not x).  :func:`chunk_scan_cpu` runs
``ssd_minimal_discrete`` with chunks of ``min(chunk_size, L)`` (the chunking changes the
floating-point order only, not the result), so a short sequence is not padded to 256.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def selective_scan_cpu(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False):
    """mamba-ssm's ``selective_scan_ref`` (same signature, same arithmetic), restructured for speed.

    The reference reads time step i as ``deltaA[:, :, i]``; autograd turns each such index
    into a zero-filled full-size gradient, so its backward costs O(L²) memory traffic, most
    of a Mamba training step on CPU (``python benchmarks/bench_adapters.py`` times the step).
    Here the L axis is split once with ``unbind`` (one ``stack`` in the backward); every
    other line is the reference's.  Complex A goes to the
    reference unchanged.  Tested equal to ``selective_scan_ref`` (values and gradients).
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    if A.is_complex():
        return selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    is_variable_B = B.dim() >= 3
    is_variable_C = C.dim() >= 3
    B = B.float()
    C = C.float()
    x = A.new_zeros((batch, dim, dstate))
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if not is_variable_B:
        deltaB_u = torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    elif B.dim() == 3:
        deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    else:
        B = B.repeat_interleave(dim // B.shape[1], dim=1)  # "B G N L -> B (G H) N L"
        deltaB_u = torch.einsum("bdl,bdnl,bdl->bdln", delta, B, u)
    if is_variable_C and C.dim() == 4:
        C = C.repeat_interleave(dim // C.shape[1], dim=1)
    steps_A, steps_Bu = deltaA.unbind(2), deltaB_u.unbind(2)
    steps_C = C.unbind(-1) if is_variable_C else None
    ys = []
    for i in range(u.shape[2]):
        x = steps_A[i] * x + steps_Bu[i]
        if not is_variable_C:
            y = torch.einsum("bdn,dn->bd", x, C)
        elif C.dim() == 3:
            y = torch.einsum("bdn,bn->bd", x, steps_C[i])
        else:
            y = torch.einsum("bdn,bdn->bd", x, steps_C[i])
        ys.append(y)
    last_state = x
    y = torch.stack(ys, dim=2)  # (batch dim L)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    out = out.to(dtype=dtype_in)
    return out if not return_last_state else (out, last_state)


def chunk_scan_cpu(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                   initial_states=None, seq_idx=None, cu_seqlens=None, dt_softplus=False,
                   dt_limit=(0.0, float("inf")), return_final_states=False,
                   return_varlen_states=False):
    """``mamba_chunk_scan_combined`` (same signature) on ``ssd_minimal_discrete``.

    x (b, l, h, p), dt (b, l, h), A (h,), B and C (b, l, g, n) with g | h (head i reads
    group i // (h/g)), D (h,) or (h, p), z (b, l, h, p), dt_bias (h,), initial_states
    (b, h, p, n).  Returns y (b, l, h, p) [, final state (b, h, p, n)].
    """
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete

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
    y, final = ssd_minimal_discrete(X, dA, Bp, Cp, block, initial_states=init)
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
    width = conv1d_weight.shape[-1]
    xBC = F.conv1d(xBC.transpose(1, 2), conv1d_weight.unsqueeze(1), conv1d_bias,
                   padding=width - 1, groups=xBC.shape[-1])[..., :seqlen].transpose(1, 2)
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
