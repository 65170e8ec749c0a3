"""One probe of one model: every score of :mod:`.operators` and :mod:`.sequences`, checked first.

    scores, arrays = measure(model, adapter, task, n_sequences=64, seed=0)

The adapter describes its model as a :class:`~recallbench.api.circuit.Circuit`
(``Adapter.circuit``).  Before anything is scored, the circuit's own logits,
``Σ_{τ≤t} G_vv ξ_τ (ξ_τᵀ G_kq ξ_t)``, are compared with the model's on the same
sequences (``circuit_gap``, relative): a circuit that does not describe the model is
refused instead of scored.  The circuit's sign is made canonical first
(:func:`canonical_sign`).  The key and value tokens are read off the task's sequences
(the tokens at asked positions and their answers), so no task layout is assumed.
"""
from __future__ import annotations

import dataclasses

import torch

from recallbench.api.errors import ConfigError
from recallbench.api.task import IGNORE
from recallbench.probe import operators, sequences

#: the largest relative gap between the circuit's logits and the model's that is accepted
CIRCUIT_TOLERANCE = 1e-4


def circuit_logits(c, x: torch.Tensor) -> torch.Tensor:
    """tokens (B, L) -> (B, L, V) float64: the circuit's logits, from G_vv and G_kq alone."""
    xi = sequences.windows(x, c.vocab_size, c.width)
    L = x.shape[1]
    s = (xi @ operators.g_kq(c) @ xi.transpose(1, 2)).transpose(1, 2)  # [t, τ] = ξ_τᵀ G_kq ξ_t
    s = s * torch.ones(L, L, dtype=torch.float64).tril()
    return s @ (xi @ operators.g_vv(c).t())


def canonical_sign(c, values: torch.Tensor):
    """The circuit with (S_C, P_out) → (−S_C, −P_out) if that makes G_vv's value block
    positive on its diagonal: the same model (both signs cancel in the logits), so the
    signed scores compare across runs instead of depending on an arbitrary sign."""
    V, W = c.vocab_size, c.width
    block = operators.g_vv(c)[:, (W - 1) * V:][values][:, values]
    if block.diagonal().sum() >= 0:
        return c
    return dataclasses.replace(c, S_C=-c.S_C, P_out=-c.P_out)


def measure(model, adapter, task, n_sequences: int = 64, seed: int = 0):
    """(scores, arrays): the probe's numbers (JSON-ready) and the matrices for its figures."""
    circuit = adapter.circuit(model)
    if circuit is None:
        raise ConfigError(f"probe: adapter {adapter.name} describes no circuit (Adapter.circuit); "
                          "the probe reads one-layer linear recall circuits such as the "
                          "paper's linear Mamba and the designed model")
    x, y = task.sample(n_sequences, torch.Generator().manual_seed(seed))
    device = next(iter(model.parameters()), torch.empty(0)).device
    model.eval()
    with torch.no_grad():
        got = model(x.to(device)).double().cpu()
    want = circuit_logits(circuit, x)
    gap = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
    if gap > CIRCUIT_TOLERANCE:
        raise ConfigError(f"probe: the circuit of adapter {adapter.name} does not reproduce its "
                          f"model's logits (relative gap {gap:.1e} > {CIRCUIT_TOLERANCE:g})")
    asked = y != IGNORE
    keys, values = torch.unique(x[asked]), torch.unique(y[asked])
    circuit = canonical_sign(circuit, values)
    scores = {"circuit_gap": gap, "width": circuit.width, "sequences": n_sequences, "seed": seed}
    scores.update(operators.operator_scores(circuit, keys, values))
    copy, arrays = sequences.copy_shift(circuit, x, values)
    scores.update(copy)
    state, tables = sequences.state_table(circuit, x, y, keys, values, IGNORE)
    scores.update(state)
    arrays.update(tables, G_vv=operators.g_vv(circuit), G_kq=operators.g_kq(circuit))
    return scores, arrays
