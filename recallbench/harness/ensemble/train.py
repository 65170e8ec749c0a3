"""The training loop of a batched ensemble (:class:`~recallbench.harness.ensemble.model.StackedModels`).

Every step: each active member draws its own batch (its single run's stream), the stacked
forward gives each member's mean label-smoothed cross-entropy, one backward pass gives
all gradients, and :class:`StackedAdamW` updates every member with its own lr, weight
decay and gradient clip.  Every ``val_every`` steps the active members are validated;
each keeps its best weights and its own :class:`~recallbench.harness.convergence.History`,
and stops (frozen, no more data or updates) when it passes its ``early_stop``, reaches a
plateau (its ``patience``) or its loss is no longer finite.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Callable

import torch

from recallbench.api.config import RunConfig
from recallbench.api.task import IGNORE
from recallbench.harness.convergence import History, guess_of
from recallbench.harness.data import TRAIN_STREAM, make_generator
from recallbench.harness.ensemble.compile import Compiled
from recallbench.harness.ensemble.model import StackedModels, Tensors, take
from recallbench.harness.schedule import warmup_flat_cosine

ADAM_EPS = 1e-8  # torch.optim.AdamW's default, which the single run uses
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


def _shaped(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-member vector (K,) viewed to broadcast against ``like`` (K, ...)."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def _member_tensor(cfgs: list[RunConfig], get: Callable, device) -> torch.Tensor:
    return torch.tensor([get(c.train) for c in cfgs], dtype=torch.float32, device=device)


class StackedAdamW:
    """AdamW over stacked member parameters (the single run's: decoupled weight decay, eps
    1e-8, the shared warmup → flat → cosine schedule), each member with its own lr and
    weight decay, after clipping each member's global gradient norm to its own
    ``grad_clip`` (``torch.nn.utils.clip_grad_norm_``'s formula)."""

    def __init__(self, cfgs: list[RunConfig], params: Tensors, device):
        tc = cfgs[0].train
        self.lr = _member_tensor(cfgs, lambda t: t.lr, device)
        self.wd = _member_tensor(cfgs, lambda t: t.weight_decay, device)
        self.clip = _member_tensor(
            cfgs, lambda t: t.grad_clip if t.grad_clip is not None else math.inf, device)
        self.beta1, self.beta2 = (float(b) for b in tc.betas)
        self.schedule = (tc.max_steps, tc.warmup_frac, tc.decay_frac)
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}

    def step(self, params: Tensors, grads: dict[str, torch.Tensor], idx: torch.Tensor | None,
             step: int, keep: torch.Tensor) -> None:
        """Update the members ``idx`` (None: all) in place; members with ``keep`` False
        (a non-finite loss) keep their weights."""
        full = idx is None
        sel = lambda v: v if full else v[idx]  # noqa: E731
        norm = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads.values()]).sum(0).sqrt()
        coef = (sel(self.clip) / (norm + CLIP_EPS)).clamp(max=1.0)
        coef = torch.where(torch.isfinite(norm), coef, torch.ones_like(coef))
        lr_now = sel(self.lr) * warmup_flat_cosine(step, *self.schedule)
        t = step + 1  # every active member has taken exactly step + 1 updates
        bc1, bc2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
        for n, g in grads.items():
            g = g * _shaped(coef, g)
            P, m, v = params[n], self.exp_avg[n], self.exp_avg_sq[n]
            pk, mk, vk = (P, m, v) if full else (P[idx], m[idx], v[idx])
            pk = pk * _shaped(1.0 - lr_now * sel(self.wd), pk)
            mk = torch.lerp(mk, g, 1.0 - self.beta1)
            vk = vk * self.beta2 + (1.0 - self.beta2) * g * g
            denom = vk.sqrt() / math.sqrt(bc2) + ADAM_EPS
            pk = pk - _shaped(lr_now / bc1, pk) * mk / denom
            ok = _shaped(keep, pk)
            if full:
                P.copy_(torch.where(ok, pk, P))
                m.copy_(mk)
                v.copy_(vk)
            else:
                P[idx] = torch.where(ok, pk, P[idx])
                m[idx], v[idx] = mk, vk


