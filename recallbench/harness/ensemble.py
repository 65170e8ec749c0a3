"""Batched ensembles: K independent runs of one model shape trained as one batched model.

    records = run_ensemble([cfg_seed0, cfg_seed1, cfg_seed2])   # one record per config

The K members' parameters are stacked (``torch.func.stack_module_state``) and one
forward/backward pass trains all of them (``torch.func.vmap`` over
``torch.func.functional_call`` of the adapter's blocks), so each op runs once on a
K-times bigger tensor instead of K times.  Everything that makes a run a run stays
per member:

* **Data**: member k draws its training batches from the generator a single run with its
  seed would use (``data.make_generator(TRAIN_STREAM, seed, 0, 0)``, the stream of
  :class:`recallbench.harness.data.TrainStream`); the fixed validation and test sets
  (``data.fixed_set``) do not depend on the seed and are shared.
* **Initialization**: member k is built exactly as :func:`recallbench.harness.train.run` builds it
  (``seed_everything(seed)``, then the adapter and :class:`RecallModel`), so its initial
  weights are the single run's.
* **Optimizer**: AdamW (the single run's: betas, eps 1e-8, decoupled weight decay) with the
  member's own lr and weight decay, the shared warmup → flat → cosine schedule; the
  loss is the member's own mean cross-entropy with its own label smoothing.
* **Gradient clipping**: each member's global gradient norm (over all its parameters) is
  clipped to its own ``grad_clip`` (the formula of ``torch.nn.utils.clip_grad_norm_``),
  so a member with a huge gradient does not scale the others.
* **Validation, best weights and early stop**: every ``val_every`` steps each active member
  is validated; its best weights are kept; a member whose validation accuracy exceeds its
  ``early_stop`` (strictly, as Lightning's EarlyStopping) is frozen: it stops drawing
  data and updating, and its record reports the step it stopped at.  A member whose loss
  becomes NaN/inf is frozen and gets a ``failed`` record; the others go on.
* **Records**: :func:`recallbench.api.record.make_record` of each member's best weights on the
  test set, plus ``"ensemble": K``.  ``train_s`` is the wall time of the batched training
  until that member stopped (shared by the K members, not divided), ``wall_s`` the whole
  ensemble's.

Which configs may be batched (:func:`shape_key`): everything must be equal except the
keys in :data:`MEMBER_KEYS` (``train.seed, lr, weight_decay, label_smoothing, grad_clip,
early_stop``) and the execution-only keys ``train.threads`` and ``train.progress``
(the ensemble uses one thread count: the first config's, else 1, see :func:`ensemble_threads`).

Speed (CPU).  Stacking K members turns K small ops into one, which pays where a single
run is dispatch-bound, and costs where the stacked tensors outgrow the cache.  Like a
single run (:meth:`RecallModel.logits_at`), the batched path reads out only the labelled
positions, here fused and blocked so the K·Q·V logits never exist at once
(:mod:`recallbench.harness.linear_ce`); it also makes one AdamW update for all members and has
no Lightning machinery.  Measured with ``benchmarks/bench_ensemble.py --table8 --repeat 2``
(K = 8, 100 steps, cells of the D–N study at V = 512, idle 2-core machine), throughput
against 8 sequential ``train.run`` calls: D = 4: 1.57x with 1 thread, 2.24x with 2;
D = 8: 1.43x / 2.26x; D = 16: 1.29x / 2.10x; D = 32: 1.08x / 1.84x; the Table-8 model
(V = 128, D = 64): 0.96x / 1.63x.  So on a CPU the ensemble's gain is mostly that one
process keeps every core busy: against the same 8 runs over 2 worker processes (each on
one thread) it was 1.22x faster at D = 4 and 0.83x as fast at D = 64.

Limits: the blocks must vmap (pure PyTorch ops, no data-dependent Python control flow,
no custom CUDA/Triton kernels, no in-place updates of buffers); :func:`run_ensemble` checks
that the vmapped forward matches the plain one and raises :class:`EnsembleError` (a
ConfigError) naming the adapter otherwise.  One device, one process; no DDP.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import time
import warnings
from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from recallbench.api.config import RunConfig, resolve
from recallbench.harness.data import TEST_STREAM, TRAIN_STREAM, VAL_STREAM, fixed_set, make_generator
from recallbench.harness.linear_ce import linear_cross_entropy
from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.harness.model import RecallModel
from recallbench.api.registry import ADAPTERS
from recallbench.api.record import failed_record, make_record
from recallbench.harness.schedule import warmup_flat_cosine
from recallbench.api.task import IGNORE
from recallbench.harness.train import TINY_CHANNELS, build_model, cpu_threads, pick_device

#: train keys that may differ between the members of one ensemble
MEMBER_KEYS = ("seed", "lr", "weight_decay", "label_smoothing", "grad_clip", "early_stop")
#: execution-only keys that are ignored by shape_key (the ensemble picks one value)
EXECUTION_KEYS = ("threads", "progress")
ADAM_EPS = 1e-8  # torch.optim.AdamW's default, which the single run uses
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


class EnsembleError(ConfigError):
    """Configs that cannot be trained as one batched ensemble."""


# -- which configs batch together ------------------------------------------------------

def _as_config(config: RunConfig | Mapping[str, Any]) -> RunConfig:
    return config if isinstance(config, RunConfig) else resolve(config)


def _shape_dict(cfg: RunConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    d["train"] = {k: v for k, v in d["train"].items()
                  if k not in MEMBER_KEYS and k not in EXECUTION_KEYS}
    return d


def shape_key(cfg: RunConfig | Mapping[str, Any]) -> str:
    """A hash of everything that must be equal for configs to share one batched model.

    Equal: the task, the whole model section, and train's max_steps, batch_size,
    val_size, test_size, val_every, warmup_frac, decay_frac, betas, top_k and device.
    Free per member: ``MEMBER_KEYS`` (seed, lr, weight_decay, label_smoothing,
    grad_clip, early_stop).  Ignored: threads, progress.
    """
    canonical = json.dumps(_shape_dict(_as_config(cfg)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def group_by_shape(configs: Sequence[RunConfig | Mapping[str, Any]]) -> dict[str, list[int]]:
    """Indices of ``configs`` grouped by :func:`shape_key` (in first-seen order)."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(shape_key(c), []).append(i)
    return groups


