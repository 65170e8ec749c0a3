"""Which of mamba-ssm's kernels get which pure-torch reference, while a model runs on a CPU.

:data:`SWAPS` is the ONE place where recallbench replaces mamba-ssm's kernels, so that its
real ``Mamba`` and ``Mamba2`` run on a CPU.  Some swaps bind a name to ``None`` (then the
modules take their own pure-torch branch), so the set does not dispatch per call: the
mamba adapters install it around each CPU forward only, and on CUDA the fused kernels stay
untouched, except for a Mamba-1 whose compiled ``selective_scan_cuda`` does not import: its
blocks run inside the set on the GPU too (``MixerBlock(reference=True)``; the replacements
are plain torch).  The swap is process-wide while installed (reference-counted, so nested
uses are fine): do not run a CUDA mamba-ssm model on its kernels in another thread while
another model is inside ``SWAPS.applied()``.
"""
from __future__ import annotations

from recallbench.adapters.kernel_swap import Swap, SwapSet

from . import mamba_ssm_kernels as K
from .mamba_ssm_import import import_mamba_ssm
from .selective_scan_fused import selective_scan_cpu

SIMPLE, MAMBA2 = "mamba_ssm.modules.mamba_simple", "mamba_ssm.modules.mamba2"
LN, LN_GATED = "mamba_ssm.ops.triton.layer_norm", "mamba_ssm.ops.triton.layernorm_gated"
NO_KERNEL = "None: the module's own pure-torch branch"

SWAPS = SwapSet("mamba-ssm CPU references", (
    # Mamba (mamba_simple): the selective scan, the CUDA extension
    Swap(SIMPLE + ":selective_scan_fn", selective_scan_cpu,
         "selective_scan_ref's recurrence, fused backward"),
    # the same name in its home module, for callers that look it up there (ssd_selective_scan)
    Swap("mamba_ssm.ops.selective_scan_interface:selective_scan_fn", selective_scan_cpu,
         "selective_scan_ref's recurrence, fused backward"),
    # Mamba: causal-conv1d's kernel as shifted adds; being bound, it also sends Mamba.forward
    # down its fused branch, mamba_inner_fn, in the (batch, L, ·) layout with no transposes
    Swap(SIMPLE + ":causal_conv1d_fn", K.causal_conv1d_cpu, "shifted multiply-adds, (b, L, d)"),
    Swap(SIMPLE + ":mamba_inner_fn", K.mamba_inner_cpu, "mamba_inner_ref, (b, L, ·) layout"),
    Swap(SIMPLE + ":causal_conv1d_update", None, NO_KERNEL),
    # Mamba.step (decoding): Triton selective_state_update -> its pure-torch branch
    Swap(SIMPLE + ":selective_state_update", None, NO_KERNEL),
    # Mamba2, use_mem_eff_path=True (the default): the fused conv+scan+norm+out_proj kernel
    Swap(MAMBA2 + ":mamba_split_conv1d_scan_combined", K.split_conv1d_scan_cpu,
         "shifted-add conv + SiLU, ssd_minimal_discrete as batched matmuls, rms_norm_ref, out_proj"),
    # Mamba2, use_mem_eff_path=False: the Triton chunked scan
    Swap(MAMBA2 + ":mamba_chunk_scan_combined", K.chunk_scan_cpu, "ssd_minimal_discrete as batched matmuls"),
    # Mamba2: no causal-conv1d kernel -> nn.Conv1d
    Swap(MAMBA2 + ":causal_conv1d_fn", None, NO_KERNEL),
    Swap(MAMBA2 + ":causal_conv1d_update", None, NO_KERNEL),
    # Mamba2.step (decoding): Triton selective_state_update -> its pure-torch branch
    Swap(MAMBA2 + ":selective_state_update", None, NO_KERNEL),
    # Mamba2's gated RMSNorm module (layernorm_gated.RMSNorm.forward)
    Swap(LN_GATED + ":rmsnorm_fn", LN_GATED + ":rms_norm_ref", "layernorm_gated.rms_norm_ref"),
    # mamba_ssm's RMSNorm / Block(fused_add_norm) / MixerModel: the Triton layer norms
    Swap(LN + ":layer_norm_fn", K.layer_norm_fn_cpu, "layer_norm_ref / rms_norm_ref"),
    Swap(LN + ":rms_norm_fn", K.rms_norm_fn_cpu, "rms_norm_ref"),
    Swap("mamba_ssm.modules.block:layer_norm_fn", K.layer_norm_fn_cpu, "layer_norm_ref / rms_norm_ref"),
    Swap("mamba_ssm.models.mixer_seq_simple:layer_norm_fn", K.layer_norm_fn_cpu,
         "layer_norm_ref / rms_norm_ref"),
    Swap("mamba_ssm.models.mixer_seq_simple:rms_norm_fn", K.rms_norm_fn_cpu, "rms_norm_ref"),
), dispatch=False, before_install=import_mamba_ssm)
