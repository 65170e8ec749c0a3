"""Fused, chunked read-out and cross-entropy for K stacked members.

    loss = linear_cross_entropy(h, W, answers, weights, smoothing)      # (K,)

For member k (glossary: V → ``vocab_size``, Q → the labelled positions of a batch)::

    logits_k = h_k W_kᵀ                                   h_k (Q, D), W_k (V, D)
    loss_k   = Σ_i weights_{k,i} · [(1 − ε_k)(−log p_{k,i,y}) + ε_k · mean_c(−log p_{k,i,c})]

with p = softmax(logits) and y = ``answers``: PyTorch's label-smoothed cross-entropy,
weighted per query (``weights`` = 1/Q gives the mean).  The gradient is the closed form

    ∂loss_k/∂logits_{k,i} = weights_{k,i} · (p_{k,i} − (1 − ε_k)·onehot(y) − ε_k / V)

so the function computes loss and gradients in one pass over blocks of queries and never
holds the (K, Q, V) logits: each block of K·q·V floats is sized to stay in the CPU's cache
(:data:`BLOCK_FLOATS`).  On CPU, a batched ensemble's logits do not fit in cache (K = 8,
Q = 1024, V = 512 is 16 MiB) and every elementwise pass over them runs at memory speed;
blocked, each pass runs in cache.  :func:`linear_cross_entropy_reference` is the plain
autograd twin the tests compare against.
"""
from __future__ import annotations

import torch

#: floats in one block of logits: 256 Ki floats = 1 MiB (fits a core's L2 on current CPUs)
BLOCK_FLOATS = 1 << 18


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, W, answers, weights, smoothing):
        K, Q, _ = h.shape
        V = W.shape[1]
        q = max(1, BLOCK_FLOATS // (K * V))
        eps3 = smoothing.float()[:, None, None]  # (K, 1, 1)
        loss = torch.zeros(K, dtype=torch.float32, device=h.device)
        need_h, need_W = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(h) if need_h else None
        # Wᵀ as a contiguous (K, D, V) and the gradient accumulated as (K, D, V): every
        # matmul then reads the (K, q, V) blocks row by row (accumulating gᵀ h into a
        # (K, V, D) buffer instead was the slowest matmul of the read-out at small D)
        Wt = W.transpose(1, 2).contiguous()
        grad_Wt = (torch.zeros(Wt.shape, dtype=torch.float32, device=W.device)
                   if need_W else None)
        for s in range(0, Q, q):
            hs = h[:, s:s + q]  # (K, q, D)
            y = answers[:, s:s + q].unsqueeze(-1)  # (K, q, 1)
            w = weights[:, s:s + q].float().unsqueeze(-1)  # (K, q, 1)
            logits = torch.bmm(hs, Wt).float()  # (K, q, V)
            top = logits.amax(-1, keepdim=True)
            p = torch.sub(logits, top).exp_()  # unnormalised softmax: the only exp pass
            total = p.sum(-1, keepdim=True)
            lse = top + total.log()  # log Σ_c exp(logits_c)
            nll = lse - logits.gather(-1, y)  # −log p_y
            smooth = lse - logits.mean(-1, keepdim=True)  # mean_c(−log p_c)
            loss += (((1.0 - eps3) * nll + eps3 * smooth) * w).sum((1, 2))
            if not (need_h or need_W):
                continue
            g = p.mul_(w / total).sub_(w * eps3 / V)  # w·(p − ε/V)
            g.scatter_add_(-1, y, w * (eps3 - 1.0))  # − w·(1 − ε) at the answer
            g = g.to(h.dtype)
            if need_h:
                grad_h[:, s:s + q] = torch.bmm(g, Wt.transpose(1, 2))
            if need_W:
                grad_Wt.baddbmm_(hs.transpose(1, 2).float(), g.float())
        grad_W = grad_Wt.transpose(1, 2) if need_W else None
        ctx.save_for_backward(grad_h, grad_W)
        ctx.W_dtype = W.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_W = ctx.saved_tensors
        scale = grad_loss.float()[:, None, None]
        gh = (grad_h * scale.to(grad_h.dtype)) if grad_h is not None else None
        gW = (grad_W * scale).to(ctx.W_dtype) if grad_W is not None else None
        return gh, gW, None, None, None


def linear_cross_entropy(h: torch.Tensor, W: torch.Tensor, answers: torch.Tensor,
                         weights: torch.Tensor, smoothing: torch.Tensor) -> torch.Tensor:
    """Per-member weighted, label-smoothed cross-entropy of the logits ``h Wᵀ``.

    h (K, Q, D), W (K, V, D), answers (K, Q) in [0, V), weights (K, Q), smoothing (K,)
    -> loss (K,) in float32.  Differentiable in h and W.
    """
    K, Q, D = h.shape
    if W.dim() != 3 or W.shape[0] != K or W.shape[2] != D:
        raise ValueError(f"W must be (K={K}, V, D={D}), got {tuple(W.shape)}")
    if answers.shape != (K, Q) or weights.shape != (K, Q) or smoothing.shape != (K,):
        raise ValueError(f"answers and weights must be (K, Q) = ({K}, {Q}) and smoothing (K,)")
    return _LinearCrossEntropy.apply(h, W, answers, weights, smoothing)


def linear_cross_entropy_reference(h, W, answers, weights, smoothing) -> torch.Tensor:
    """The same loss through plain autograd, holding the whole (K, Q, V) logits."""
    logp = torch.bmm(h, W.transpose(1, 2)).float().log_softmax(-1)
    nll = -logp.gather(-1, answers.unsqueeze(-1)).squeeze(-1)
    smooth = -logp.mean(-1)
    eps = smoothing.float()[:, None]
    return (((1.0 - eps) * nll + eps * smooth) * weights.float()).sum(-1)