def _first_difference(a: RunConfig, b: RunConfig) -> str:
    da, db = _shape_dict(a), _shape_dict(b)
    for section in da:
        for key in sorted(set(da[section]) | set(db[section])):
            if da[section].get(key) != db[section].get(key):
                return f"{section}.{key} ({da[section].get(key)!r} vs {db[section].get(key)!r})"
    return "?"


def ensemble_threads(cfgs: Sequence[RunConfig]) -> int:
    """CPU threads for an ensemble: the first config's ``train.threads``, else the harness's
    rule (:data:`recallbench.harness.train.TINY_CHANNELS`) applied to the batched width K·expand·D.

    Measured (benchmarks/bench_ensemble.py, Table-8 model, K = 8, 2 cores): on an idle
    machine 2 threads ran the batched model 1.8x faster than 1 thread; on a machine shared
    with other jobs 2 threads were 2-2.3x slower, so set ``train.threads: 1`` (or
    ``--threads-per-worker 1``) when the cores are busy.
    """
    if cfgs[0].train.threads is not None:
        return cfgs[0].train.threads
    width = len(cfgs) * cfgs[0].model.expand * cfgs[0].model.d_model
    return 1 if width <= TINY_CHANNELS else torch.get_num_threads()


# -- the functional, batched model ------------------------------------------------------

