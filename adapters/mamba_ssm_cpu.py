"""Run mamba-ssm's real ``Mamba`` and ``Mamba2`` on a CPU: the ONE place where its kernels are swapped.

mamba-ssm (2.3.2) is written for CUDA: its selective scan is a compiled extension
(``selective_scan_cuda``), and Mamba-2's chunked scan and its norms are Triton kernels.
It also ships pure-PyTorch references of them.  This module

1. imports ``mamba_ssm`` on a machine where the CUDA extension was not built
   (``MAMBA_SKIP_CUDA_BUILD=TRUE``), behind a stub ``selective_scan_cuda`` whose
   functions raise (:func:`import_mamba_ssm`); and
2. swaps, explicitly and reversibly, the kernels that mamba-ssm's modules call for its
   own references (:data:`SWAPS`, one swap per line), only while a model runs on the CPU:
   :func:`kernels_for` gives :func:`cpu_kernels` (``install()`` ... ``uninstall()``) for a
   CPU tensor and a no-op for a CUDA one, so the fused kernels stay untouched on CUDA.

The references used (all from mamba-ssm itself, or thin wrappers around them here):

====================================  ==================================================
kernel called by mamba-ssm            pure-torch replacement
====================================  ==================================================
``selective_scan_fn`` (CUDA)          :func:`selective_scan_cpu` = ``selective_scan_ref`` (a
                                      Python loop over L) with its O(L²) backward removed
``mamba_chunk_scan_combined``         :func:`chunk_scan_cpu` = ``ssd_minimal_discrete``
                                      (Listing 1 of the Mamba-2 paper) + dt / D / z handling
``mamba_split_conv1d_scan_combined``  :func:`split_conv1d_scan_cpu`: ``F.conv1d`` + SiLU,
                                      :func:`chunk_scan_cpu`, ``rms_norm_ref`` (gated), out_proj
gated ``rmsnorm_fn`` (Triton)         ``layernorm_gated.rms_norm_ref``
``layer_norm_fn`` / ``rms_norm_fn``   ``layer_norm.layer_norm_ref`` / ``rms_norm_ref``
``causal_conv1d_fn`` / ``_update``    ``None``: the modules' own ``nn.Conv1d`` fallback
``selective_state_update`` (Triton)   ``None``: the modules' pure-torch ``step()`` branch
====================================  ==================================================

``ssd_chunk_scan_combined_ref`` is deliberately NOT used: its gradients in dt, A, B, C are
non-finite (measured: L = 64, A ∈ [−16, 0]), and it fails an assertion when L is not a
multiple of chunk_size (it pads dt but not x).
:func:`chunk_scan_cpu` runs ``ssd_minimal_discrete`` with chunks of ``min(chunk_size, L)``
(the chunking changes the floating-point order only, not the result), so a short sequence
is not padded to 256.

Caveats:

* The swap patches module attributes, i.e. it is process-wide while installed
  (reference-counted, so nested ``cpu_kernels()`` are fine); do not run a CUDA mamba-ssm
  model in another thread while a CPU one is inside ``cpu_kernels()``.
* transformers (>= 5) binds its Mamba / Mamba-2 kernels when its modeling module is first
  imported: to mamba-ssm's if ``import mamba_ssm`` succeeds, else to its torch code.  Once
  :func:`import_mamba_ssm` has made ``mamba_ssm`` importable on a CPU machine, a
  transformers Mamba imported AFTER it binds to mamba-ssm's CUDA/Triton kernels and fails
  on the CPU.  Import transformers' ``modeling_mamba`` / ``modeling_mamba2`` first if you
  need them (the tests do).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
import threading
import types
from typing import Any, Iterator

import torch
import torch.nn.functional as F

INSTALL_HINT = (
    "pip install recallbench[mamba], then MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "
    "pip install -c constraints.txt --no-build-isolation --no-deps mamba-ssm==2.3.2.post1")

# (module, attribute, replacement): one swap per line.  A replacement "ref:<module>:<name>"
# is a function of mamba-ssm itself, "cpu:<name>" one of this module, None is None.
SWAPS: tuple[tuple[str, str, str | None], ...] = (
    # Mamba (mamba_simple): the selective scan, the CUDA extension -> mamba-ssm's Python-loop
    # reference selective_scan_ref, with its O(L^2) backward fixed (see selective_scan_cpu)
    ("mamba_ssm.modules.mamba_simple", "selective_scan_fn", "cpu:selective_scan_cpu"),
    # the same name in its home module, for callers that look it up there (ssd_selective_scan)
    ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn", "cpu:selective_scan_cpu"),
    # Mamba: no causal-conv1d kernel -> nn.Conv1d, and the fused mamba_inner_fn path is skipped
    ("mamba_ssm.modules.mamba_simple", "causal_conv1d_fn", None),
    ("mamba_ssm.modules.mamba_simple", "causal_conv1d_update", None),
    # Mamba.step (decoding): Triton selective_state_update -> its pure-torch branch
    ("mamba_ssm.modules.mamba_simple", "selective_state_update", None),
    # Mamba2, use_mem_eff_path=True (the default): the fused conv+scan+norm+out_proj kernel
    ("mamba_ssm.modules.mamba2", "mamba_split_conv1d_scan_combined", "cpu:split_conv1d_scan_cpu"),
    # Mamba2, use_mem_eff_path=False: the Triton chunked scan -> ssd_minimal_discrete
    ("mamba_ssm.modules.mamba2", "mamba_chunk_scan_combined", "cpu:chunk_scan_cpu"),
    # Mamba2: no causal-conv1d kernel -> nn.Conv1d
    ("mamba_ssm.modules.mamba2", "causal_conv1d_fn", None),
    ("mamba_ssm.modules.mamba2", "causal_conv1d_update", None),
    # Mamba2.step (decoding): Triton selective_state_update -> its pure-torch branch
    ("mamba_ssm.modules.mamba2", "selective_state_update", None),
    # Mamba2's gated RMSNorm module (layernorm_gated.RMSNorm.forward): Triton -> rms_norm_ref
    ("mamba_ssm.ops.triton.layernorm_gated", "rmsnorm_fn",
     "ref:mamba_ssm.ops.triton.layernorm_gated:rms_norm_ref"),
    # mamba_ssm's RMSNorm / Block(fused_add_norm) / MixerModel: Triton layer norms -> references
    ("mamba_ssm.ops.triton.layer_norm", "layer_norm_fn", "cpu:layer_norm_fn_cpu"),
    ("mamba_ssm.ops.triton.layer_norm", "rms_norm_fn", "cpu:rms_norm_fn_cpu"),
    ("mamba_ssm.modules.block", "layer_norm_fn", "cpu:layer_norm_fn_cpu"),
    ("mamba_ssm.models.mixer_seq_simple", "layer_norm_fn", "cpu:layer_norm_fn_cpu"),
    ("mamba_ssm.models.mixer_seq_simple", "rms_norm_fn", "cpu:rms_norm_fn_cpu"),
)

_STUB_NAME = "selective_scan_cuda"
_lock = threading.RLock()
_depth = 0  # nesting depth of install()
_saved: list[tuple[types.ModuleType, str, Any]] = []  # what install() replaced, for uninstall()


# -- importing --------------------------------------------------------------------------

class _MissingExtension(types.ModuleType):
    """Stands in for the unbuilt ``selective_scan_cuda``: any use raises, naming the fix."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(
            f"selective_scan_cuda.{name}: mamba-ssm's CUDA extension was not built on this "
            "machine; on a CPU run the model inside recallbench.adapters.mamba_ssm_cpu."
            "cpu_kernels()")


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a broken or None entry in sys.modules
        return None


