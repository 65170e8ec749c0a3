"""The designed model: the fixed-weight hashed circuit of Thm 3.2 (evaluation only).

Construction (docs/theory.md, "The designed model"), for width D, state N ≤ D and
vocabulary V::

    E  (D × V)   unit-norm Gaussian columns; identity when D = V (Thm 3.1)
    F  (N × D)   √(D/N) · the first N rows of a random orthogonal D × D matrix
    P_in = [I; I], and the conv shifts the first copy by one step:
    x̂_t = (E x_{t-1}, E x_t)                           (B, L, 2D)
    B_t = S_B x̂_t = F E x_{t-1}   (the key before a value)
    C_t = S_C x̂_t = F E x_t       (the current token as a query)
    ŷ_t = Σ_{τ≤t} x̂_τ ⟨B_τ, C_t⟩, y_t = P_out ŷ_t with P_out = [0, Π]

Π projects onto the span of the value embeddings (identity once D < V/2, the
value-coordinate mask when E = I), so that at D = N = V with E = I the circuit
is exactly Thm 3.1's and recalls perfectly; the logits are y Eᵀ.  Nothing is
trained.  Its read-out noise follows σ² ≈ a·N_f/(N D) + 1/D with a = 2 (AR) and
a ≈ 3 (MQAR at L = 4·N_f) — a testable prediction of eq. 19.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from recallbench.api.adapter import Adapter
from recallbench.api.fields import fail, from_mapping
from recallbench.api.registry import ADAPTERS

from .linear_ops import causal_linear_attention


@dataclasses.dataclass
class Options:
    embedding: str = "auto"  # auto (identity when D = V) | identity | gaussian


class DesignedLayer(nn.Module):
    def __init__(self, embedding: torch.Tensor, d_state: int, generator: torch.Generator):
        super().__init__()
        V, D = embedding.shape
        q, _ = torch.linalg.qr(torch.randn(D, D, generator=generator, dtype=torch.float64))
        F = (D / d_state) ** 0.5 * q[:d_state]  # (N, D) orthogonal rows, rescaled
        self.register_buffer("F", F.float())
        values = embedding[V // 2:].double()  # (V/2, D) value embeddings
        if values.shape[0] >= D:
            proj = torch.eye(D, dtype=torch.float64)
        else:  # Π = Eᵥᵀ (Eᵥ Eᵥᵀ)⁻¹ Eᵥ, the projector onto span of the value rows
            proj = values.t() @ torch.linalg.solve(values @ values.t(), values)
        self.register_buffer("proj", proj.float())

    def forward(self, u: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        prev = nn.functional.pad(u, (0, 0, 1, 0))[:, :-1]  # E x_{t-1}, zero at t = 0
        k = (prev @ self.F.t()).unsqueeze(1)  # B_t  (B, 1, L, N)
        q = (u @ self.F.t()).unsqueeze(1)  # C_t  (B, 1, L, N)
        y = causal_linear_attention(q, k, u.unsqueeze(1)).squeeze(1)  # second half of ŷ
        return y @ self.proj


@ADAPTERS.register("designed")
class Designed(Adapter):
    description = "fixed-weight hashed circuit of Thm 3.2 (exact circuit of Thm 3.1 at D = N = V)"
    library_class = "recallbench DesignedLayer"
    law_kind = "designed"
    state_formula = "2 · D · N (one layer, evaluation only)"
    trainable = False
    # fixed weights: no norms, the layer is the block, and init_embedding sets E
    wrapper = {"block": "none", "final_norm": None, "embedding_std": None}

    def validate(self) -> None:
        super().validate()
        cfg = self.cfg
        if cfg.n_layers != 1:
            fail("model.n_layers", cfg.n_layers, "the designed model has exactly 1 layer")
        if cfg.n_heads != 1:
            fail("model.n_heads", cfg.n_heads, "the designed model has exactly 1 head")
        if cfg.d_state > cfg.d_model:
            fail("model.d_state", cfg.d_state, f"must be <= d_model = {cfg.d_model} (F is N × D)")
        self.options = from_mapping(Options, cfg.options, "model.options")
        if self.options.embedding not in ("auto", "identity", "gaussian"):
            fail("model.options.embedding", self.options.embedding, "auto, identity or gaussian")
        self._embedding = None
        self._generator = None

    def init_embedding(self, embedding: nn.Embedding, generator: torch.Generator) -> None:
        V, D = embedding.weight.shape
        kind = self.options.embedding
        if kind == "auto":
            kind = "identity" if D == V else "gaussian"
        with torch.no_grad():
            if kind == "identity":
                if D != V:
                    fail("model.options.embedding", "identity", f"needs d_model = vocab_size = {V}")
                embedding.weight.copy_(torch.eye(V))
            else:
                w = torch.randn(V, D, generator=generator)
                embedding.weight.copy_(w / w.norm(dim=1, keepdim=True))
        self._embedding = embedding.weight.detach().clone()
        self._generator = generator

    def build_mixer(self, layer_idx, device):
        if self._embedding is None:
            raise RuntimeError("designed: init_embedding must run before build_mixer")
        return DesignedLayer(self._embedding, self.cfg.d_state, self._generator)

    def state_size(self) -> int:
        return 2 * self.cfg.d_model * self.cfg.d_state

    def state_shape(self) -> dict[str, int]:
        """One layer, one head: key N × value 2D (x̂_t = (E x_{t-1}, E x_t) is the value)."""
        return {"layers": 1, "heads": 1, "key": self.cfg.d_state, "value": 2 * self.cfg.d_model}

    def shape_overrides(self, term, value):
        """``key`` = k at the same S = 2·D·N: d_state = k and d_model = S / (2k), the
        value being the model's own width (N ≤ D still holds or the shape is refused)."""
        d, rest = divmod(self.state_size(), 2 * value)
        return {"d_state": value, "d_model": d} if term == "key" and not rest else None

    def circuit(self, model):
        """x̂_t = (E x_{t-1}, E x_t): Ê_in = diag(E, E); S_B = [F, 0], S_C = [0, F]; P_out = [0, Πᵀ]."""
        from recallbench.api.circuit import Circuit

        E = model.embedding.weight.detach().t().clone()  # (D, V)
        layer = model.blocks[0]
        (D, V), N = E.shape, layer.F.shape[0]
        zeros_e, zeros_f = E.new_zeros(D, V), E.new_zeros(N, D)
        return Circuit(E=E, E_in=torch.cat([torch.cat([E, zeros_e], 1), torch.cat([zeros_e, E], 1)]),
                       S_B=torch.cat([layer.F, zeros_f], 1), S_C=torch.cat([zeros_f, layer.F], 1),
                       P_out=torch.cat([E.new_zeros(D, D), layer.proj.t()], 1))
