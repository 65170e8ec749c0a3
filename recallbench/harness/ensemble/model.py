"""K models of one shape as one stacked model: their parameters stacked along a leading
member dimension K (``torch.func.stack_module_state``) and one vmapped functional forward.

Shapes: tokens (K, B, L) (or (B, L) shared by all members), hidden states (K, B, L, D),
labelled hidden states (K, Q, D), logits (K, Q, V).
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from recallbench.api.config import RunConfig
from recallbench.api.errors import reason
from recallbench.api.task import IGNORE
from recallbench.harness.data import TEST_STREAM, VAL_STREAM, fixed_set
from recallbench.harness.ensemble.shape import EnsembleError
from recallbench.harness.linear_ce import linear_cross_entropy
from recallbench.harness.model import RecallModel
from recallbench.harness.prepare import build_model

Tensors = dict[str, torch.Tensor]


class FunctionalModel:
    """The functional form of :meth:`RecallModel.forward` over stacked member states.

    ``hidden`` is everything before the final norm (embedding and blocks), ``readout`` the
    final norm and the tied logits; :meth:`RecallModel.forward` is ``readout(hidden(x))``.
    Both are vmapped over the member dimension (dim 0 of every stacked tensor).
    """

    def __init__(self, model: RecallModel):
        self.base = copy.deepcopy(model).to("meta")
        self._plain = [(m, _plain_attrs(m)) for m in self.base.modules()]

    def _forget_caches(self) -> None:
        """Put back every module's plain tensor and number attributes as they were built.

        Some layers cache tensors computed from their buffers on the first call (fla's
        rotary embedding keeps cos/sin tables).  Inside vmap the buffers are the stacked
        members', so such a cache holds one vmap level's batched tensors; a later call
        reusing it fails or mixes members.  Dropping the caches after each vmapped call
        makes each call recompute them for its own members."""
        for m, attrs in self._plain:
            for k in [k for k, v in vars(m).items() if k not in attrs and _is_plain(v)]:
                delattr(m, k)
            m.__dict__.update(attrs)

    @staticmethod
    def _sub(state: Tensors, prefix: str) -> Tensors:
        n = len(prefix)
        return {k[n:]: v for k, v in state.items() if k.startswith(prefix)}

    def hidden_one(self, params, buffers, tokens):
        state = {**params, **buffers}
        h = nn.functional.embedding(tokens, state["embedding.weight"])
        for i, block in enumerate(self.base.blocks):
            h = functional_call(block, self._sub(state, f"blocks.{i}."), (h,))
        return h

    def normed_one(self, params, buffers, h):
        state = {**params, **buffers}
        return functional_call(self.base.norm, self._sub(state, "norm."), (h,))

    def readout_one(self, params, buffers, h):
        state = {**params, **buffers}
        return self.normed_one(params, buffers, h) @ state["embedding.weight"].t()

    def hidden(self, params, buffers, tokens, shared_tokens: bool = False):
        """tokens (K, B, L) (or (B, L) shared by all members) -> h (K, B, L, D)."""
        try:
            return vmap(self.hidden_one, in_dims=(0, 0, None if shared_tokens else 0))(
                params, buffers, tokens)
        finally:
            self._forget_caches()

    def readout(self, params, buffers, h):
        """h (K, Q, D) -> logits (K, Q, V)."""
        return vmap(self.readout_one)(params, buffers, h)

    def loss(self, params, buffers, h, answers, weights, smoothing):
        """Per-member loss of h (K, Q, D): the final norm, then the tied logits and the
        label-smoothed cross-entropy fused and blocked (:mod:`recallbench.harness.linear_ce`)."""
        normed = vmap(self.normed_one)(params, buffers, h)
        W = {**params, **buffers}["embedding.weight"]
        return linear_cross_entropy(normed, W, answers, weights, smoothing)


def _is_plain(v: Any) -> bool:
    """A module attribute a layer may use as a cache: a tensor, a number or None (a flag such
    as ``training`` is not one)."""
    return v is None or (isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool))


def _plain_attrs(m: nn.Module) -> dict[str, Any]:
    """``m``'s own :func:`_is_plain` attributes (its parameters, buffers and submodules
    live in their own tables, not among them)."""
    return {k: v for k, v in vars(m).items() if _is_plain(v)}


def take(state: Tensors, idx: torch.Tensor | None) -> Tensors:
    """The members ``idx`` of a stacked state (None: all of them, the same tensors)."""
    return state if idx is None else {k: v[idx] for k, v in state.items()}


class StackedModels:
    """K members built as :func:`recallbench.harness.train.run` builds each, stacked.

    ``params``: the trainable parameters (K, ...) by name; ``fixed``: frozen parameters and
    buffers (K, ...); ``val_set`` / ``test_set``: the fixed sets, shared (seed-free).
    """

    def __init__(self, cfgs: list[RunConfig], device: torch.device):
        self.cfgs, self.device, self.K = cfgs, device, len(cfgs)
        self.adapters, self.models = [], []
        for cfg in cfgs:  # train.run's own construction, so the initial weights match
            adapter, model = build_model(cfg, device)
            self.adapters.append(adapter)
            self.models.append(model)
        self.trainable = self.adapters[0].trainable
        self.fn = FunctionalModel(self.models[0])
        params, buffers = stack_module_state(self.models)
        # frozen parameters (requires_grad False) travel with the buffers
        self.names = [n for n, p in self.models[0].named_parameters() if p.requires_grad]
        self.params = {n: params[n].detach() for n in self.names}
        self.fixed = {**{n: p.detach() for n, p in params.items() if n not in self.params},
                      **buffers}
        tc = cfgs[0].train
        self.val_set = fixed_set(cfgs[0].task, tc.val_size, VAL_STREAM)
        self.test_set = fixed_set(cfgs[0].task, tc.test_size, TEST_STREAM)

    def check_vmap(self) -> None:
        """The vmapped forward must run and match the plain forward of each member, on its
        second call too (a layer that keeps state between calls would differ there)."""
        probe = self.val_set[0][:2].to(self.device)
        name = self.cfgs[0].model.adapter
        try:
            with torch.no_grad():
                self.fn.hidden(self.params, self.fixed, probe, shared_tokens=True)
                h = self.fn.hidden(self.params, self.fixed, probe, shared_tokens=True)
                B, L, D = h.shape[1:]
                logits = self.fn.readout(self.params, self.fixed, h.reshape(self.K, B * L, D))
        except Exception as exc:  # noqa: BLE001 - any failure means "does not vmap"
            raise EnsembleError(
                f"adapter {name} cannot be trained as a batched ensemble: its blocks do not "
                f"vmap ({reason(exc, 250)}); run these configs one by one "
                f"with recallbench.harness.train.run") from None
        with torch.no_grad():
            for k in sorted({0, self.K - 1}):
                ref = self.models[k](probe).float()
                got = logits[k].view(B, L, -1).float()
                tol = 1e-4 * (1.0 + ref.abs().max().item())
                if not torch.allclose(got, ref, rtol=1e-4, atol=tol):
                    raise EnsembleError(
                        f"adapter {name} cannot be trained as a batched ensemble: its vmapped "
                        f"forward differs from the plain one (max |Δ| = "
                        f"{(got - ref).abs().max().item():.3g}); run these configs one by one")

    @torch.no_grad()
    def score(self, data, idx: torch.Tensor | None, top_k: int, chunk: int = 512
              ) -> list[dict[str, Any]]:
        """Recall counts of the members ``idx`` (None: all) on a shared fixed set."""
        params, fixed = take(self.params, idx), take(self.fixed, idx)
        K = len(idx) if idx is not None else self.K
        inputs, targets = data
        per = max(1, chunk // K)
        correct = torch.zeros(K, dtype=torch.long)
        correct_k = torch.zeros(K, dtype=torch.long)
        total = 0
        for i in range(0, len(inputs), per):
            x = inputs[i:i + per].to(self.device)
            y = targets[i:i + per].to(self.device)
            mask = y != IGNORE
            h = self.fn.hidden(params, fixed, x, shared_tokens=True)  # (K, b, L, D)
            logits = self.fn.readout(params, fixed, h[:, mask]).float()  # (K, Q, V)
            ans = y[mask]
            top = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
            hits = top == ans[None, :, None]  # as RecallAccuracy: top[..., 0] is the argmax
            correct += hits[..., 0].sum(-1).cpu()
            correct_k += hits.any(-1).sum(-1).cpu()
            total += int(ans.numel())
        den = max(total, 1)
        return [{"accuracy": correct[j].item() / den, "accuracy_topk": correct_k[j].item() / den,
                 "correct": int(correct[j]), "correct_topk": int(correct_k[j]), "total": total}
                for j in range(K)]

    def member_model(self, k: int) -> RecallModel:
        """Member k's weights (the current stacked state) loaded into its RecallModel."""
        model = self.models[k]
        with torch.no_grad():
            for n, p in model.named_parameters():
                src = self.params.get(n, self.fixed.get(n))
                p.copy_(src[k])
            for n, b in model.named_buffers():
                b.copy_(self.fixed[n][k])
        return model