@functools.lru_cache(maxsize=None)
def import_mamba_ssm() -> types.ModuleType:
    """``import mamba_ssm``, behind a stub ``selective_scan_cuda`` if the extension is absent.

    Raises ImportError (with the install hint) if mamba-ssm or one of its dependencies
    (einops, triton, huggingface_hub) is missing.
    """
    if _find_spec("mamba_ssm") is None:
        raise ImportError(f"mamba-ssm is not installed ({INSTALL_HINT})")
    stubbed = False
    if _STUB_NAME not in sys.modules and _find_spec(_STUB_NAME) is None:
        sys.modules[_STUB_NAME] = _MissingExtension(_STUB_NAME)
        stubbed = True
    try:
        module = importlib.import_module("mamba_ssm")
        for name in ("mamba_ssm.modules.mamba_simple", "mamba_ssm.modules.mamba2",
                     "mamba_ssm.modules.block", "mamba_ssm.models.mixer_seq_simple",
                     "mamba_ssm.modules.ssd_minimal"):
            importlib.import_module(name)
    except Exception:
        if stubbed:
            sys.modules.pop(_STUB_NAME, None)
        raise
    return module


@functools.lru_cache(maxsize=None)
def availability() -> tuple[bool, str]:
    """(True, "") if mamba-ssm imports here (on CPU through the stub), else (False, why)."""
    if _find_spec("mamba_ssm") is None:
        return False, f"mamba-ssm is not installed ({INSTALL_HINT})"
    try:
        import_mamba_ssm()
    except Exception as exc:  # a missing dependency, a broken build
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, f"mamba-ssm is installed but cannot be imported: {first}"
    return True, ""


