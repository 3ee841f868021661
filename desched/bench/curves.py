"""Learning curves as plots: the tuning's own PNG and the report's Q2 panels."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from desched.bench.weights import CurvePoint


def step_label(learner: str) -> str:
    """What one step of ``learner``'s curve is: an Optuna trial or an RL iteration."""
    return "trial" if learner == "optuna" else "iteration"


def draw_curve(ax: Any, curve: Sequence[CurvePoint], xlabel: str,
               legend_fontsize: float = 8, reference: str = "today's 0.1/0.9",
               shipped: float | None = None) -> None:
    """A learning curve on a matplotlib axis: ``J`` per step (a step above
    ``max(1.25, best + 0.1)`` is drawn at the top edge and counted in the legend), best so
    far, the reference's ``J = 1`` and, given ``shipped``, the training ``J`` of the weights
    actually saved (an RL agent's static weights are not its best sampled step)."""
    steps = [p.step for p in curve]
    values = np.array([p.value for p in curve])
    top = min(float(values.max()), max(1.25, float(values.min()) + 0.1))
    if shipped is not None:
        top = max(top, shipped)
    clipped = int((values > top).sum())
    label = "objective of the step" + (f" ({clipped} above the axis)" if clipped else "")
    ax.plot(steps, np.minimum(values, top), ".", color="0.5", label=label)
    low = min(float(values.min()), 1.0, shipped if shipped is not None else 1.0)
    ax.set_ylim(low - 0.01, top + 0.01)
    ax.plot(steps, [p.best for p in curve], "-", color="C0", label="best so far")
    ax.axhline(1.0, color="C3", lw=1, ls="--", label=reference)
    if shipped is not None:
        ax.axhline(shipped, color="C2", lw=1.6, label=f"weights shipped: J = {shipped:.3f}")
        ax.plot([steps[-1]], [shipped], "o", color="C2", ms=6)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("J on training traces")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_fontsize)


def plot_curve(curve: Sequence[CurvePoint], title: str, xlabel: str, out: str | Path,
               reference: str = "today's 0.1/0.9", shipped: float | None = None) -> Path:
    """The learning curve (``draw_curve``) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    draw_curve(ax, curve, xlabel, reference=reference, shipped=shipped)
    ax.set_title(title, fontsize=10, loc="left")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
