"""A third-party layer as a recallbench adapter: the mixer and its state size, nothing else."""
import torch
from torch import nn

from recallbench import Adapter


class GatedRecurrence(nn.Module):
    """S_t = diag(a_t) S_{t-1} + k_t v_tᵀ, y_t = S_tᵀ q_t: (B, L, D) -> (B, L, D), state N × D.

    The key comes from the previous token, so the state binds each token to the next one."""

    def __init__(self, d_model: int, d_state: int):
        super().__init__()
        self.q, self.k = nn.Linear(d_model, d_state, bias=False), nn.Linear(d_model, d_state, bias=False)
        self.v, self.out = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_model, d_model, bias=False)
        self.gate = nn.Linear(d_model, d_state)  # a_t = sigmoid(gate(x_t)), one per state row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        previous = nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]  # x_{t-1}, zeros at t = 0
        q, k, v = self.q(x), self.k(previous), self.v(x)
        log_a = nn.functional.logsigmoid(self.gate(x)).cumsum(dim=1)  # (B, L, N)
        decay = log_a.unsqueeze(2) - log_a.unsqueeze(1)  # (B, t, s, N): log Π_{s<r≤t} a_r
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
        decay = decay.masked_fill(~causal[..., None], -torch.inf).exp()
        weights = (q.unsqueeze(2) * k.unsqueeze(1) * decay).sum(-1)  # (B, t, s)
        return self.out(weights @ v)


class GatedRecurrenceAdapter(Adapter):
    description = "a gated linear recurrence (example)"

    def build_mixer(self, layer_idx, device):
        return GatedRecurrence(self.cfg.d_model, self.cfg.d_state)

    def state_size(self):
        return self.cfg.n_layers * self.cfg.d_state * self.cfg.d_model
