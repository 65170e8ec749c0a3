"""``mamba2``: Mamba-2 blocks with the four head patterns of Thm 4.7.

Which layer serves which pattern (M = ``n_heads`` heads of width P = expand·D / M):

=======  =====  =====  =====  ========================================================
pattern  B      C      x      layer
=======  =====  =====  =====  ========================================================
mva      shared shared head   ``mamba_ssm.Mamba2(ngroups=1)``: Mamba-2's default; the adapter's
mha      head   head   head   ``mamba_ssm.Mamba2(ngroups=M)``
mqa      shared head   shared :class:`SharedXMamba2` (this module)
mka      head   shared shared :class:`SharedXMamba2` (this module)
=======  =====  =====  =====  ========================================================

mamba-ssm's ``ngroups`` shares B and C together and never x, so MQA and MKA (x shared by
all heads) are recallbench's own layer, a copy of Mamba2's structure
(in_proj → [z, x, B, C, Δ]; causal depthwise conv + SiLU over [x, B, C]; the SSD scan
h_t = exp(Δ_t A) h_{t−1} + Δ_t x_t B_tᵀ, y_t = h_t C_t + D x_t; gated RMSNorm(y · SiLU(z));
out_proj) in which x is one P-vector broadcast to the M heads.  It runs the same scan
as Mamba2: mamba-ssm's ``mamba_chunk_scan_combined`` on CUDA, and on a CPU
:func:`recallbench.adapters.cpu.mamba_ssm_kernels.chunk_scan_cpu`, mamba-ssm's
``ssd_minimal_discrete`` (tests check it against mamba_ssm.Mamba2 where the two coincide:
an MHA Mamba2 whose x (and, for MQA, B and Δ) rows are copies across heads).

MQA shares Δ and A as well: then all heads write the SAME state (B and x shared) and
differ only in how they read it (C per head), like attention's MQA with one KV cache.
MKA keeps Δ and A per head, as Mamba2 does.

State (SSM state only; the conv's (d_conv − 1)·channels buffer is not counted, as in the paper):
mva, mha, mka: Λ · M · P · N = Λ · expand · D · N (M distinct P×N states per layer);
mqa: Λ · P · N = Λ · expand · D · N / M (one P×N state per layer, read by M queries).

Config: ``n_heads`` → nheads (headdim = expand·D / n_heads), ``d_state``, ``d_conv`` (the
paper uses 2; mamba-ssm defaults to 4), ``expand``; ``options.chunk_size`` (SSD chunk length;
the CPU scan uses min(chunk_size, L)).  Blocks are stacked as mamba-ssm's MixerModel does
(see :mod:`recallbench.adapters.mamba`).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from recallbench.api import kernels
from recallbench.api.fields import check_range, fail, from_mapping
from recallbench.api.registry import ADAPTERS

from . import heads, kernel_choice
from .cpu.mamba_ssm_import import import_mamba_ssm
from .cpu.mamba_ssm_kernels import chunk_scan_cpu
from .mamba import MambaSSMAdapter, MixerBlock, init_like_mixer_model


def ssd_scan(x, dt, A, B, C, chunk_size, D, dt_bias):
    """Mamba-2's chunked scan, with softplus(dt + dt_bias): mamba-ssm's kernel on CUDA, its reference on CPU."""
    if x.is_cuda:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

        return mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias,
                                         dt_softplus=True)
    return chunk_scan_cpu(x, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias, dt_softplus=True)


class SharedXMamba2(nn.Module):
    """A Mamba-2 layer whose x is shared by the heads: head patterns mqa and mka.

    Parameters are named as in ``mamba_ssm.Mamba2`` (in_proj, conv1d, dt_bias, A_log, D,
    norm, out_proj) and laid out the same way, with the shared parts narrower:
    in_proj → [z (d_inner), x (P), B (M_B·N), C (M_C·N), Δ (M_Δ)], M_Δ = 1 for mqa.
    (B, L, D) -> (B, L, D).
    """

    def __init__(self, d_model: int, d_state: int, d_conv: int, expand: int, nheads: int,
                 head_pattern: str, chunk_size: int = 256, norm_groups: int = 1,
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4,
                 A_init_range: tuple[float, float] = (1, 16), device=None):
        super().__init__()
        b_head, c_head, x_head = heads.PATTERNS[head_pattern]
        if x_head:
            raise ValueError(f"SharedXMamba2 serves the shared-x patterns mqa and mka, not {head_pattern}")
        self.head_pattern = head_pattern
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = expand * d_model
        if self.d_inner % nheads:
            raise ValueError(f"d_inner = {self.d_inner} is not divisible by nheads = {nheads}")
        self.nheads, self.headdim = nheads, self.d_inner // nheads
        self.chunk_size = chunk_size
        self.b_heads = nheads if b_head else 1
        self.c_heads = nheads if c_head else 1
        self.dt_heads = 1 if head_pattern == "mqa" else nheads  # mqa: one state, one decay
        self.x_dim = self.headdim
        fk = {"device": device}
        self.conv_dim = self.x_dim + (self.b_heads + self.c_heads) * d_state
        self.in_proj = nn.Linear(d_model, self.d_inner + self.conv_dim + self.dt_heads, bias=False, **fk)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                padding=d_conv - 1, bias=True, **fk)
        # as Mamba2: softplus(dt_bias) log-uniform in [dt_min, dt_max], A uniform in A_init_range
        dt = torch.exp(torch.rand(self.dt_heads, **fk) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.dt_bias._no_weight_decay = True
        A = torch.empty(self.dt_heads, dtype=torch.float32, **fk).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(nheads, **fk))
        self.D._no_weight_decay = True
        from mamba_ssm.ops.triton.layernorm_gated import RMSNorm as RMSNormGated

        self.norm = RMSNormGated(self.d_inner, eps=1e-5, norm_before_gate=False,
                                 group_size=self.d_inner // norm_groups, **fk)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False, **fk)

    def state_size(self) -> int:
        """Distinct SSM state scalars of this layer."""
        distinct = 1 if self.head_pattern == "mqa" else self.nheads
        return distinct * self.headdim * self.d_state

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        Bsz, L, _ = u.shape
        H, P, N = self.nheads, self.headdim, self.d_state
        z, xBC, dt = torch.split(self.in_proj(u), [self.d_inner, self.conv_dim, self.dt_heads], dim=-1)
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :L].transpose(1, 2))
        x, B, C = torch.split(xBC, [self.x_dim, self.b_heads * N, self.c_heads * N], dim=-1)
        x = x.unsqueeze(2).expand(Bsz, L, H, P)
        B = B.reshape(Bsz, L, self.b_heads, N)
        C = C.reshape(Bsz, L, self.c_heads, N)
        if self.b_heads != self.c_heads:  # the kernel wants one group count for B and C
            B = B.expand(Bsz, L, H, N)
            C = C.expand(Bsz, L, H, N)
        A = -torch.exp(self.A_log.float())
        dt_bias = self.dt_bias
        if self.dt_heads != H:
            dt, A, dt_bias = dt.expand(Bsz, L, H), A.expand(H), dt_bias.expand(H)
        y = ssd_scan(x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(),
                     C.contiguous(), self.chunk_size, self.D, dt_bias.contiguous())
        y = self.norm(y.reshape(Bsz, L, self.d_inner), z)
        return self.out_proj(y)


@dataclasses.dataclass
class Options:
    """``model.options`` of mamba2."""

    chunk_size: int = 256  # SSD chunk length (mamba-ssm's default); CPU: min(chunk_size, L)


@ADAPTERS.register("mamba2")
class Mamba2(MambaSSMAdapter):
    description = ("mamba-ssm's Mamba2 blocks (mva, mha); mqa/mka by recallbench's shared-x "
                   "Mamba-2 layer on the same SSD scan")
    library_class = "mamba_ssm.Mamba2 (mqa, mka: recallbench SharedXMamba2)"
    state_formula = "Λ · M · P · N = Λ · expand · D · N  (mqa: Λ · P · N = Λ · expand · D · N / M)"
    head_patterns = heads.ALL_PATTERNS

    def validate(self) -> None:
        super().validate()
        heads.check_heads_divide_inner(self.cfg, " (Mamba2's headdim = expand·d_model / n_heads)")
        self.options = from_mapping(Options, self.cfg.options, "model.options")
        check_range("model.options.chunk_size", self.options.chunk_size, 1)

    @classmethod
    def kernel_path(cls, device: torch.device) -> tuple[str, str]:
        return kernel_choice.mamba2(torch.device(device).type,
                                    causal_conv1d=kernels.importable("causal_conv1d"))

    def build_layer(self, layer_idx: int, device: torch.device) -> nn.Module:
        """One mixer (B, L, D) -> (B, L, D) for this config's head pattern."""
        cfg = self.cfg
        headdim = cfg.expand * cfg.d_model // cfg.n_heads
        if self.head_pattern in ("mqa", "mka"):
            import_mamba_ssm()
            return SharedXMamba2(cfg.d_model, cfg.d_state, cfg.d_conv, cfg.expand, cfg.n_heads,
                                 self.head_pattern, self.options.chunk_size, device=device)
        mamba_ssm = import_mamba_ssm()
        from mamba_ssm.modules import mamba2 as m2

        # CUDA without causal-conv1d: the fused path needs its kernel, the unfused one does not
        mem_eff = device.type == "cpu" or m2.causal_conv1d_fn is not None
        if not mem_eff and cfg.d_conv == 1:
            fail("model.d_conv", cfg.d_conv, "mamba_ssm.Mamba2 without causal-conv1d needs d_conv >= 2")
        return mamba_ssm.Mamba2(cfg.d_model, d_state=cfg.d_state, d_conv=cfg.d_conv,
                                expand=cfg.expand, headdim=headdim,
                                ngroups=cfg.n_heads if self.head_pattern == "mha" else 1,
                                chunk_size=self.options.chunk_size, use_mem_eff_path=mem_eff,
                                layer_idx=layer_idx, device=device)

    def build_blocks(self, device):
        cfg = self.cfg
        blocks = nn.ModuleList(MixerBlock(self.build_layer(i, device), cfg.d_model)
                               for i in range(cfg.n_layers))
        init_like_mixer_model(blocks, cfg.n_layers)
        return blocks.to(device)

    def state_size(self) -> int:
        return heads.state_size(self.cfg, self.head_pattern)

    def state_shape(self) -> dict[str, int]:
        return heads.state_shape(self.cfg, self.head_pattern)

    def shape_overrides(self, term, value):
        return heads.shape_overrides(self.cfg, self.head_pattern, term, value)
