"""tinyzoo's recallbench adapter, registered by the entry point in pyproject.toml::

    [project.entry-points."recallbench.adapters"]
    tiny-linear-attention = "tinyzoo.adapter:TinyLinearAttentionAdapter"
"""
from __future__ import annotations

from recallbench.api.adapter import Adapter
from tinyzoo.layer import TinyLinearAttention


class TinyLinearAttentionAdapter(Adapter):
    description = "tinyzoo's causal linear attention"
    library_class = "tinyzoo.layer.TinyLinearAttention"
    state_formula = "Λ · N · D"

    def build_mixer(self, layer_idx, device):
        # recallbench wraps it: pre-norm residual blocks, final RMSNorm, tied embedding
        return TinyLinearAttention(self.cfg.d_model, self.cfg.d_state)

    def state_size(self) -> int:
        return self.cfg.n_layers * self.cfg.d_state * self.cfg.d_model
