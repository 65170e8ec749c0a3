"""tinyzoo's recallbench adapter, registered by the entry point in pyproject.toml::

    [project.entry-points."recallbench.adapters"]
    tiny-linear-attention = "tinyzoo.adapter:TinyLinearAttentionAdapter"
"""
from __future__ import annotations

from torch import nn

from recallbench.api.adapter import Adapter, PreNormResidual
from tinyzoo.layer import TinyLinearAttention


class TinyLinearAttentionAdapter(Adapter):
    description = "tinyzoo's causal linear attention"
    library_class = "tinyzoo.layer.TinyLinearAttention"
    state_formula = "Λ · N · D"

    def build_blocks(self, device):
        d, n = self.cfg.d_model, self.cfg.d_state
        return nn.ModuleList(PreNormResidual(TinyLinearAttention(d, n), d)
                             for _ in range(self.cfg.n_layers))

    def state_size(self) -> int:
        return self.cfg.n_layers * self.cfg.d_state * self.cfg.d_model
