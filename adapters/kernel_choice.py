"""Which kernels the library adapters run on a device, decided from facts alone.

Each function returns ``(path, reason)`` (paths: :mod:`recallbench.api.kernels`) and is pure:
it reads only its arguments, the facts the adapters gather with
:func:`~recallbench.api.kernels.cuda_capability`, :func:`~recallbench.api.kernels.triton_version`
and :func:`~recallbench.api.kernels.importable`.  Any device but the CPU counts as a GPU.

What the facts decide (mamba-ssm 2.3.2.post1, fla 0.6.0):

* mamba-ssm installed without its CUDA build has no compiled ``selective_scan_cuda``, and
  Mamba-1's scan would raise in the middle of training: the adapter runs recallbench's torch
  selective scan (:mod:`recallbench.adapters.cpu.selective_scan_fused`) on the GPU instead.  Mamba-2's scan is Triton and needs no
  extension; without causal-conv1d both layers run their short conv in torch.
* fla refuses its gated chunk backward (``chunk_bwd_dqkwg`` with a gate: simple GLA,
  GatedDeltaNet) on Hopper (compute capability 9.x) with 3.4.0 <= Triton < 3.7.1, unless
  tilelang is installed (fla issue #640); it raises in the first backward.  The adapter
  routes that kernel to recallbench's pure-torch form of it (:mod:`recallbench.adapters.cpu.fla_swaps`)
  on the GPU instead.
"""
from __future__ import annotations

import re

from recallbench.api.kernels import FUSED, REFERENCE, UNAVAILABLE

FIX = "bash install.sh --cuda"
FLA_BROKEN_FROM, FLA_FIXED_IN = (3, 4, 0), (3, 7, 1)  # Triton releases of fla issue #640
HOPPER = 9  # compute capability major


def release(version: str | None) -> tuple[int, ...]:
    """``"3.6.0+git1234"`` -> (3, 6, 0): the leading numeric release of a version text."""
    m = re.match(r"\d+(?:\.\d+)*", version or "")
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def mamba1(device_type: str, *, selective_scan: bool, causal_conv1d: bool) -> tuple[str, str]:
    """Mamba-1: the compiled selective scan, or its reference on the GPU without it."""
    if device_type == "cpu":
        return REFERENCE, ("recallbench's CPU kernels in place of mamba-ssm's CUDA ones: a compiled "
                           "selective scan (the torch scan without a C++ compiler), the short conv "
                           "as shifted adds; tested against selective_scan_ref")
    conv = "" if causal_conv1d else "; causal-conv1d is not installed: the short conv runs in torch"
    if selective_scan:
        return FUSED, f"mamba-ssm's selective-scan CUDA kernel{conv}"
    return REFERENCE, ("mamba-ssm's compiled selective_scan_cuda does not import (mamba-ssm was "
                       "installed without its CUDA build): recallbench's torch selective scan "
                       "(tested against selective_scan_ref) runs on the GPU; "
                       f"fix: {FIX}")


def mamba2(device_type: str, *, causal_conv1d: bool) -> tuple[str, str]:
    """Mamba-2: the SSD Triton kernels (no compiled extension needed)."""
    if device_type == "cpu":
        return REFERENCE, ("recallbench's CPU kernels in place of mamba-ssm's Triton ones: Listing 1's "
                           "SSD as batched matmuls (tested against ssd_minimal_discrete), "
                           "rms_norm_ref")
    conv = ("" if causal_conv1d else
            "; causal-conv1d is not installed: the unfused path, short conv in torch")
    return FUSED, f"mamba-ssm's SSD Triton kernels{conv}"


def fla_gated_refused(capability: tuple[int, int] | None, triton: str | None, tilelang: bool) -> bool:
    """Whether fla 0.6.0 refuses its gated chunk backward on this GPU (fla issue #640)."""
    return (capability is not None and capability[0] == HOPPER and not tilelang
            and FLA_BROKEN_FROM <= release(triton) < FLA_FIXED_IN)


def fla(device_type: str, *, references: tuple[str, ...], missing_reference: str | None,
        refused: tuple[str, ...], capability: tuple[int, int] | None, triton: str | None,
        tilelang: bool) -> tuple[str, str]:
    """An fla layer: its Triton kernels, or the pure-torch references named in ``references``
    (``missing_reference``: one that this fla lacks) for the kernels in ``refused``."""
    if device_type == "cpu":
        return REFERENCE, ("recallbench's pure-torch forms of fla's kernels (chunked where fla's "
                           f"loop over time; tested against {', '.join(references)})")
    if not refused or not fla_gated_refused(capability, triton, tilelang):
        return FUSED, "fla's Triton kernels"
    why = (f"fla refuses {', '.join(refused)} on Hopper (compute capability "
           f"{capability[0]}.{capability[1]}) with Triton {triton} < 3.7.1 (fla issue #640)")
    fix = f"fix: Triton >= 3.7.1 ({FIX}) or pip install tilelang"
    if missing_reference:
        return UNAVAILABLE, f"{why}, and this fla has no pure-torch {missing_reference}; {fix}"
    return REFERENCE, f"{why}: recallbench's pure-torch form of it runs on the GPU; {fix}"