@dataclasses.dataclass
class Outcome:
    """Per member (lists of length K): where its training ended and its best weights."""

    active: list[bool]
    steps: list[int]
    stop_s: list[float]  # seconds of batched training until the member stopped
    best_val: list[float]
    best_step: list[int]
    best_state: list[Tensors | None]
    failed: list[str | None]  # why the member failed (its loss became non-finite)
    history: list[History]  # each member's validations, stopping rule and convergence

    @classmethod
    def start(cls, cfgs: list[RunConfig]) -> "Outcome":
        K = len(cfgs)
        return cls([True] * K, [0] * K, [0.0] * K, [-1.0] * K, [0] * K, [None] * K, [None] * K,
                   [History(c.train.early_stop, c.train.patience, guess_of(c.task)) for c in cfgs])

    def stop(self, k: int, step: int, t0: float) -> None:
        self.active[k] = False
        self.steps[k], self.stop_s[k] = step, time.perf_counter() - t0


def _labelled(h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """h (K, B, L, D) at the labelled positions: (K, Q, D) when every member has Q of them
    (MQAR, AR: always), else (K, B·L, D) and the flattened mask (K, B·L)."""
    counts = mask.flatten(1).sum(1)
    if bool((counts == counts[0]).all()):
        return h[mask].view(h.shape[0], int(counts[0]), h.shape[-1]), None
    return h.flatten(1, 2), mask.flatten(1)


def _query_weights(answers: torch.Tensor, keep: torch.Tensor | None):
    """answers clamped into range, and per-query weights that make each member's loss the
    mean over its labelled positions (``keep``: which entries are labelled; None: all)."""
    if keep is None:
        return answers, torch.full(answers.shape, 1.0 / answers.shape[1], device=answers.device)
    keep = keep.float()
    return answers.clamp_min(0), keep / keep.sum(-1, keepdim=True).clamp_min(1.0)


def _loss_and_grads(ens: StackedModels, x, y, idx, smoothing, hidden: Callable):
    """Each member's training loss on its batch x, y (K', B, L), and the gradients;
    ``hidden``: the vmapped blocks (``ens.fn.hidden``, or its compiled form)."""
    full = idx is None
    p = {n: (v if full else v[idx]).requires_grad_(True) for n, v in ens.params.items()}
    fixed = take(ens.fixed, idx)
    h = hidden(p, fixed, x)
    mask = y != IGNORE
    hs, keep = _labelled(h, mask)
    answers = y[mask].view(x.shape[0], -1) if keep is None else y.flatten(1)
    answers, weights = _query_weights(answers, keep)
    loss = ens.fn.loss(p, fixed, hs, answers, weights, smoothing if full else smoothing[idx])
    grads = torch.autograd.grad(loss.sum(), [p[n] for n in ens.names])
    for v in p.values():
        v.requires_grad_(False)
    return loss.detach().cpu().tolist(), dict(zip(ens.names, grads))


def _validate(ens: StackedModels, out: Outcome, step: int, members: list[int], t0: float) -> None:
    """Score ``members`` on the validation set: keep best weights, stop those whose
    History says so (early stop, plateau)."""
    idx = None if len(members) == ens.K else torch.tensor(members, device=ens.device)
    scores = ens.score(ens.val_set, idx, ens.cfgs[0].train.top_k)
    for j, k in enumerate(members):
        acc = scores[j]["accuracy"]
        if acc > out.best_val[k]:
            out.best_val[k], out.best_step[k] = acc, step
            out.best_state[k] = {n: v[k].clone() for n, v in ens.params.items()}
        if out.history[k].add(step, acc, scores[j]["total"]) and out.active[k]:
            out.stop(k, step, t0)


def train(ens: StackedModels, show: bool = False, on_step=None,
          compile: str | None = None) -> Outcome:
    """Train every member to its end; the members' best weights are restored in ``ens``.
    ``compile``: a mode of :data:`~recallbench.harness.ensemble.compile.COMPILE_MODES`
    for the vmapped blocks, or None (plain)."""
    cfgs, K, dev = ens.cfgs, ens.K, ens.device
    tc, task = cfgs[0].train, cfgs[0].task
    opt = StackedAdamW(cfgs, ens.params, dev)
    smoothing = _member_tensor(cfgs, lambda t: t.label_smoothing, dev)
    gens = [make_generator(TRAIN_STREAM, c.train.seed, 0, 0) for c in cfgs]
    out, last_val, t0 = Outcome.start(cfgs), -1, time.perf_counter()
    hidden = Compiled(ens.fn.hidden, compile) if compile else None
    batch = None  # compiled: every member's latest batch (K, B, L), so shapes never change
    bar = _progress(tc.max_steps, K) if show else None
    for step in range(tc.max_steps):
        members = [k for k in range(K) if out.active[k]]
        if not members:
            break
        idx = None if len(members) == K else torch.tensor(members, device=dev)
        batches = [task.sample(tc.batch_size, gens[k]) for k in members]
        x = torch.stack([b[0] for b in batches]).to(dev)
        y = torch.stack([b[1] for b in batches]).to(dev)
        whole = hidden is not None and hidden.active
        if whole:
            batch = _whole(batch, x, y, idx)
            losses, grads = _loss_and_grads(ens, *batch, None, smoothing, hidden)
            losses = [losses[k] for k in members]
        else:
            losses, grads = _loss_and_grads(ens, x, y, idx, smoothing, hidden or ens.fn.hidden)
        finite = [math.isfinite(v) for v in losses]
        for j, k in enumerate(members):
            if not finite[j]:
                out.failed[k] = f"training loss became {losses[j]} at step {step}"
                out.stop(k, step, t0)
        # the whole batch updates only the members still active (stopped ones keep theirs)
        keep = out.active if whole else finite
        opt.step(ens.params, grads, None if whole else idx, step, torch.tensor(keep, device=dev))
        done = step + 1
        if on_step is not None:
            on_step(done, members, losses)
        if bar is not None:
            bar(done, sum(out.active))
        if done % tc.val_every == 0:
            _validate(ens, out, done, [k for k in members if out.active[k]], t0)
            last_val = done
    _finish(ens, out, last_val, t0)
    if bar is not None:
        bar(None, 0)
    return out


def _whole(batch, x, y, idx):
    """(x, y) of all K members: the active ones' new rows ``idx`` (None: all) over the
    previous batch's (a stopped member's rows are computed, never used)."""
    if batch is None or idx is None:
        return x, y
    bx, by = batch
    bx[idx], by[idx] = x, y
    return bx, by


def _finish(ens: StackedModels, out: Outcome, last_val: int, t0: float) -> None:
    """Score the final weights of members still active (as train.run), stop them at
    max_steps, and put every member's best weights back."""
    max_steps = ens.cfgs[0].train.max_steps
    still = [k for k in range(ens.K) if out.active[k]]
    if still and last_val != max_steps:
        _validate(ens, out, max_steps, still, t0)
    for k in range(ens.K):
        if out.active[k]:
            out.steps[k], out.stop_s[k] = max_steps, time.perf_counter() - t0
    for k, state in enumerate(out.best_state):
        for n, v in (state or {}).items():
            ens.params[n][k] = v


def _progress(total: int, K: int):
    def show(step, active):
        if step is None:
            sys.stderr.write("\n")
        elif step % 10 == 0 or step == total:
            sys.stderr.write(f"\rensemble of {K}: step {step}/{total}, {active} active ")
        sys.stderr.flush()
    return show
