"""fla's ``RWKV6Attention.forward`` for training on CPU, with its five interpolations as one op.

fla's forward mixes each token with the one before it five times, once per projection
(r, w, k, v, g), each by a data-dependent amount (Finch's "ddlerp"):

    Δ_t = x_{t−1} − x_t                              (token shift, x_0 = 0)
    a_t = tanh(Linear_5r(x_t + Δ_t ⊙ μ_x))           (B, T, 5, r)  LoRA down, one per mix
    m_t^(i) = W_up^(i) a_t^(i) + b^(i)                 (B, T, D)     i ∈ {r, w, k, v, g}
    X^(i)_t = x_t + Δ_t ⊙ m_t^(i)                      then r = W_r X^(r), w = LoRA_w(X^(w)), …

fla computes the m's with an einsum into a (B, T, 5, D) tensor, unbinds it into five strided
views and runs the five interpolations as separate elementwise ops.  Here the up-projection
is one batched product into a (5, B·T, D) tensor, and all five X^(i) come from one
``addcmul``: the same maths in fewer, contiguous ops, which matters on a CPU where each
small op costs its own pass over memory.  The recurrence is fla's own (swapped) kernel.

Only the training call takes this path: no attention mask, no cache, no varlen offsets.
Any other call goes to fla's forward.  A test compares it with fla's forward (output and
every parameter's gradient).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class _Interpolate(torch.autograd.Function):
    """X = x + Δ ⊙ m for the five mixes at once: x, Δ (1, N, D), m (5, N, D).  Its backward
    is the three products the maths needs (torch's addcmul adds a pass for its scalar)."""

    @staticmethod
    def forward(ctx, x, delta, m):
        ctx.save_for_backward(delta, m)
        return torch.addcmul(x, delta, m)

    @staticmethod
    def backward(ctx, grad):
        delta, m = ctx.saved_tensors
        return grad.sum(0, keepdim=True), (grad * m).sum(0, keepdim=True), grad * delta


def _gate(fn, g: torch.Tensor) -> torch.Tensor:
    """fla's swish gate (an autograd Function over its kernels) as torch's silu, whose
    backward is one op; any other gate as fla's."""
    from fla.modules.activations import SwishFunction

    return F.silu(g) if getattr(fn, "__self__", None) is SwishFunction else fn(g)


def rwkv6_attention_forward(self, hidden_states, attention_mask=None, past_key_values=None,
                            use_cache=False, output_attentions=False, cu_seqlens=None, **kwargs):
    """RWKV6Attention.forward: (B, T, D) -> ((B, T, D), None, past_key_values)."""
    import fla.layers.rwkv6 as layer

    if (attention_mask is not None or past_key_values is not None or use_cache
            or cu_seqlens is not None or hidden_states.shape[1] == 0):
        original = layer.RWKV6Attention.forward.__wrapped_original__
        return original(self, hidden_states, attention_mask, past_key_values, use_cache,
                        output_attentions, cu_seqlens, **kwargs)
    x = hidden_states  # (B, T, D)
    B, T, D = x.shape
    r_dim = self.proj_low_rank_dim
    delta = F.pad(x, (0, 0, 1, -1)) - x  # (B, T, D): x_{t-1} - x_t, fla's token_shift
    lerp = self.x_proj[0]
    a = torch.tanh(lerp.linear(torch.addcmul(x, delta, lerp.mu)))  # (B, T, 5r)
    a = a.view(B * T, 5, r_dim).transpose(0, 1)  # (5, B·T, r)
    up = self.x_proj[2].weight.view(D, 5, r_dim).permute(1, 2, 0)  # (5, r, D)
    m = torch.baddbmm(self.x_bias.unsqueeze(1), a, up)  # (5, B·T, D): m^(i) + b^(i)
    X = _Interpolate.apply(x.reshape(1, B * T, D), delta.reshape(1, B * T, D), m)  # (5, B·T, D)
    projs = (self.r_proj, self.w_proj, self.k_proj, self.v_proj, self.g_proj)
    # unbind, not X[i]: the backward of five selects would zero-fill a (5, B·T, D) gradient each
    r, w, k, v, g = (p.linear(Xi).view(B, T, -1) for p, Xi in zip(projs, X.unbind(0)))
    r, w, k = (t.view(B, T, -1, self.head_k_dim) for t in (r, w, k))  # (B, T, H, K)
    v = v.view(B, T, -1, self.head_v_dim)  # (B, T, H, V)
    mode = "fused_recurrent" if T <= 64 else self.mode  # as fla: both are the same recurrence
    kernel = layer.fused_recurrent_rwkv6 if mode == "fused_recurrent" else layer.chunk_rwkv6
    o, _ = kernel(r=r, k=k, v=v, w=-torch.exp(w), u=self.bonus, scale=1.0,
                  initial_state=None, output_final_state=False, cu_seqlens=None)
    o = self.g_norm(o.reshape(B, T, -1)) * _gate(self.gate_fn, g)  # (B, T, H·V)
    return self.o_proj(o), None, past_key_values