def has_cuda_extension() -> bool:
    """Whether mamba-ssm's compiled ``selective_scan_cuda`` is really there (not our stub)."""
    import_mamba_ssm()
    return not isinstance(sys.modules.get(_STUB_NAME), _MissingExtension)


# -- the swap ---------------------------------------------------------------------------

def _resolve(spec: str | None) -> Any:
    if spec is None:
        return None
    kind, _, rest = spec.partition(":")
    if kind == "cpu":
        return globals()[rest]
    module, _, name = rest.partition(":")
    return getattr(importlib.import_module(module), name)


def install() -> None:
    """Swap mamba-ssm's kernels for the references in :data:`SWAPS` (nestable)."""
    global _depth
    with _lock:
        if _depth == 0:
            import_mamba_ssm()
            plan = [(importlib.import_module(m), attr, _resolve(spec)) for m, attr, spec in SWAPS]
            for module, attr, new in plan:
                _saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, new)
        _depth += 1


def uninstall() -> None:
    """Undo one :func:`install`; the outermost one puts every original back."""
    global _depth
    with _lock:
        if _depth == 0:
            raise RuntimeError("mamba_ssm_cpu.uninstall() without install()")
        _depth -= 1
        if _depth == 0:
            while _saved:
                module, attr, old = _saved.pop()
                setattr(module, attr, old)


def installed() -> bool:
    return _depth > 0


@contextlib.contextmanager
def cpu_kernels() -> Iterator[None]:
    """``with cpu_kernels(): model(x)``: mamba-ssm's references in place of its kernels."""
    install()
    try:
        yield
    finally:
        uninstall()


def kernels_for(device: torch.device) -> contextlib.AbstractContextManager:
    """:func:`cpu_kernels` for a CPU tensor's device, a no-op otherwise (CUDA keeps the kernels)."""
    return cpu_kernels() if device.type == "cpu" else contextlib.nullcontext()


# -- the replacements that need a wrapper ---------------------------------------------------

def selective_scan_cpu(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False):
    """mamba-ssm's ``selective_scan_ref`` (same signature, same arithmetic), restructured for speed.

    The reference reads time step i as ``deltaA[:, :, i]``; autograd turns each such index
    into a zero-filled full-size gradient, so its backward costs O(L²) memory traffic (80 % of
    a Mamba training step at L = 64).  Here the L axis is split once with ``unbind`` (one
    ``stack`` in the backward); every other line is the reference's.  Complex A goes to the
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
