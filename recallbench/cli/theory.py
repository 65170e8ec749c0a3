"""``recallbench theory``: what the recall law predicts for one setting.

    recallbench theory --task mqar --vocab-size 1024 --num-facts 16 --d-model 32 --d-state 16
    recallbench theory --task ar --vocab-size 512 --num-facts 32 --model-kind designed --target 0.99 --d-model 64
    recallbench theory ... --json

Prints σ, the recall probability (eq. 19, eq. 20 and Rem 4.3), top-k recall, Lem 4.1's
worst-case condition, the state and the Fano minimum (Lem 4.5), the capacity N_f*(δ);
with ``--target``, the smallest N·D, D and N (at ``--d-model``) for that probability
(Rem 4.4).  ``--task`` is any registered task that declares a law family (``ar``,
``mqar``); the family picks a and the default L.  Every formula is in
:mod:`recallbench.law.theory`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math

from recallbench.api.canonical import plain
from recallbench.api.config import DEFAULT_TASK, LIMITS
from recallbench.api.errors import ConfigError
from recallbench.api.fields import short
from recallbench.law import declared, theory


A_RANGE = (1e-6, 1e6)  # the noise coefficient a
DELTA_MIN = 1e-12  # smaller failure probabilities round 1 - δ to 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``recallbench theory``."""
    parser.add_argument("--task", default=DEFAULT_TASK["name"],
                        help=f"a task the law describes (default {DEFAULT_TASK['name']}; "
                             "see `recallbench list tasks`)")
    parser.add_argument("--vocab-size", type=int, required=True,
                        help="V, vocabulary size (even, >= 4); required")
    parser.add_argument("--num-facts", type=int, required=True,
                        help="N_f, key-value facts in the context (1 to V/2 - 1); required")
    parser.add_argument("--seq-len", type=int,
                        help="L, checked by the task as `run` checks it (default: the shortest "
                             "the task accepts: 2·N_f + 1 for ar, 4·N_f for mqar, "
                             "2·N_f·(N_k + 1) for mqar-repeated-keys)")
    parser.add_argument("--num-key-repeats", type=int, default=None,
                        help="N_k, for a task with that parameter (mqar-repeated-keys; "
                             "default: the task's)")
    parser.add_argument("--d-model", type=int,
                        help="D, model width (>= 1); required unless --target is given")
    parser.add_argument("--d-state", type=int,
                        help="N, state size per channel (>= 1); required unless --target is given")
    parser.add_argument("--n-layers", type=int, default=1, help="Λ, layers (default 1)")
    parser.add_argument("--a", type=float, default=None,
                        help="the noise coefficient a (> 0); default: from --model-kind")
    parser.add_argument("--model-kind", choices=theory.MODEL_KINDS, default=None,
                        help="take a from the paper's table (default linear)")
    parser.add_argument("--target", type=float, default=None,
                        help="target recall probability in (0, 1): report the smallest state")
    parser.add_argument("--top-k", type=int, default=5, help="k of the top-k recall (default 5)")
    parser.add_argument("--form", choices=theory.FORMS, default="eq19",
                        help="eq19 (exact integral, default), eq20 (Gumbel) or rem43 (coarse)")
    parser.add_argument("--state-bits", type=int, default=32,
                        help="bits per state scalar for the Fano bound (default 32)")
    parser.add_argument("--delta", type=float, default=0.01,
                        help="failure probability δ of the Fano bound and capacity (default 0.01)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXPLAINED


EXPLAINED = """what the output means (docs/theory.md has every formula):
  σ, 1/σ     noise of the read-out, σ² = a·N_f/(Λ·N·D) + 1/D; recall depends on the setting
             only through 1/σ (and V)
  m_V        eq. 20's threshold for 1/σ, √(2 log V) minus its Gumbel correction
  recall p   probability that a query is answered right: eq. 19 (exact integral), eq. 20
             (Gumbel approximation), Rem 4.3 (Φ(1/σ − √(2 log V)), coarse)
  top-k      probability that the right value is among the k largest logits
  ε_v, ε_k   Lem 4.1's distortions of value and key embeddings, √(4 log V / D) and
             √(4 log V / N); "condition" is Lem 4.1's left-hand side, which must stay
             below 1/2 for recall to be exact in the worst case
  state S    scalars of recurrent state, 2·D·N·Λ for the linear Mamba, times bits per scalar
  Fano       the fewest bits any state needs to recall N_f facts with failure δ, and the
             most facts this state could hold by that bound (at most the V/2 − 1 keys)
  capacity   N_f*(δ): the most facts the law recalls with probability >= 1 − δ (at most
             the V/2 − 1 keys)"""


def _need(value, flag: str, allowed: str):
    if value is None:
        raise ConfigError(f"{flag} is required: {allowed}")
    return value


def _check(value, flag: str, ok: bool, allowed: str) -> None:
    if value is not None and not ok:
        raise ConfigError(f"{flag} = {short(value)} is not allowed: {allowed}")


def _size(value, flag: str, field: str, lo: int = 1, extra: str = "") -> None:
    """An integer flag in [lo, the run config's bound for ``field``] (:data:`LIMITS`)."""
    hi = LIMITS[field]
    _check(value, flag, value is None or lo <= value <= hi,
           f"an integer in [{lo}, {hi}]{extra} (the bound of {field})")


def _family(task: str) -> str:
    """The law family the task declares; ConfigError naming --task if it has none."""
    family = declared.task_family(task)
    if family is None:
        from recallbench.api.registry import TASKS

        known = [n for n in TASKS.names() if declared.task_family(n)]
        raise ConfigError(f"--task = {task!r} is not allowed: a registered task the law "
                          f"describes ({', '.join(known)})")
    return family


def _check_numbers(args) -> None:
    """The flags that are plain numbers, checked before any plugin loads."""
    v = _need(args.vocab_size, "--vocab-size", "an even integer >= 4")
    _size(v, "--vocab-size", "task.vocab_size", 4)
    _check(v, "--vocab-size", v % 2 == 0,
           "an even integer >= 4 (keys and values take one half each, as in the tasks)")
    nf = _need(args.num_facts, "--num-facts", "an integer >= 1")
    _check(nf, "--num-facts", 1 <= nf <= v // 2 - 1,
           f"an integer in [1, {v // 2 - 1}] (the key vocabulary holds V/2 - 1 keys)")
    if args.target is None:
        _need(args.d_model, "--d-model", "an integer >= 1 (or give --target)")
        _need(args.d_state, "--d-state", "an integer >= 1 (or give --target)")
    _size(args.d_model, "--d-model", "model.d_model")
    _size(args.d_state, "--d-state", "model.d_state")
    _size(args.n_layers, "--n-layers", "model.n_layers")
    _size(args.seq_len, "--seq-len", "task.seq_len")
    _check(args.target, "--target", args.target is None or 0.0 < args.target < 1.0,
           "a probability strictly between 0 and 1")
    _check(args.top_k, "--top-k", 1 <= args.top_k <= v - 1, f"an integer in [1, V - 1 = {v - 1}]")
    _check(args.state_bits, "--state-bits", 1 <= args.state_bits <= 64,
           "an integer in [1, 64] (bits per state scalar)")
    _check(args.delta, "--delta", DELTA_MIN <= args.delta < 1.0,
           f"a probability in [{DELTA_MIN:g}, 1) (1 - δ must differ from 1 in floating point)")
    if args.a is not None and args.model_kind is not None:
        raise ConfigError("--a and --model-kind are exclusive: give one (a from the table, or your own)")
    _check(args.a, "--a", args.a is None or A_RANGE[0] <= args.a <= A_RANGE[1],
           f"a number in [{A_RANGE[0]:g}, {A_RANGE[1]:g}] (the paper's are ½ to 3)")


def _flag(message: str) -> str:
    """A task's message in the flags' names: task.seq_len → --seq-len."""
    import re

    return re.sub(r"\btask\.([a-z_]+)", lambda m: "--" + m.group(1).replace("_", "-"), message)


def _task_seq_len(args) -> int:
    """L, checked by the task class as ``run`` checks it; by default the shortest L the task
    accepts (its :meth:`~recallbench.api.task.Task.infeasible` rule).  --num-key-repeats
    goes to the task, which must have that parameter."""
    from recallbench.api.registry import TASKS

    cls = TASKS.get(args.task)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    params = {"vocab_size": args.vocab_size, "num_facts": args.num_facts}
    if args.num_key_repeats is not None:
        if "num_key_repeats" not in fields:
            raise ConfigError(f"--num-key-repeats is not allowed for --task {args.task}: "
                              "it has no num_key_repeats parameter")
        _size(args.num_key_repeats, "--num-key-repeats", "task.num_facts")
        params["num_key_repeats"] = args.num_key_repeats
    if args.seq_len is not None:
        params["seq_len"] = args.seq_len
    elif fields.get("seq_len", 0) is not None:  # a task that derives L itself keeps None
        params["seq_len"] = _shortest_seq_len(cls, {**fields, **params})
    try:
        task = cls.from_params(params)
    except ConfigError as exc:
        raise ConfigError(_flag(str(exc))) from None
    args.num_key_repeats = getattr(task, "num_key_repeats", None)
    return task.seq_len


def _shortest_seq_len(cls, params: dict) -> int:
    """The smallest L that the task's infeasible rule lets through (binary search)."""
    lo, hi = 1, LIMITS["task.seq_len"]
    if cls.infeasible({**params, "seq_len": hi}) is not None:
        return hi  # no L fits: the task's own check names the bound
    while lo < hi:
        mid = (lo + hi) // 2
        if cls.infeasible({**params, "seq_len": mid}) is None:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _validate(args) -> tuple[float, str | None, str]:
    """Check every flag; return (a, model kind, task family)."""
    _check_numbers(args)
    family = _family(args.task)
    args.seq_len = _task_seq_len(args)
    if args.a is not None:
        return float(args.a), None, family
    kind = args.model_kind or "linear"
    return theory.coefficient_a(kind, family), kind, family


def _setting(args, a: float, kind: str | None, family: str) -> dict:
    """Everything the law says about the flags' setting (D and N given), JSON-ready."""
    v, nf, d, n, lam = args.vocab_size, args.num_facts, args.d_model, args.d_state, args.n_layers
    seq_len, keys = args.seq_len, v // 2 - 1  # V_k: the most facts any task can ask
    s = float(theory.inverse_sigma(nf, d, n, a, lam))
    state = float(theory.linear_state_size(d, n, lam))
    out = {
        "task": args.task, "vocab_size": v, "num_facts": nf, "seq_len": seq_len,
        "d_model": d, "d_state": n, "n_layers": lam, "a": a, "model_kind": kind,
        "form": args.form, "sigma": 1.0 / s, "inv_sigma": s,
        "m_v": float(theory.m_v(v)) if v >= 3 else None,
        "recall": theory.recall_from_inverse_sigma(s, v, args.form),
        "recall_forms": {f: theory.recall_from_inverse_sigma(s, v, f) for f in theory.FORMS},
        "top_k": args.top_k,
        "recall_topk": theory.topk_from_inverse_sigma(s, v, args.top_k),
        "worst_case": dataclasses.asdict(theory.worst_case(v, nf, d, n, family, seq_len)),
        "state_size": state, "state_bits": args.state_bits, "delta": args.delta,
        "fano_min_bits": float(theory.fano_min_bits(nf, v, args.delta)),
        "state_bits_total": state * args.state_bits,
        "num_keys": keys,
        "fano_max_facts": min(float(theory.fano_max_facts(state, args.state_bits, v, args.delta)),
                              float(keys)),
        "capacity": min(float(theory.capacity(d, lam * n, v, a, args.delta, args.form)),
                        float(keys)),
    }
    if args.num_key_repeats is not None:
        out["num_key_repeats"] = args.num_key_repeats
    # the designed model's average over query positions follows the default task's slots
    if kind == "designed" and family == "mqar" and args.task == DEFAULT_TASK["name"]:
        out["designed_position_average"] = theory.designed_mqar_recall(
            v, nf, seq_len, d, n, lam, args.form)
    return out


def compute(args) -> dict:
    """The JSON-ready answer for validated flags."""
    a, kind, family = _validate(args)
    if args.d_model is not None and args.d_state is not None:
        out = _setting(args, a, kind, family)
    else:
        out = {"task": args.task, "vocab_size": args.vocab_size, "num_facts": args.num_facts,
               "d_model": args.d_model, "n_layers": args.n_layers, "a": a, "model_kind": kind,
               "form": args.form}
    if args.target is not None:
        out["requirement"] = dataclasses.asdict(theory.requirement(
            args.target, args.vocab_size, args.num_facts, a, args.d_model, args.n_layers, args.form))
    return out


def _g(x, digits=4) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.{digits}g}"


