"""The head patterns of Thm 4.7 and what they mean for the state (linear-mamba, mamba2).

M = ``n_heads`` heads, each of width P = D_in / M with D_in = expand·D, read and write their
own P × N state h_t = h_{t−1} + x_t B_tᵀ, y_t = h_t C_t (decays aside).  A pattern says
which of B, C, x are shared by all heads:

=======  ======  ======  ======  =====================================================
pattern  B       C       x       distinct P × N states per layer
=======  ======  ======  ======  =====================================================
mha      head    head    head    M
mqa      shared  head    shared  1 (one state written, read by M queries)
mka      head    shared  shared  M
mva      shared  shared  head    M (Mamba-2's default; equals one head of width D_in)
=======  ======  ======  ======  =====================================================
"""
from __future__ import annotations

from recallbench.api.config import ModelConfig
from recallbench.api.fields import fail

#: pattern → (B per head, C per head, x per head)
PATTERNS = {"mha": (True, True, True), "mqa": (False, True, False),
            "mka": (True, False, False), "mva": (False, False, True)}
#: an adapter's ``head_patterns`` when it implements all four, its default (mva) first
ALL_PATTERNS = ("mva", "mha", "mqa", "mka")


def check_heads_divide_inner(cfg: ModelConfig, note: str = "") -> None:
    """ConfigError on model.n_heads unless M divides D_in = expand·d_model."""
    d_inner = cfg.expand * cfg.d_model
    if d_inner % cfg.n_heads:
        fail("model.n_heads", cfg.n_heads, f"must divide expand·d_model = {d_inner}" + note)


def state_size(cfg: ModelConfig, head_pattern: str) -> int:
    """Recurrent-state scalars, all layers: Λ · M · P · N = Λ · expand · D · N; mqa: one
    state per layer, Λ · P · N = Λ · expand · D · N / M."""
    per_layer = cfg.expand * cfg.d_model * cfg.d_state
    if head_pattern == "mqa":
        per_layer //= cfg.n_heads
    return cfg.n_layers * per_layer
