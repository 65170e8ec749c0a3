"""Which of flash-linear-attention's Triton functions get which pure-torch reference on CPU.

:data:`SWAPS` is the ONE place where recallbench replaces fla's kernels, so that fla's
real layer classes (their projections, gates, initialisation) run on a CPU.  It is a
dispatching :class:`~recallbench.adapters.kernel_swap.SwapSet`: a swapped name sends CPU
tensors to the torch function and anything else to fla's original, so the fla adapters
keep it installed once they have built a model on CPU, and CUDA models are untouched.
The recurrences are chunked forms (:mod:`~recallbench.adapters.cpu.fla_chunked_gla`, …),
each tested against its counterpart in :mod:`~recallbench.adapters.cpu.fla_kernels` (fla's
own ``fla/ops/<op>/naive.py``, which Based still uses); the rest is
:mod:`~recallbench.adapters.cpu.fla_modules`.
"""
from __future__ import annotations

from recallbench.adapters.kernel_swap import Swap, SwapSet

from . import fla_chunked_gla as G
from . import fla_kernels as K
from . import fla_modules as M

_NAIVE = "fla.ops.{}.naive.{}"
_CHUNKED = "chunked form, tested against "

# recurrent kernels, looked up by name in each layer module fla.layers.<module>:
# (replacement, the fla reference it calls or is tested against, "<layer module>:<kernel name>")
_RECURRENCES = (
    (G.gla, _CHUNKED + _NAIVE.format("gla", "naive_recurrent_gla"),
     ("gla:chunk_gla", "gla:fused_chunk_gla", "gla:fused_recurrent_gla",
      "hgrn2:chunk_gla", "hgrn2:fused_chunk_gla", "hgrn2:fused_recurrent_gla")),
    (G.simple_gla, _CHUNKED + _NAIVE.format("simple_gla", "naive_recurrent_simple_gla"),
     ("simple_gla:chunk_simple_gla", "simple_gla:fused_recurrent_simple_gla")),
    # the delta rules in chunked form (fla_chunked_delta), tested against fla's recurrent references
    ("recallbench.adapters.cpu.fla_chunked_delta:delta_rule",
     "chunked WY form, tested against " + _NAIVE.format("delta_rule", "delta_rule_recurrence"),
     ("delta_net:chunk_delta_rule", "delta_net:fused_recurrent_delta_rule")),
    ("recallbench.adapters.cpu.fla_chunked_delta:gated_delta_rule",
     "chunked WY form, tested against " + _NAIVE.format("gated_delta_rule", "naive_recurrent_gated_delta_rule"),
     ("gated_deltanet:chunk_gated_delta_rule", "gated_deltanet:fused_recurrent_gated_delta_rule")),
    (G.retention, _NAIVE.format("retention", "naive_retention") + " (with a state: chunked simple GLA)",
     ("multiscale_retention:chunk_retention", "multiscale_retention:fused_chunk_retention",
      "multiscale_retention:parallel_retention", "multiscale_retention:fused_recurrent_retention")),
    (G.rwkv6, _CHUNKED + "fla.ops.rwkv6.recurrent_naive.naive_recurrent_rwkv6",
     ("rwkv6:chunk_rwkv6", "rwkv6:fused_recurrent_rwkv6")),
    (K.based, _NAIVE.format("based", "naive_parallel_based"), ("based:parallel_based",)),
    (G.linear_attn, _CHUNKED + _NAIVE.format("linear_attn", "naive_recurrent_linear_attn"),
     ("based:chunk_linear_attn", "based:fused_chunk_linear_attn", "linear_attn:chunk_linear_attn",
      "linear_attn:fused_chunk_linear_attn", "linear_attn:fused_recurrent_linear_attn")),
    (G.gsa, _CHUNKED + _NAIVE.format("gsa", "naive_recurrent_gsa"), ("gsa:chunk_gsa", "gsa:fused_recurrent_gsa")),
)

L = "fla.layers."
NORM, FGATE = "fla.modules.norm.layernorm", "fla.modules.norm.fused_norm_gate"
ACT = "fla.modules.activations.ops"

_MODULES = (
    # -- short convolution ----------------------------------------------------------------------
    Swap("fla.modules.causal_conv1d.ops:ShortConvolution.forward", M.short_convolution_forward,
         "torch depthwise F.conv1d, causal padding, optional silu"),
    Swap(L + "gated_deltanet:causal_conv1d", M.causal_conv1d,
         "torch depthwise F.conv1d (GatedDeltaNet's fused q/k/v conv path)"),
    # -- norms ----------------------------------------------------------------------------------
    Swap(NORM + ":RMSNorm.forward", M.rms_norm_forward, "torch RMSNorm (fla.modules.layernorm.rms_norm_ref maths)"),
    Swap(NORM + ":GroupNorm.forward", M.group_norm_forward, "torch GroupNorm (fla group_norm_ref maths)"),
    Swap(FGATE + ":FusedRMSNormGated.forward", M.fused_rms_norm_gated_forward,
         "torch RMSNorm(x) · swish/sigmoid(g)"),
    Swap(L + "hgrn2:rms_norm_linear", M.rms_norm_linear, "torch Linear(RMSNorm(x))"),
    Swap(L + "gsa:rms_norm_linear", M.rms_norm_linear, "torch Linear(RMSNorm(x))"),
    # -- rotary, token shift, activations, MLP --------------------------------------------------
    Swap("fla.modules.rotary.ops:rotary_embedding", M.rotary_embedding,
         "fla.modules.rotary.ops.rotary_embedding_ref"),
    Swap(L + "rwkv6:token_shift", M.token_shift, "fla.modules.token_shift.token_shift_ref"),
    Swap(L + "rwkv6:RWKV6Attention.forward", "recallbench.adapters.cpu.fla_rwkv6_layer:rwkv6_attention_forward",
         "fla's forward with the five token-shift interpolations as one op (training calls; "
         "fla's forward for a mask, a cache or varlen)"),
    Swap(ACT + ":swish_fwd", M.swish_fwd, "torch silu (used by fla's swish / ACT2FN['swish'] / SwishFeatureMap)"),
    Swap(ACT + ":swish_bwd", M.swish_bwd, "torch silu derivative"),
    Swap(ACT + ":sigmoid_fwd", M.sigmoid_fwd, "torch sigmoid"),
    Swap(ACT + ":sigmoid_bwd", M.sigmoid_bwd, "torch sigmoid derivative"),
    Swap(ACT + ":logsigmoid_fwd", M.logsigmoid_fwd, "torch logsigmoid / temperature"),
    Swap(ACT + ":logsigmoid_bwd", M.logsigmoid_bwd, "torch logsigmoid derivative"),
    Swap("fla.modules.mlp:swiglu", M.swiglu, "torch silu(x) · y (GatedMLP, fuse_swiglu=False)"),
    Swap("fla.modules.mlp:swiglu_linear", M.swiglu_linear, "torch Linear(silu(x) · y) (GatedMLP, fuse_swiglu=True)"),
)

SWAPS = SwapSet(
    "fla CPU references",
    tuple(Swap(L + target, fn, ref) for fn, ref, targets in _RECURRENCES for target in targets) + _MODULES,
    dispatch=True)