def _all_keys(out: dict, key: str) -> str:
    return (f" (all V/2 − 1 = {out['num_keys']} keys the vocabulary has)"
            if out[key] >= out["num_keys"] else "")


def render_text(out: dict) -> str:
    """The answer as a few readable lines."""
    kind = f" ({out['model_kind']})" if out.get("model_kind") else " (given)"
    lines = [f"Recall law (Koren et al. 2026) for {out['task']}: V={out['vocab_size']}, "
             f"N_f={out['num_facts']}" + (f", L={out['seq_len']}" if out.get("seq_len") else "")
             + (f", D={out['d_model']}" if out.get("d_model") else "")
             + (f", N={out['d_state']}" if out.get("d_state") else "")
             + (f", N_k={out['num_key_repeats']}" if out.get("num_key_repeats") else "")
             + f", Λ={out['n_layers']}, a={_g(out['a'])}{kind}"]
    if "sigma" in out:
        forms = out["recall_forms"]
        lines += [
            f"  σ = √(a·N_f/(Λ·N·D) + 1/D) = {_g(out['sigma'])}   (1/σ = {_g(out['inv_sigma'])}, "
            f"m_V = {_g(out['m_v'])}, √(2 log V) = {_g(theory.sqrt_2_log_v(out['vocab_size']))})",
            f"  recall p = {_g(out['recall'])}  [{out['form']}]   "
            f"(eq. 19: {_g(forms['eq19'])}, eq. 20: {_g(forms['eq20'])}, Rem 4.3: {_g(forms['rem43'])})",
            f"  top-{out['top_k']} recall (Gaussian model of eq. 19) = {_g(out['recall_topk'])}",
        ]
        if "designed_position_average" in out:
            lines.append("  designed model, averaged over MQAR query positions (σ_t² = (t+N)/(N·D)): "
                         f"p = {_g(out['designed_position_average'])}")
        wc = out["worst_case"]
        lines.append(f"  Lem 4.1 worst case: ε_v = {_g(wc['eps_v'])}, ε_k = {_g(wc['eps_k'])}, "
                     f"condition {_g(wc['lhs'])} < 1/2: "
                     + ("exact recall guaranteed" if wc["solved"] else "not guaranteed"))
        lines += [
            f"  state S = 2·D·N·Λ = {_g(out['state_size'], 8)} scalars × {out['state_bits']} bits = "
            f"{_g(out['state_bits_total'], 8)} bits",
            f"  Fano (Lem 4.5) at δ = {out['delta']}: needs ≥ {_g(out['fano_min_bits'])} bits for "
            f"N_f = {out['num_facts']}; this state could hold up to N_f = "
            f"{_g(out['fano_max_facts'])}{_all_keys(out, 'fano_max_facts')}",
            f"  capacity of the law: N_f*(δ = {out['delta']}) = {_g(out['capacity'])} facts"
            f"{_all_keys(out, 'capacity')}",
        ]
    if "requirement" in out:
        r = out["requirement"]
        lines += [
            f"  target p ≥ {r['target']} [{r['form']}]: needs 1/σ ≥ {_g(r['inv_sigma'])}",
            f"    smallest Λ·N·D: > {_g(r['min_nd'])} (= a·N_f·(1/σ*)², approached as D → ∞); "
            f"Rem 4.4 order N_f·log(V/δ) = {_g(r['asymptotic_nd'])}",
            f"    smallest D: > {_g(r['min_d_model'])} (σ² ≥ 1/D whatever N)",
        ]
        if r.get("d_model") is not None:
            lines.append(f"    at D = {_g(r['d_model'])}: smallest N = {_g(r['min_d_state'])} per layer "
                         f"(N·D = {_g(r['nd_at_d_model'])})")
    return "\n".join(lines)


def command(args) -> int:
    """Run ``recallbench theory``; ConfigError on a bad flag (the CLI exits 2)."""
    out = compute(args)
    if args.json:
        print(json.dumps(plain(out), indent=2))
    else:
        print(render_text(out))
    return 0