class _Functional:
    """The functional form of :meth:`RecallModel.forward` over stacked member states.

    ``hidden`` is everything before the final norm (embedding and blocks), ``readout`` the
    final norm and the tied logits; :meth:`RecallModel.forward` is ``readout(hidden(x))``.
    Both are vmapped over the member dimension (dim 0 of every stacked tensor).
    """

    def __init__(self, model: RecallModel):
        self.base = copy.deepcopy(model).to("meta")

    @staticmethod
    def _sub(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
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
        return vmap(self.hidden_one, in_dims=(0, 0, None if shared_tokens else 0))(
            params, buffers, tokens)

    def readout(self, params, buffers, h):
        """h (K, Q, D) -> logits (K, Q, V)."""
        return vmap(self.readout_one)(params, buffers, h)

    def loss(self, params, buffers, h, answers, weights, smoothing):
        """Per-member loss of h (K, Q, D): the final norm, then the tied logits and the
        label-smoothed cross-entropy fused and blocked (:mod:`recallbench.harness.linear_ce`)."""
        normed = vmap(self.normed_one)(params, buffers, h)
        W = {**params, **buffers}["embedding.weight"]
        return linear_cross_entropy(normed, W, answers, weights, smoothing)


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


# -- the ensemble ------------------------------------------------------------------------

class _Ensemble:
    def __init__(self, cfgs: list[RunConfig], device: torch.device):
        self.cfgs, self.device, self.K = cfgs, device, len(cfgs)
        first = cfgs[0]
        self.adapter_cls = ADAPTERS.get(first.model.adapter)
        self.adapters, self.models = [], []
        for cfg in cfgs:  # train.run's own construction, so the initial weights match
            adapter, model = build_model(cfg, device)
            self.adapters.append(adapter)
            self.models.append(model)
        self.trainable = self.adapters[0].trainable
        self.fn = _Functional(self.models[0])
        params, buffers = stack_module_state(self.models)
        # frozen parameters (requires_grad False) travel with the buffers
        self.names = [n for n, p in self.models[0].named_parameters() if p.requires_grad]
        self.params = {n: params[n].detach() for n in self.names}
        self.fixed = {**{n: p.detach() for n, p in params.items() if n not in self.params},
                      **buffers}
        tc = first.train
        self.val_set = fixed_set(first.task, tc.val_size, VAL_STREAM)
        self.test_set = fixed_set(first.task, tc.test_size, TEST_STREAM)

    # state of a subset of members
    def _take(self, state: dict[str, torch.Tensor], idx: torch.Tensor | None):
        return state if idx is None else {k: v[idx] for k, v in state.items()}

    def check_vmap(self) -> None:
        """The vmapped forward must run and match the plain forward of each member."""
        probe = self.val_set[0][:2].to(self.device)
        name = self.cfgs[0].model.adapter
        try:
            with torch.no_grad():
                h = self.fn.hidden(self.params, self.fixed, probe, shared_tokens=True)
                B, L, D = h.shape[1:]
                logits = self.fn.readout(self.params, self.fixed, h.reshape(self.K, B * L, D))
        except Exception as exc:  # noqa: BLE001 - any failure means "does not vmap"
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise EnsembleError(
                f"adapter {name} cannot be trained as a batched ensemble: its blocks do not "
                f"vmap ({type(exc).__name__}: {msg[:200]}); run these configs one by one "
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
    def score(self, data, idx: torch.Tensor | None, top_k: int, chunk: int = 512):
        """Recall counts of the members ``idx`` (None: all) on a shared fixed set."""
        params, fixed = self._take(self.params, idx), self._take(self.fixed, idx)
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
            hs = h[:, mask]  # (K, Q, D)
            logits = self.fn.readout(params, fixed, hs).float()
            ans = y[mask]
            k = min(top_k, logits.shape[-1])
            top = logits.topk(k, dim=-1).indices  # as RecallAccuracy: top[..., 0] is the argmax
            hits = top == ans[None, :, None]
            correct += hits[..., 0].sum(-1).cpu()
            correct_k += hits.any(-1).sum(-1).cpu()
            total += int(ans.numel())
        out = []
        for j in range(K):
            den = max(total, 1)
            out.append({"accuracy": correct[j].item() / den,
                        "accuracy_topk": correct_k[j].item() / den,
                        "correct": int(correct[j]), "correct_topk": int(correct_k[j]),
                        "total": total})
        return out

    def train(self, show: bool = False, on_step=None) -> dict[str, Any]:
        cfgs, K, dev = self.cfgs, self.K, self.device
        tc = cfgs[0].train
        task = cfgs[0].task
        f32 = dict(dtype=torch.float32, device=dev)
        lr = torch.tensor([c.train.lr for c in cfgs], **f32)
        wd = torch.tensor([c.train.weight_decay for c in cfgs], **f32)
        smoothing = torch.tensor([c.train.label_smoothing for c in cfgs], **f32)
        clip = torch.tensor([c.train.grad_clip if c.train.grad_clip is not None else math.inf
                             for c in cfgs], **f32)
        beta1, beta2 = (float(b) for b in tc.betas)
        gens = [make_generator(TRAIN_STREAM, c.train.seed, 0, 0) for c in cfgs]
        exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}

        active = [True] * K
        self.steps = [0] * K
        self.stop_s = [0.0] * K
        self.best_val = [-1.0] * K
        self.best_step = [0] * K
        self.best_state: list[dict[str, torch.Tensor] | None] = [None] * K
        self.failed: list[str | None] = [None] * K
        self.losses: list[list[float]] = [[] for _ in range(K)]
        last_val = -1
        t0 = time.perf_counter()
        bar = _progress(tc.max_steps, K) if show else None

        def shaped(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
            return v.view(-1, *([1] * (like.dim() - 1)))

        def validate(step: int, members: list[int]) -> None:
            idx = None if len(members) == K else torch.tensor(members, device=dev)
            scores = self.score(self.val_set, idx, cfgs[0].train.top_k)
            for j, k in enumerate(members):
                acc = scores[j]["accuracy"]
                if acc > self.best_val[k]:
                    self.best_val[k], self.best_step[k] = acc, step
                    self.best_state[k] = {n: v[k].clone() for n, v in self.params.items()}
                stop = cfgs[k].train.early_stop
                if stop is not None and acc > stop and active[k]:
                    active[k] = False
                    self.steps[k], self.stop_s[k] = step, time.perf_counter() - t0

        for step in range(tc.max_steps):
            members = [k for k in range(K) if active[k]]
            if not members:
                break
            full = len(members) == K
            idx = None if full else torch.tensor(members, device=dev)
            batches = [task.sample(tc.batch_size, gens[k]) for k in members]
            x = torch.stack([b[0] for b in batches]).to(dev)
            y = torch.stack([b[1] for b in batches]).to(dev)
            p = {n: (v if full else v[idx]).requires_grad_(True) for n, v in self.params.items()}
            fixed = self._take(self.fixed, idx)
            h = self.fn.hidden(p, fixed, x)
            mask = y != IGNORE
            hs, keep = _labelled(h, mask)
            answers = y[mask].view(len(members), -1) if keep is None else y.flatten(1)
            answers, weights = _query_weights(answers, keep)
            sm = smoothing if full else smoothing[idx]
            loss = self.fn.loss(p, fixed, hs, answers, weights, sm)
            grads = torch.autograd.grad(loss.sum(), [p[n] for n in self.names])
            for v in p.values():
                v.requires_grad_(False)
            loss_list = loss.detach().cpu().tolist()
            finite = [math.isfinite(v) for v in loss_list]
            for j, k in enumerate(members):
                self.losses[k].append(loss_list[j])
                if not finite[j]:
                    self.failed[k] = f"training loss became {loss_list[j]} at step {step}"
                    active[k] = False
                    self.steps[k], self.stop_s[k] = step, time.perf_counter() - t0
            # per-member global gradient norm clipping (clip_grad_norm_'s formula)
            sel = lambda v: v if full else v[idx]  # noqa: E731
            norm = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
            coef = (sel(clip) / (norm + CLIP_EPS)).clamp(max=1.0)
            coef = torch.where(torch.isfinite(norm), coef, torch.ones_like(coef))
            keep_update = torch.tensor([finite[j] for j in range(len(members))], device=dev)
            mult = warmup_flat_cosine(step, tc.max_steps, tc.warmup_frac, tc.decay_frac)
            lr_now = sel(lr) * mult
            t = step + 1  # every active member has taken exactly step + 1 updates
            bc1, bc2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
            for n, g in zip(self.names, grads):
                g = g * shaped(coef, g)
                P, m, v = self.params[n], exp_avg[n], exp_avg_sq[n]
                pk, mk, vk = (P, m, v) if full else (P[idx], m[idx], v[idx])
                pk = pk * shaped(1.0 - lr_now * sel(wd), pk)
                mk = torch.lerp(mk, g, 1.0 - beta1)
                vk = vk * beta2 + (1.0 - beta2) * g * g
                denom = vk.sqrt() / math.sqrt(bc2) + ADAM_EPS
                pk = pk - shaped(lr_now / bc1, pk) * mk / denom
                ok = shaped(keep_update, pk)
                if full:
                    P.copy_(torch.where(ok, pk, P))
                    m.copy_(mk)
                    v.copy_(vk)
                else:
                    P[idx] = torch.where(ok, pk, P[idx])
                    m[idx], v[idx] = mk, vk
            done = step + 1
            if on_step is not None:
                on_step(done, members, loss_list)
            if bar is not None:
                bar(done, sum(active))
            if done % tc.val_every == 0:
                validate(done, [k for k in members if active[k]])
                last_val = done
        still = [k for k in range(K) if active[k]]
        if still and last_val != tc.max_steps:
            validate(tc.max_steps, still)  # score the final weights too (as train.run)
        for k in range(K):
            if active[k]:
                self.steps[k], self.stop_s[k] = tc.max_steps, time.perf_counter() - t0
        if bar is not None:
            bar(None, 0)
        # restore every member's best weights
        for k in range(K):
            if self.best_state[k] is not None:
                for n, v in self.best_state[k].items():
                    self.params[n][k] = v
        return {"train_s": time.perf_counter() - t0}

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


def _progress(total: int, K: int):
    import sys

    def show(step, active):
        if step is None:
            sys.stderr.write("\n")
        elif step % 10 == 0 or step == total:
            sys.stderr.write(f"\rensemble of {K}: step {step}/{total}, {active} active ")
        sys.stderr.flush()
    return show


def run_ensemble(configs: Sequence[RunConfig | Mapping[str, Any]], progress: bool = False,
                 on_step=None) -> list[dict[str, Any]]:
    """Train K configs of one shape (see :func:`shape_key`) as one batched model.

    Returns one result record per config, in order (schema of :func:`train.run`, plus
    ``"ensemble": K``).  ``on_step(step, members, losses)`` is called after every step
    (members: the indices trained in it; losses: their training losses).
    """
    cfgs = [_as_config(c) for c in configs]
    if not cfgs:
        return []
    key = shape_key(cfgs[0])
    for i, c in enumerate(cfgs[1:], 1):
        if shape_key(c) != key:
            raise EnsembleError(f"configs 0 and {i} cannot share a batched ensemble: they differ "
                                f"in {_first_difference(cfgs[0], c)}; only train."
                                f"{', train.'.join(MEMBER_KEYS)} may differ")
    adapter_cls = ADAPTERS.get(cfgs[0].model.adapter)
    ok, why = adapter_cls.availability()
    if not ok:
        raise UnavailableError(f"adapter {cfgs[0].model.adapter} cannot run here: {why}")
    device = pick_device(cfgs[0].train.device)
    threads = ensemble_threads(cfgs) if device.type == "cpu" else torch.get_num_threads()
    start = time.perf_counter()
    with cpu_threads(threads), warnings.catch_warnings():
        # ops without a batching rule (e.g. CPU SDPA) run member by member: correct, slower
        warnings.filterwarnings("ignore", message=".*have not yet implemented the batching rule")
        ens = _Ensemble(cfgs, device)
        ens.check_vmap()
        K = ens.K
        tc = cfgs[0].train
        trained = ens.trainable and tc.max_steps > 0
        if trained:
            ens.train(show=progress, on_step=on_step)
        tests = ens.score(ens.test_set, None, tc.top_k)
        records = []
        for k, cfg in enumerate(cfgs):
            if trained and ens.failed[k] is not None:
                rec = failed_record(cfg, ens.failed[k])
            else:
                model = ens.member_model(k)
                rec = make_record(
                    cfg, ens.adapters[k], model, tests[k],
                    steps=ens.steps[k] if trained else 0,
                    train_s=ens.stop_s[k] if trained else 0.0,
                    val_accuracy=(ens.best_val[k] if trained and ens.best_state[k] is not None
                                  else None),
                    best_step=ens.best_step[k] if trained else 0, device=device)
            rec["ensemble"] = K
            records.append(rec)
    wall = round(time.perf_counter() - start, 3)
    for rec in records:
        rec["wall_s"] = wall
        rec["threads"] = threads if device.type == "cpu" else None
    return records
