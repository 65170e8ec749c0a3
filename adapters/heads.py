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


def state_shape(cfg: ModelConfig, head_pattern: str) -> dict[str, int]:
    """The state's shape: Λ layers × distinct states per layer (mqa: 1, else M) × key N ×
    value P = expand·D / M; its product is :func:`state_size`."""
    return {"layers": cfg.n_layers, "heads": 1 if head_pattern == "mqa" else cfg.n_heads,
            "key": cfg.d_state, "value": cfg.expand * cfg.d_model // cfg.n_heads}


def shape_overrides(cfg: ModelConfig, head_pattern: str, term: str, value: int) -> dict | None:
    """Overrides that set ``term`` at the same state size: ``key`` sets d_state and the
    expand that keeps Λ · expand · D · N (mqa: / M); ``heads`` sets n_heads (the value per
    head P = expand·D / M shrinks; not for mqa, whose one state then changes size)."""
    state = state_size(cfg, head_pattern)
    if term == "key":
        scale = cfg.n_heads if head_pattern == "mqa" else 1
        expand, rest = divmod(state * scale, cfg.n_layers * cfg.d_model * value)
        return None if rest or expand < 1 else {"d_state": value, "expand": expand}
    if term == "heads" and head_pattern != "mqa":
        return {"n_heads": value}
    return None


def state_size(cfg: ModelConfig, head_pattern: str) -> int:
    """Recurrent-state scalars, all layers: Λ · M · P · N = Λ · expand · D · N; mqa: one
    state per layer, Λ · P · N = Λ · expand · D · N / M."""
    per_layer = cfg.expand * cfg.d_model * cfg.d_state
    if head_pattern == "mqa":
        per_layer //= cfg.n_heads
    return cfg.n_layers * per_layer
