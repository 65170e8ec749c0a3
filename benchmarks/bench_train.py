"""Training throughput of linear-mamba: harness vs bare loop, parallel vs recurrent, threads.

    python benchmarks/bench_train.py [--steps 200]

Prints, measured in this run on this machine:
1. sequences/s training the Table-8 model through the Lightning harness
   (``recallbench.harness.train.run``; per step, from two runs of different lengths, with the
   fixed start-up cost printed beside it) and through a bare PyTorch loop
   (``recallbench.harness.loop.train_steps``) on the same model, data and batch size; the
   ratio is the harness's per-step overhead;
2. forward+backward time of the layer in its parallel form, its chunked form with chunks
   of 32 (auto's beyond 64 tokens for this state, N·P = 2048), 64 (auto's before
   ``linear_ops.chunk_length``) and 256 tokens, and the step-by-step
   recurrence (``causal_linear_attention_recurrent``), at L = 64, 128 and 320 (the
   paper's layer grid);
3. one thread vs two for the bare loop;
4. the default run with early stop at 0.99: steps and seconds of training;
5. the bare loop reading out only the labelled positions (``RecallModel.logits_at``, what
   the harness does) vs reading out every position and masking the loss (the same loss),
   on the Table-8 model and on a cell of the D–N study (V=512, D=8, N=4);
6. the tied read-out and its cross-entropy, forward+backward, for the Q = 1024 labelled
   positions of a batch (V = 512; D = 4, 16, 64): logits against a contiguous copy of Eᵀ
   (what ``RecallModel.readout`` does) vs against the transposed view ``E.t()``.
"""
from __future__ import annotations

import argparse
import time

import torch

from recallbench.api.config import resolve
from recallbench.harness.loop import train_steps
from recallbench.harness.model import RecallModel
from recallbench.api.registry import ADAPTERS
from recallbench.harness.train import run


def bare_rate(cfg, steps: int, threads: int, full_readout: bool = False) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = RecallModel(ADAPTERS.get("linear-mamba")(cfg.model), cfg.task.vocab_size)
    train_steps(model, cfg.task, 5, cfg.train.batch_size)  # warm up
    start = time.perf_counter()
    train_steps(model, cfg.task, steps, cfg.train.batch_size, lr=cfg.train.lr,
                full_readout=full_readout)
    return steps * cfg.train.batch_size / (time.perf_counter() - start)


def harness_time(raw, steps: int) -> float:
    raw = {**raw, "train": {**raw["train"], "max_steps": steps, "val_every": steps,
                             "val_size": 64, "test_size": 64, "early_stop": None}}
    return run(raw)["train_s"]


def harness_rate(raw, steps: int) -> tuple[float, float]:
    """(sequences/s per step, fixed start-up seconds) of the Lightning path.

    Two runs of different lengths: the difference is the per-step cost alone, the rest
    is the fixed cost of building a Trainer and validating once.
    """
    harness_time(raw, 10)  # warm up (imports, first Trainer)
    short, long = steps // 4, steps
    t_short, t_long = harness_time(raw, short), harness_time(raw, long)
    per_step = (t_long - t_short) / (long - short)
    return raw["train"].get("batch_size", 64) / per_step, t_short - short * per_step


def layer_time(form: str, B: int, L: int, reps: int = 5, chunk_size: int | None = None) -> float:
    from recallbench.adapters.linear_mamba import LinearMambaLayer

    layer = LinearMambaLayer(64, 16, form=form,
                             **({} if chunk_size is None else {"chunk_size": chunk_size}))
    u = torch.randn(B, L, 64, requires_grad=True)
    layer(u).sum().backward()
    start = time.perf_counter()
    for _ in range(reps):
        layer(u).sum().backward()
    return (time.perf_counter() - start) / reps


def readout_time(D: int, contiguous: bool, Q: int = 1024, V: int = 512, reps: int = 50) -> float:
    torch.manual_seed(0)
    h = torch.randn(Q, D, requires_grad=True)
    E = torch.randn(V, D, requires_grad=True)
    y = torch.randint(0, V, (Q,))

    def step():
        Et = E.t().contiguous() if contiguous else E.t()
        torch.nn.functional.cross_entropy(h @ Et, y).backward()

    step()
    start = time.perf_counter()
    for _ in range(reps):
        step()
    return (time.perf_counter() - start) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    raw = {"train": {"progress": False, "threads": 1}}
    cfg = resolve(raw)

    harness, fixed = harness_rate(raw, args.steps)
    bare = bare_rate(cfg, args.steps, 1)
    print(f"1. Table-8 model, batch {cfg.train.batch_size}, up to {args.steps} steps, 1 thread:")
    print(f"   harness {harness:,.0f} seq/s per step (+{fixed:.1f} s fixed start-up), "
          f"bare loop {bare:,.0f} seq/s, ratio harness/bare {harness / bare:.2f}")

    print("2. linear-mamba layer fwd+bwd (D=64, N=16, 1 thread): parallel, chunked and "
          "recurrent forms")
    torch.set_num_threads(1)
    for B, L in [(64, 64), (64, 128), (64, 320)]:
        par, rec = layer_time("parallel", B, L), layer_time("recurrent", B, L, reps=2)
        chunked = {c: layer_time("chunked", B, L, chunk_size=c) for c in (32, 64, 256)}
        print(f"   B={B} L={L}: parallel {par * 1e3:.1f} ms, " + ", ".join(
            f"chunked({c}) {t * 1e3:.1f} ms" for c, t in chunked.items())
            + f", recurrent {rec * 1e3:.1f} ms; parallel/chunked(64) {par / chunked[64]:.2f}x, "
              f"chunked(256)/chunked(64) {chunked[256] / chunked[64]:.2f}x, "
              f"recurrent/parallel {rec / par:.1f}x")

    two = bare_rate(cfg, args.steps // 2, 2)
    one = bare_rate(cfg, args.steps // 2, 1)
    print(f"3. bare loop threads: 1 thread {one:,.0f} seq/s, 2 threads {two:,.0f} seq/s, "
          f"ratio {one / two:.1f}x")

    rec = run({"train": {"progress": False, "early_stop": 0.99}})
    print(f"4. default run to validation accuracy 0.99: {rec['steps']} steps, "
          f"{rec['train_s']:.1f} s of training, test accuracy {rec['accuracy']:.4f}")

    print("5. read-out at the labelled positions vs at every position (bare loop, 1 thread):")
    study = resolve({"task": {"name": "mqar", "vocab_size": 512, "seq_len": 64, "num_facts": 16},
                     "model": {"d_model": 8, "d_state": 4}})
    for name, c in (("Table-8 model (V=128, D=64)", cfg), ("D-N study cell (V=512, D=8)", study)):
        labelled = bare_rate(c, args.steps // 2, 1)
        full = bare_rate(c, args.steps // 2, 1, full_readout=True)
        print(f"   {name}: labelled {labelled:,.0f} seq/s, every position {full:,.0f} seq/s, "
              f"ratio {labelled / full:.2f}x")

    print("6. tied read-out + cross-entropy fwd+bwd (Q=1024, V=512, 1 thread): "
          "contiguous Eᵀ vs the view E.t()")
    for D in (4, 16, 64):  # alternated 3 times, best of each: the ops take milliseconds
        pairs = [(readout_time(D, True), readout_time(D, False)) for _ in range(3)]
        cont, view = (min(p[i] for p in pairs) for i in (0, 1))
        print(f"   D={D}: contiguous {cont * 1e3:.2f} ms, view {view * 1e3:.2f} ms, "
              f"ratio view/contiguous {view / cont:.2f}x")


if __name__ == "__main__":
    main()
