"""Causal softmax attention, the unbounded-state baseline.

The mixer: ``W_o · SDPA(W_q c, W_k c, W_v c)`` with ``c = Conv1D(x)``, a causal depthwise
conv of width ``d_conv`` that lets one layer bind a key to the value after it (as in
Zoology's attention baselines with a short conv); the harness's pre-norm residual block
around it makes each block ``u + mixer(RMSNorm(u))``, with its final RMSNorm and embedding
init (std 0.02, as transformer LMs with a tied read-out).
Heads: ``n_heads`` (d_model must be divisible by it).  Uses
``torch.nn.functional.scaled_dot_product_attention`` (fused kernels on CUDA).

Its state is the KV cache, 2·D scalars per token and layer: it grows with L, so
``state_size()`` is None and reports say "grows with L" instead of a number.
"""
from __future__ import annotations

import torch
from torch import nn

from recallbench.api.adapter import Adapter
from recallbench.api.fields import fail
from recallbench.api.registry import ADAPTERS

from .linear_mamba import CausalDepthwiseConv


class AttentionLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_conv: int):
        super().__init__()
        self.n_heads = n_heads
        self.conv = CausalDepthwiseConv(d_model, d_conv)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        B, L, D = x.shape
        c = self.conv(x)
        q, k, v = self.qkv(c).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, M, L, P)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


@ADAPTERS.register("attention")
class Attention(Adapter):
    description = "causal softmax attention (SDPA) with a short conv; state grows with L"
    library_class = "torch scaled_dot_product_attention"
    state_formula = "2 · Λ · D · L (KV cache, grows with L)"
    head_patterns = ("mha",)

    def validate(self) -> None:
        super().validate()
        if self.cfg.d_model % self.cfg.n_heads:
            fail("model.n_heads", self.cfg.n_heads, f"must divide d_model = {self.cfg.d_model}")

    def build_mixer(self, layer_idx, device):
        return AttentionLayer(self.cfg.d_model, self.cfg.n_heads, self.cfg.d_conv)

    def state_size(self) -> None:
        return None

    def state_note(self) -> str:
        return f"grows with L: 2·Λ·D·L = {2 * self.cfg.n_layers * self.cfg.d_model}·L scalars"
