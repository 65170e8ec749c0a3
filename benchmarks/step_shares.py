"""Where a tiny model's training step goes: the run's step under Lightning against the same
step as a plain PyTorch loop, the plain step's phases, its operator calls (and on a GPU its
kernel launches), and the validations' share of ``train_s``.

    python benchmarks/step_shares.py [--device cpu|cuda] [--steps 200] [--set KEY=VALUE ...]
    python benchmarks/bench_overhead.py --shares-only ...     # the same, from there

For one config (default: a capacity card's cell, linear-mamba D=8 N=4, V=64, N_f=4, batch
32; ``--set`` changes it), in this process:

* ``lightning``: ``train.run``'s steps (``RecallModule`` under Lightning's Trainer, the
  validations taken out) per step, and the validations' seconds against ``train_s``;
* ``plain``: the same model, batches, loss, AdamW, clipping and schedule in a bare loop,
  with and without the module's finite-loss check (``torch.isfinite(loss)`` read on the
  host: on a GPU a synchronize every step, so the host cannot queue launches ahead), each
  phase timed (data, forward+loss, backward, clip, optimizer+schedule; on a GPU with a
  synchronize after each phase, so the phases add up to more than the unsynchronized step);
* ``profile``: ``torch.profiler`` over the plain loop: aten operator calls per step, the
  operators' own CPU time against the step's wall time (the rest is Python and the
  dispatcher above them), and on a GPU the kernel launches per step and the device's busy
  time against the step's.

The shares printed: Lightning's own per-step cost (its step less the plain step, over its
step), the phases over the plain step, the validations over ``train_s``, the operators' time
over the plain step.  One invocation, medians of ``--reps`` repetitions.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

DEFAULT = {"task": {"name": "mqar", "vocab_size": 64, "num_facts": 4, "seq_len": 16},
           "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
           "train": {"lr": 0.01, "batch_size": 32, "val_every": 50, "val_size": 512,
                     "test_size": 64, "early_stop": None, "patience": 1000, "threads": 1,
                     "progress": False}}


def flat_sets(sets: list[str], device: str, steps: int) -> list[str]:
    """The config as ``KEY=VALUE`` overrides: :data:`DEFAULT`, then ``sets``, device, steps."""
    import json

    out = [f"{sec}.{k}={json.dumps(v)}" for sec, d in DEFAULT.items() for k, v in d.items()]
    return out + list(sets) + [f"train.device={device}", f"train.max_steps={steps}"]


def config(flat: list[str]):
    import yaml

    from recallbench.api.canonical import set_dotted
    from recallbench.api.config import resolve

    raw: dict = {}
    for s in flat:
        key, value = s.split("=", 1)
        set_dotted(raw, key, yaml.safe_load(value))
    return resolve(raw)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def lightning_step(flat: list[str]) -> tuple[float, float, float]:
    """(seconds a step, seconds of validations, train_s) of ``train.run`` in this process."""
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_overhead import timed_steps  # benchmarks/

    record, steps_s, val_s = timed_steps(flat)
    return steps_s / record["steps"], val_s, record["train_s"]


def plain_loop(cfg, steps: int, profile: bool = False) -> dict:
    """The run's step without Lightning: phases timed, or the whole loop profiled."""
    import torch

    from recallbench.harness.data import TrainStream
    from recallbench.harness.loop import labelled_loss
    from recallbench.harness.prepare import build_model, pick_device
    from recallbench.harness.schedule import warmup_flat_cosine

    device = pick_device(cfg.train.device)
    tc = cfg.train
    torch.set_num_threads(tc.threads or 1)
    _, model = build_model(cfg, device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=float(tc.lr),
                            betas=tuple(tc.betas), weight_decay=tc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_flat_cosine(
        s, tc.max_steps, tc.warmup_frac, tc.decay_frac, False))
    batches = iter(TrainStream(cfg.task, tc.batch_size, tc.seed))
    phases = {k: 0.0 for k in ("data", "forward", "backward", "clip", "optimizer")}
    check = False

    def step(timed: bool):
        marks = [time.perf_counter()]

        def mark():
            if timed:
                sync(device)
                marks.append(time.perf_counter())

        inputs, targets = next(batches)
        inputs, targets = inputs.to(device), targets.to(device)
        mark()
        loss = labelled_loss(model, inputs, targets, tc.label_smoothing)
        if check and not torch.isfinite(loss):
            raise RuntimeError("diverged")
        mark()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        mark()
        if tc.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        mark()
        opt.step()
        sched.step()
        mark()
        if timed:
            for k, a, b in zip(phases, marks, marks[1:]):
                phases[k] += b - a

    for _ in range(5):  # first-use costs
        step(False)
    sync(device)
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as prof

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        t0 = time.perf_counter()
        with prof(activities=acts) as p:
            for _ in range(steps):
                step(False)
            sync(device)
        wall = time.perf_counter() - t0
        ev = p.key_averages()
        aten = [e for e in ev if e.key.startswith("aten::")]
        kernels = [e for e in ev if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA")]
        return {"wall_s": wall / steps,
                "aten_calls": sum(e.count for e in aten) / steps,
                "aten_self_s": sum(e.self_cpu_time_total for e in aten) / 1e6 / steps,
                "kernels": sum(e.count for e in kernels) / steps,
                "device_s": sum(getattr(e, "self_device_time_total", 0) or 0
                                for e in kernels) / 1e6 / steps}
    t0 = time.perf_counter()
    for _ in range(steps):
        step(False)
    sync(device)
    wall = (time.perf_counter() - t0) / steps
    check = True  # the module's finite-loss check: a host sync every step
    t0 = time.perf_counter()
    for _ in range(steps):
        step(False)
    sync(device)
    checked = (time.perf_counter() - t0) / steps
    check = False
    for _ in range(steps):
        step(True)
    return {"wall_s": wall, "checked_s": checked, **{k: v / steps for k, v in phases.items()}}


def measure(flat: list[str], steps: int, reps: int) -> dict:
    cfg = config(flat)
    rows = []
    for _ in range(reps):
        light, val_s, train_s = lightning_step(flat)
        plain = plain_loop(cfg, steps)
        prof = plain_loop(cfg, max(20, steps // 4), profile=True)
        rows.append({"lightning_s": light, "val_s": val_s, "train_s": train_s,
                     **{f"plain_{k}": v for k, v in plain.items()},
                     **{f"prof_{k}": v for k, v in prof.items()}})
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def report(m: dict, device: str) -> list[str]:
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    light, plain = m["lightning_s"], m["plain_wall_s"]
    phases = ("data", "forward", "backward", "clip", "optimizer")
    total = sum(m[f"plain_{k}"] for k in phases)
    lines = [
        f"step on {device}: Lightning {ms(light)}, plain loop {ms(plain)}: Lightning's own "
        f"share {(light - plain) / light:.0%} of its step ({light / plain:.2f}x the plain step)",
        "plain step's phases" + (" (synchronized)" if device != "cpu" else "") + ": "
        + ", ".join(f"{k} {ms(m[f'plain_{k}'])} ({m[f'plain_{k}'] / total:.0%})" for k in phases),
        f"the finite-loss check of each step (a host sync): plain loop with it "
        f"{ms(m['plain_checked_s'])}, {m['plain_checked_s'] / plain:.2f}x without",
        f"operators: {m['prof_aten_calls']:.0f} aten calls a step, their own CPU time "
        f"{ms(m['prof_aten_self_s'])} of a profiled step's {ms(m['prof_wall_s'])} "
        f"({m['prof_aten_self_s'] / m['prof_wall_s']:.0%}; the rest Python, autograd and the "
        "dispatcher above them, and the profiler's own cost)",
        f"validations: {m['val_s']:.2f} s of train_s {m['train_s']:.2f} s "
        f"({m['val_s'] / m['train_s']:.0%})"]
    if device != "cpu":
        lines.append(f"GPU: {m['prof_kernels']:.0f} kernel launches a step, the device busy "
                     f"{ms(m['prof_device_s'])} of {ms(m['prof_wall_s'])} "
                     f"({m['prof_device_s'] / m['prof_wall_s']:.0%}): the rest it waits on "
                     "launches")
    return lines


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    flat = flat_sets(args.set, args.device, args.steps)
    for line in report(measure(flat, args.steps, args.reps), args.device):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
