"""The probe's figures (the paper's Fig. 16, 15 and 3), on matplotlib Figures without pyplot.

* ``operators.png``: G_vv (V × W·V) and G_kq (W·V × W·V), block edges marked;
* ``copy_shift.png``: M_vv and M_kq of the first probe sequence beside their ideals;
* ``state.png``: the exact table H_t, the compressed state H'_t and the decompressed H''_t
  at the last position of that sequence (values × keys for the tables).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch
from matplotlib.figure import Figure


def _show(ax, m: torch.Tensor, title: str, blocks: int = 0, vocab: int = 0) -> None:
    a = m.detach().cpu().double().numpy()
    lim = float(np.abs(a).max()) or 1.0
    im = ax.imshow(a, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest", aspect="auto")
    for b in range(1, blocks):
        ax.axvline(b * vocab - 0.5, color="k", lw=0.6)
        if a.shape[0] == a.shape[1]:
            ax.axhline(b * vocab - 0.5, color="k", lw=0.6)
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02)


def draw(arrays: Mapping[str, torch.Tensor], scores: Mapping, out: Path, title: str) -> list[Path]:
    """Write the figures into ``out``; returns their paths."""
    W, V = scores["width"], arrays["G_vv"].shape[0]
    paths = []
    fig = Figure(figsize=(11, 4.6), dpi=110)
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"wspace": 0.4})
    _show(ax1, arrays["G_vv"], f"G_vv (V × W·V), current-token block {scores['vv_block_fraction']:.2f}",
          W, V)
    _show(ax2, arrays["G_kq"], f"G_kq (W·V × W·V), key×query block {scores['kq_block_fraction']:.2f}",
          W, V)
    ax1.set_xlabel("ξ_τ: token x_{τ-W+1} … x_τ (blocks)")
    ax2.set_xlabel("ξ_t (query side)")
    ax2.set_ylabel("ξ_τ (key side)")
    fig.suptitle(title, fontsize=10)
    paths.append(out / "operators.png")
    fig.savefig(paths[-1], bbox_inches="tight")

    fig = Figure(figsize=(11, 8.4), dpi=110)
    axes = fig.subplots(2, 2, gridspec_kw={"wspace": 0.35, "hspace": 0.35})
    _show(axes[0, 0], arrays["M_vv"], f"copy: x_tᵀ G_vv ξ_τ (score {scores['copy_score']:.2f})")
    _show(axes[0, 1], arrays["copy_ideal"], "ideal: [x_τ = x_t]")
    _show(axes[1, 0], arrays["M_kq"], f"shift: ξ_τᵀ G_kq ξ_t (score {scores['shift_score']:.2f})")
    _show(axes[1, 1], arrays["shift_ideal"], "ideal: [x_{τ-1} = x_t]")
    for ax in axes.flat:
        ax.set_xlabel("τ")
        ax.set_ylabel("t")
    fig.suptitle(title, fontsize=10)
    paths.append(out / "copy_shift.png")
    fig.savefig(paths[-1], bbox_inches="tight")

    fig = Figure(figsize=(13, 4.2), dpi=110)
    axes = fig.subplots(1, 3, gridspec_kw={"wspace": 0.4})
    _show(axes[0], arrays["H"], "H_t = Σ x_τ x_{τ-1}ᵀ (V × V)")
    _show(axes[1], arrays["H_compressed"], "H'_t = P_out h_t (D × N)")
    _show(axes[2], arrays["H_decoded"],
          f"H''_t = Eᵀ H'_t Ẽ (cosine {scores['state_cosine']:.2f})")
    fig.suptitle(title, fontsize=10)
    paths.append(out / "state.png")
    fig.savefig(paths[-1], bbox_inches="tight")
    return paths
