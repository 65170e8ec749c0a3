"""fla's ``RWKV6Attention.forward`` for training on CPU, with its five interpolations in one op.

fla's forward mixes each token with the one before it five times, once per projection
(r, w, k, v, g), each by a data-dependent amount (Finch's "ddlerp"):

    Δ_t = x_{t−1} − x_t                              (token shift, x_0 = 0)
    a_t = tanh(Linear_5r(x_t + Δ_t ⊙ μ_x))           (B, T, 5, r)  LoRA down, one per mix
    m_t^(i) = W_up^(i) a_t^(i) + b^(i)                 (B, T, D)     i ∈ {r, w, k, v, g}
    X^(i)_t = x_t + Δ_t ⊙ m_t^(i)                      then r = W_r X^(r), w = LoRA_w(X^(w)), …

fla computes the m's with an einsum into a (B, T, 5, D) tensor, unbinds it into five strided
views and runs the five interpolations as separate elementwise ops.  Here the up-projection
is one batched product into a (5, B·T, D) tensor and the five X^(i) are five ``addcmul``s,
with a backward that adds no (5, B·T, D) temporaries (on a CPU each costs a pass over memory
and, freshly allocated, page faults).  The two LoRA tanh's are computed as 2σ(2z) − 1
(:class:`_LinearTanh`).  The recurrence is fla's own (swapped) kernel.

Only the training call takes this path: no attention mask, no cache, no varlen offsets.
Any other call goes to fla's forward.  A test compares it with fla's forward (output and
every parameter's gradient).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class _LinearTanh(torch.autograd.Function):
    """tanh(x Wᵀ) for x (N, I), W (O, I), with tanh as 2σ(2z) − 1: torch's float32 tanh on CPU
    takes about six times its logistic's time.  2W is exact, so only the last two roundings
    differ from tanh's: |error| ≤ 2e-7 (tanh's own ≤ 3e-8), absolute, as the next linear map
    needs it.  The backward uses the output, as tanh's: (1 − y²)."""

    @staticmethod
    def forward(ctx, x, weight):
        y = torch.mm(x, weight.t() * 2).sigmoid_().mul_(2).sub_(1)
        ctx.save_for_backward(x, weight, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, y = ctx.saved_tensors
        gz = torch.ops.aten.tanh_backward(grad, y)
        return gz @ weight, gz.t() @ x


class _Mixes(torch.autograd.Function):
    """The five interpolated inputs X_i = x + Δ ⊙ (a_i U_iᵀ + b_i), i = 0 … 4, from x, Δ (N, D),
    the LoRA activations a (N, 5·r), the up-projection U (D, 5·r) and the biases b (5, D): the
    up-projections as one batched product, five ``addcmul``s, and a backward that builds no
    (5, N, D) temporary besides the gradient of the mixes, which the products need."""

    @staticmethod
    def forward(ctx, x, delta, a, up, bias):
        N, D = x.shape
        r = a.shape[1] // 5
        m = torch.baddbmm(bias.unsqueeze(1), a.view(N, 5, r).transpose(0, 1),
                          up.view(D, 5, r).permute(1, 2, 0))  # (5, N, D)
        ctx.save_for_backward(delta, a, up, m)
        return tuple(torch.addcmul(x, delta, mi) for mi in m.unbind(0))

    @staticmethod
    def backward(ctx, *grads):
        delta, a, up, m = ctx.saved_tensors
        N, D = delta.shape
        r = a.shape[1] // 5
        gm = delta.new_empty(5, N, D)
        for i, g in enumerate(grads):
            torch.mul(g, delta, out=gm[i])
        gx, gdelta = grads[0].clone(), grads[0] * m[0]
        for i in range(1, 5):
            gx.add_(grads[i])
            gdelta.addcmul_(grads[i], m[i])
        ga = torch.bmm(gm, up.view(D, 5, r).permute(1, 0, 2)).transpose(0, 1).reshape(N, 5 * r)
        gup = torch.bmm(a.view(N, 5, r).permute(1, 2, 0), gm)  # (5, r, D)
        return gx, gdelta, ga, gup.permute(2, 0, 1).reshape(D, 5 * r), gm.sum(1)


def _gate(fn, g: torch.Tensor) -> torch.Tensor:
    """fla's swish gate (an autograd Function over its kernels) as torch's silu, whose
    backward is one op; any other gate as fla's."""
    from fla.modules.activations import SwishFunction

    return F.silu(g) if getattr(fn, "__self__", None) is SwishFunction else fn(g)


def _project(linear, x: torch.Tensor) -> torch.Tensor:
    """A DDLerpLinear's map: a Linear, or fla's LoRA (down, tanh, up) with its tanh as
    :class:`_LinearTanh`; another activation runs as fla's."""
    lora = getattr(linear, "lora", None)
    if lora is None or not isinstance(lora[1], torch.nn.Tanh) or lora[0].bias is not None:
        return linear(x)
    return F.linear(_LinearTanh.apply(x, lora[0].weight), lora[2].weight, lora[2].bias)


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
    delta = F.pad(x, (0, 0, 1, -1)) - x  # (B, T, D): x_{t-1} - x_t, fla's token_shift
    lerp, up = self.x_proj[0], self.x_proj[2].weight
    x2, d2 = x.reshape(B * T, D), delta.reshape(B * T, D)
    a = _LinearTanh.apply(torch.addcmul(x2, d2, lerp.mu), lerp.linear.weight)  # (B·T, 5r)
    X = _Mixes.apply(x2, d2, a, up, self.x_bias)  # five (B·T, D)
    r, w, k, v, g = (_project(p.linear, Xi).view(B, T, -1) for p, Xi in zip(
        (self.r_proj, self.w_proj, self.k_proj, self.v_proj, self.g_proj), X))
    r, w, k = (t.view(B, T, -1, self.head_k_dim) for t in (r, w, k))  # (B, T, H, K)
    v = v.view(B, T, -1, self.head_v_dim)  # (B, T, H, V)
    mode = "fused_recurrent" if T <= 64 else self.mode  # as fla: both are the same recurrence
    kernel = layer.fused_recurrent_rwkv6 if mode == "fused_recurrent" else layer.chunk_rwkv6
    o, _ = kernel(r=r, k=k, v=v, w=-torch.exp(w), u=self.bonus, scale=1.0,
                  initial_state=None, output_final_state=False, cu_seqlens=None)
    o = self.g_norm(o.reshape(B, T, -1)) * _gate(self.gate_fn, g)  # (B, T, H·V)
    return self.o_proj(o), None, past_key_values
