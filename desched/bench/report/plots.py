"""The report's plots, from ``report.json`` (``Report``) and the demo's runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from desched.bench.report.inputs import HeldoutRuns
from desched.bench.report.numbers import pct
from desched.bench.report.records import ParetoPoint, Q1Workload, Q2Learner, Q3Section
from desched.runs import read_summary


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _gap(x: float | None) -> str:
    return "no gap" if x is None else f"{x:,.1f} %"


def plot_q1(dirs: dict[str, str], q1: Q1Workload, baseline: str, title: str, out: Path) -> Path:
    """Per policy: mean wait per time bin (top) and share of service started per bin (middle)
    of the largest tenants (by work under ``baseline``) and the rest; bottom: windowed
    Jain's index and service lag."""
    import polars as pl

    plt = _plt()
    frames = {p: pl.read_parquet(Path(d) / "tasks.parquet",
                                 columns=["tenant", "submit_s", "start_s", "duration_s",
                                          "wait_s"]) for p, d in dirs.items()}
    base = frames[baseline]
    work = base.group_by("tenant").agg(pl.col("duration_s").sum()).sort(
        ["duration_s", "tenant"], descending=[True, False])
    top = work["tenant"].head(3).to_list()
    t_max = float(base["submit_s"].max())  # type: ignore[arg-type]
    bin_s = max(t_max / 30, 1e-9)
    hours = t_max / 3600 > 72
    unit, scale = ("day", 86400.0) if hours else ("h", 3600.0)
    fig, axes = plt.subplots(3, len(frames), figsize=(4.2 * len(frames), 8.2), squeeze=False)
    colors = {who: f"C{i}" for i, who in enumerate([*top, "others"])}
    for col, (policy, f) in enumerate(frames.items()):
        f = f.with_columns(
            pl.when(pl.col("tenant").is_in(top)).then(pl.col("tenant"))
            .otherwise(pl.lit("others")).alias("who"))
        waits = f.with_columns(((pl.col("submit_s") / bin_s).floor() * bin_s / scale)
                               .alias("x")).group_by("who", "x").agg(
            pl.col("wait_s").mean()).sort("x")
        ax = axes[0, col]
        for who in [*top, "others"]:
            part = waits.filter(pl.col("who") == who)
            if part.height:
                ax.plot(part["x"], part["wait_s"], ".-", ms=3, lw=1, color=colors[who],
                        label=who)
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_title(policy, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        if col == 0:
            ax.set_ylabel("mean wait (s)")
        served = f.with_columns(((pl.col("start_s") / bin_s).floor() * bin_s / scale)
                                .alias("x")).group_by("x", "who").agg(
            pl.col("duration_s").sum()).sort("x")
        xs = sorted(set(served["x"].to_list()))
        total = {x: 0.0 for x in xs}
        for row in served.iter_rows(named=True):
            total[row["x"]] += row["duration_s"]
        bottom = np.zeros(len(xs))
        ax = axes[1, col]
        for who in [*top, "others"]:
            got = dict(served.filter(pl.col("who") == who).select("x", "duration_s").iter_rows())
            share = np.array([got.get(x, 0.0) / total[x] if total[x] else 0 for x in xs])
            ax.bar(xs, share, bottom=bottom, width=bin_s / scale, color=colors[who],
                   label=who, align="edge")
            bottom += share
        ax.set_ylim(0, 1)
        if col == 0:
            ax.set_ylabel("share of service started")
        ax.set_xlabel(f"time ({unit})")
    axes[0, 0].legend(fontsize=7, ncol=2)
    ax_j, ax_l = axes[2, 0], axes[2, 1] if len(frames) > 1 else axes[2, 0]
    for policy, d in dirs.items():
        ws = read_summary(d).windows
        x = [w.start_s / scale for w in ws]
        ax_j.plot(x, [w.jain_slowdown for w in ws], ".-", label=policy)
        ax_l.plot(x, [w.service_lag_s for w in ws], ".-", label=policy)
    ax_j.set_ylabel("windowed Jain's index")
    ax_l.set_ylabel("service lag per window (s)")
    for ax in (ax_j, ax_l):
        ax.set_xlabel(f"window start ({unit})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for col in range(2, len(frames)):
        axes[2, col].axis("off")
    if len(frames) > 2:
        gap = q1.gap_closed_pct
        text = (f"gap closed (max lag): {_gap(gap.max_service_lag)}\n"
                f"gap closed (small tenants' wait): {_gap(gap.small_tenants_mean_wait)}\n"
                f"mean response vs {baseline}: "
                f"{pct(q1.cost_pct.mean_response_vs_memoryless)}")
        axes[2, 2].text(0.0, 0.5, text, fontsize=9, va="center")
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _thousands(minor: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    def label(v: float, _: int) -> str:
        if minor and f"{v:.0e}"[0] not in "25":
            return ""
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    return FuncFormatter(label)


def plot_learning_curves(learners: dict[str, Q2Learner], reference: str, out: Path) -> Path:
    """One panel per learner of Q2: its learning curve (``desched.bench.curves``)."""
    from desched.bench.curves import draw_curve, step_label
    from desched.bench.weights import CurvePoint

    plt = _plt()
    fig, axes = plt.subplots(1, len(learners), figsize=(5.5 * len(learners), 3.2), squeeze=False)
    for ax, (name, le) in zip(axes[0], learners.items()):
        curve = [CurvePoint(step=p.step, value=p.value, best=p.best) for p in le.curve]
        draw_curve(ax, curve, step_label(name), legend_fontsize=7, reference=reference)
        ax.set_title(f"{name}", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_q3_tenants(q3: Q3Section, sims: dict[str, HeldoutRuns], out: Path) -> Path:
    """Per Q3 workload: each tenant's mean slowdown under a predicted-duration policy over
    that under the baseline, against the tenant's mean task duration."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plt = _plt()
    workloads = list(q3.workloads)
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.6 * len(workloads), 3.6),
                             squeeze=False)
    for ax, w in zip(axes[0], workloads):
        d = sims[w].tenant_durations
        slowdown = {label: {t: m.mean_slowdown for t, m in run.summary.tenants().items()}
                    for label, run in sims[w].runs.items()}
        base = slowdown[q3.baseline]
        for i, p in enumerate(q3.focus):
            if p not in slowdown:
                continue
            ts = [t for t in base if t in slowdown[p] and base[t] > 0]
            ax.scatter([d[t] for t in ts], [slowdown[p][t] / base[t] for t in ts], s=10,
                       alpha=0.7, color=f"C{i}", label=p)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tenant's mean task duration (s)")
        ax.set_ylabel(f"mean slowdown / {q3.baseline}'s")
        ax.set_title(w, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_pareto(points: Sequence[ParetoPoint], out: Path) -> Path:
    """Per workload: mean response time against Jain's index (top) and max service lag
    (bottom), the front in red, clairvoyant bounds as stars."""
    plt = _plt()
    workloads = list(dict.fromkeys(p.workload for p in points))
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.6 * len(workloads), 7.0),
                             squeeze=False)
    for col, w in enumerate(workloads):
        pts = [p for p in points if p.workload == w]
        for row, (key, flag, label) in enumerate(
                [("jain_slowdown", "pareto_jain", "Jain's index (higher is fairer)"),
                 ("max_service_lag_s", "pareto_lag", "max service lag s (lower is fairer)")]):
            ax = axes[row, col]
            for p in pts:
                on = getattr(p, flag)
                x, y = getattr(p, key), p.mean_response_s
                if x is None or y is None:
                    continue
                ax.scatter(x, y, s=40 if on else 18, zorder=3,
                           marker="*" if p.clairvoyant else "o",
                           color="C3" if on else "C0" if p.clairvoyant else "0.5")
                ax.annotate(p.policy.replace(" weights)", ")"), (x, y),
                            fontsize=6, xytext=(3, 2), textcoords="offset points")
            front = sorted((getattr(p, key), p.mean_response_s) for p in pts
                           if getattr(p, flag))
            if front:
                ax.plot(*zip(*front), "-", color="C3", lw=1)
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("mean response time (s)")
            if row == 0:
                ax.set_title(w, fontsize=10, loc="left")
            if key == "max_service_lag_s":
                ax.set_xscale("symlog", linthresh=1.0)
                ax.set_xlim(left=0)
            ax.yaxis.set_major_formatter(_thousands())
            ax.yaxis.set_minor_formatter(_thousands(minor=True))
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
