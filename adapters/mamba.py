"""``mamba``: mamba-ssm's real ``Mamba`` (Mamba-1) block, stacked as mamba-ssm's MixerModel does.

Each of the Λ = ``n_layers`` blocks is mamba-ssm's ``Block`` without an MLP, i.e.
``h + Mamba(RMSNorm(h))`` (RMSNorm eps 1e-5, as ``MambaConfig(rms_norm=True)``), and the stack
ends in a final RMSNorm (``norm_f``, the harness's) before the tied read-out.  The blocks get mamba-ssm's
``_init_weights`` (out_proj rescaled by 1/√Λ, linear biases zeroed except dt_proj's); the
embedding is recallbench's.

Config → ``mamba_ssm.Mamba``: ``d_model`` → d_model, ``d_state`` → d_state, ``d_conv`` →
d_conv (the paper uses 2; mamba-ssm defaults to 4), ``expand`` → expand;
``options.dt_rank`` → dt_rank (null: "auto" = ⌈D/16⌉).  Mamba-1 has no heads: ``n_heads``
must be 1; its head pattern is MVA (B and C shared by all channels, x per channel).

State: one ``d_state`` vector per inner channel, Λ · d_inner · N = Λ · expand · D · N scalars
(the SSM state; the conv's (d_conv − 1) · d_inner buffer is not counted, as in the paper).

On a CPU the blocks run mamba-ssm's own pure-torch references in place of its CUDA kernels
(see :mod:`recallbench.adapters.cpu.mamba_ssm_swaps`; ``selective_scan_ref`` is a Python loop
over L, so it is slow); on CUDA the fused kernels run untouched, and where mamba-ssm was
installed without its compiled ``selective_scan_cuda`` the same references run on the GPU
(:meth:`Mamba.kernel_path` says which, :mod:`recallbench.adapters.kernel_choice` decides).
mamba-ssm is imported only when a model is built, so this module imports without it.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch import nn

from recallbench.api.adapter import Adapter, PreNormResidual
from recallbench.api import kernels
from recallbench.api.fields import check_range, fail, from_mapping
from recallbench.api.registry import ADAPTERS

from . import heads, kernel_choice
from .cpu import mamba_ssm_import
from .cpu.mamba_ssm_swaps import SWAPS

NORM_EPS = 1e-5  # mamba-ssm's MixerModel / MambaConfig norm_epsilon


class MixerBlock(PreNormResidual):
    """``x + mixer(RMSNorm(x))`` (mamba-ssm's Block without MLP), run with the pure-torch
    references on a CPU, and on every device with ``reference=True`` (a GPU fallback)."""

    def __init__(self, mixer: nn.Module, d_model: int, eps: float = NORM_EPS,
                 reference: bool = False):
        super().__init__(mixer, d_model, norm="rms", eps=eps)
        self.reference = reference

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        swapped = self.reference or x.device.type == "cpu"
        with SWAPS.applied() if swapped else contextlib.nullcontext():
            return super().forward(x)


def init_like_mixer_model(blocks: nn.ModuleList, n_layers: int) -> None:
    """mamba-ssm's MixerModel initialisation of the blocks (no MLP: one residual per layer)."""
    from functools import partial

    from mamba_ssm.models.mixer_seq_simple import _init_weights

    blocks.apply(partial(_init_weights, n_layer=n_layers, n_residuals_per_layer=1))


class MambaSSMAdapter(Adapter):
    """What the mamba-ssm adapters share: availability.

    They build whole blocks (``build_blocks``: mamba-ssm's block, run with the CPU
    references, initialised over the whole stack by ``_init_weights``); the harness's
    final RMSNorm (eps 1e-5) and embedding init (std 0.02) are mamba-ssm's own."""

    distribution = "mamba-ssm"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return mamba_ssm_import.availability()


@dataclasses.dataclass
class Options:
    """``model.options`` of mamba."""

    dt_rank: int | None = None  # rank of the Δ projection; null: mamba-ssm's "auto", ⌈d_model/16⌉


@ADAPTERS.register("mamba")
class Mamba(MambaSSMAdapter):
    description = "mamba-ssm's Mamba (Mamba-1) blocks, pre-norm residual + final RMSNorm"
    library_class = "mamba_ssm.Mamba"
    law_kind = "full"
    state_formula = "Λ · d_inner · N = Λ · expand · D · N"
    head_patterns = ("mva",)

    def validate(self) -> None:
        super().validate()
        if self.cfg.n_heads != 1:
            fail("model.n_heads", self.cfg.n_heads, "Mamba-1 has no heads: 1 (use adapter mamba2)")
        self.options = from_mapping(Options, self.cfg.options, "model.options")
        if self.options.dt_rank is not None:
            check_range("model.options.dt_rank", self.options.dt_rank, 1)

    @classmethod
    def kernel_path(cls, device: torch.device) -> tuple[str, str]:
        return kernel_choice.mamba1(torch.device(device).type,
                                    selective_scan=kernels.importable("selective_scan_cuda"),
                                    causal_conv1d=kernels.importable("causal_conv1d"))

    def build_blocks(self, device):
        mamba_ssm = mamba_ssm_import.import_mamba_ssm()
        cfg = self.cfg
        dt_rank = "auto" if self.options.dt_rank is None else self.options.dt_rank
        reference = self.kernel_path(device)[0] == kernels.REFERENCE
        blocks = nn.ModuleList(
            MixerBlock(mamba_ssm.Mamba(cfg.d_model, d_state=cfg.d_state, d_conv=cfg.d_conv,
                                       expand=cfg.expand, dt_rank=dt_rank, layer_idx=i,
                                       device=device), cfg.d_model, reference=reference)
            for i in range(cfg.n_layers))
        init_like_mixer_model(blocks, cfg.n_layers)
        return blocks.to(device)

    def state_size(self) -> int:
        cfg = self.cfg
        return cfg.n_layers * cfg.expand * cfg.d_model * cfg.d_state

    def state_shape(self) -> dict[str, int]:
        """Λ layers × one state of key N × value d_inner (an N-vector per inner channel)."""
        return heads.state_shape(self.cfg, "mva")

    def shape_overrides(self, term, value):
        return heads.shape_overrides(self.cfg, "mva", term, value) if term == "key" else None
