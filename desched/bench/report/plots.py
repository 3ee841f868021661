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

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "d")
"""One marker per policy, cycled; a colour and a marker tell two policies apart."""


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
            ax.legend(fontsize=7, ncol=2, title="tenant", title_fontsize=7)
        ax.set_xlabel(f"time ({unit})")
    axes[0, 0].legend(fontsize=7, ncol=2, title="tenant", title_fontsize=7)
    ax_j, ax_l = axes[2, 0], axes[2, 1] if len(frames) > 1 else axes[2, 0]
    # policies get colours the tenants above do not use, so no colour means two things
    qualified = 0
    for i, (policy, d) in enumerate(dirs.items()):
        ws = read_summary(d).windows
        qualified += sum(w.backlogged_tenants >= 2 for w in ws)
        x = [w.start_s / scale for w in ws]
        style = {"color": f"C{len(colors) + i}", "marker": MARKERS[i % len(MARKERS)], "ms": 4}
        ax_j.plot(x, [w.jain_slowdown for w in ws], "-", label=policy, **style)
        ax_l.plot(x, [w.service_lag_s for w in ws], "-", label=policy, **style)
    ax_j.set_ylabel("windowed Jain's index")
    ax_l.set_ylabel("service lag per window (s)")
    if not qualified:  # a flat zero says nothing unless the reader knows why
        ax_l.set_title("no window had two tenants backlogged throughout", fontsize=8,
                       loc="left")
    ax_l.yaxis.set_major_formatter(_thousands())
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


def compact(v: float) -> str:
    """A tick label that stays short: ``1.6M``, ``240k``, ``4,000``, ``0.05``."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:,.0f}" if a >= 100 else f"{v:.3g}"


def _thousands(minor: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    def label(v: float, _: int) -> str:
        if minor and f"{v:.0e}"[0] not in "25":
            return ""
        return compact(v)

    return FuncFormatter(label)


def plot_learning_curves(learners: dict[str, Q2Learner], reference: str, out: Path) -> Path:
    """One panel per learner of Q2: its learning curve (``desched.bench.curves``)."""
    from desched.bench.curves import draw_curve, step_label
    from desched.bench.weights import CurvePoint

    plt = _plt()
    fig, axes = plt.subplots(1, len(learners), figsize=(5.5 * len(learners), 3.2), squeeze=False)
    for ax, (name, le) in zip(axes[0], learners.items()):
        curve = [CurvePoint(step=p.step, value=p.value, best=p.best) for p in le.curve]
        draw_curve(ax, curve, step_label(name), legend_fontsize=7, reference=reference,
                   shipped=le.train_objective)
        ax.set_title(f"{name}", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


TenantPoints = dict[str, dict[str, list[tuple[float, float]]]]
"""Workload -> policy -> (tenant's mean task duration s, mean slowdown over the baseline's)."""


def q3_tenant_points(q3: Q3Section, sims: dict[str, HeldoutRuns]) -> TenantPoints:
    """Per Q3 workload and predicted-duration policy: each tenant's mean task duration and
    its mean slowdown over that under the baseline (tenants with a positive baseline)."""
    out: TenantPoints = {}
    for w in q3.workloads:
        d = sims[w].tenant_durations
        slowdown = {label: {t: m.mean_slowdown for t, m in run.summary.tenants().items()}
                    for label, run in sims[w].runs.items()}
        base = slowdown[q3.baseline]
        out[w] = {p: [(d[t], slowdown[p][t] / base[t]) for t in base
                      if t in slowdown[p] and base[t] > 0]
                  for p in q3.focus if p in slowdown}
    return out


def q3_tenants_figure(points: TenantPoints, baseline: str) -> Any:
    """One panel per workload: each tenant's mean slowdown under a predicted-duration policy
    over that under ``baseline``, against the tenant's mean task duration; one legend below
    the panels (every policy and the line of "as under the baseline")."""
    from matplotlib.lines import Line2D

    plt = _plt()
    workloads = list(points)
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.8 * len(workloads), 3.9),
                             squeeze=False)
    policies = list(dict.fromkeys(p for per in points.values() for p in per))
    for ax, w in zip(axes[0], workloads):
        xs: list[float] = []
        ys: list[float] = [1.0]
        for i, p in enumerate(policies):
            pts = points[w].get(p, [])
            xs += [x for x, _ in pts]
            ys += [y for _, y in pts]
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=10, alpha=0.7,
                       color=f"C{i}", marker=MARKERS[i % len(MARKERS)])
        ax.axhline(1.0, color="k", lw=0.8)
        _value_axis(ax, xs, "x")
        _value_axis(ax, ys, "y")
        ax.set_xlabel("tenant's mean task duration (s)")
        ax.set_ylabel(f"mean slowdown / {baseline}'s")
        ax.set_title(w, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=6,
                      color=f"C{i}", label=p) for i, p in enumerate(policies)]
    handles.append(Line2D([], [], color="k", lw=0.8, label=f"as under {baseline}"))
    ncol = max(1, min(len(handles), int(fig.get_figwidth() / 2.2)))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows_of_legend = -(-len(handles) // ncol)
    fig.tight_layout(rect=(0, min(0.4, 0.06 * rows_of_legend + 0.02), 1, 1))
    return fig


def plot_q3_tenants(q3: Q3Section, sims: dict[str, HeldoutRuns], out: Path) -> Path:
    """The per-tenant plot of Q3 (``q3_tenants_figure``) as a PNG."""
    plt = _plt()
    fig = q3_tenants_figure(q3_tenant_points(q3, sims), q3.baseline)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _policy_styles(policies: Sequence[str], clairvoyant: set[str]) -> dict[str, dict[str, Any]]:
    """One colour and marker per policy, the same in every panel (a clairvoyant bound is a
    star)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if len(policies) > 10 else "tab10"]
    return {p: {"color": cmap(i % cmap.N),
                "marker": "*" if p in clairvoyant else MARKERS[i % len(MARKERS)]}
            for i, p in enumerate(policies)}


def _value_axis(ax: Any, values: Sequence[float], axis: str) -> None:
    """Log scale when ``values`` span more than 5x, else linear, labelled in short plain
    numbers either way. A log axis has ticks at 1, 2 and 5 per decade over at most two
    decades, 1 and 3 up to four, else one per decade, so labels never crowd."""
    import math

    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter

    positive = [v for v in values if v > 0]
    which = ax.yaxis if axis == "y" else ax.xaxis
    if positive and max(positive) / min(positive) > 5:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        decades = math.log10(max(positive) / min(positive))
        subs = (1.0, 2.0, 5.0) if decades <= 2 else (1.0, 3.0) if decades <= 4 else (1.0,)
        which.set_major_locator(LogLocator(base=10, subs=subs))
        which.set_minor_formatter(NullFormatter())
    else:
        which.set_major_locator(MaxNLocator(5))
    which.set_major_formatter(_thousands())


def _lag_axis(ax: Any, lags: Sequence[float]) -> None:
    """Max service lag: a linear axis from 0 (a lag of 0 is the fair end, and a log scale
    would hide it), plain-number ticks."""
    from matplotlib.ticker import MaxNLocator

    top = max(lags, default=0.0)
    ax.set_xlim(-0.04 * top if top > 0 else -0.5, top * 1.06 if top > 0 else 10.0)
    ax.xaxis.set_major_locator(MaxNLocator(4))
    ax.xaxis.set_major_formatter(_thousands())


def plot_pareto(points: Sequence[ParetoPoint], out: Path) -> Path:
    """The Pareto plot (``pareto_figure``) as a PNG."""
    plt = _plt()
    fig = pareto_figure(points)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def pareto_figure(points: Sequence[ParetoPoint]) -> Any:
    """Per workload: mean response time against Jain's index (top) and max service lag
    (bottom). Each policy has one colour and marker in every panel, named in the legend
    below; points on the Pareto front have a black edge and are joined by the dashed line;
    clairvoyant bounds are stars. No text on the panels, so nothing overlaps."""
    from matplotlib.lines import Line2D

    plt = _plt()
    workloads = list(dict.fromkeys(p.workload for p in points))
    policies = list(dict.fromkeys(p.policy for p in points))
    styles = _policy_styles(policies, {p.policy for p in points if p.clairvoyant})
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.3 * len(workloads), 7.6),
                             squeeze=False)
    for col, w in enumerate(workloads):
        pts = [p for p in points if p.workload == w]
        for row, (key, flag, label) in enumerate(
                [("jain_slowdown", "pareto_jain", "Jain's index (higher is fairer)"),
                 ("max_service_lag_s", "pareto_lag", "max service lag s (lower is fairer)")]):
            ax = axes[row, col]
            shown = [(p, getattr(p, key), p.mean_response_s) for p in pts
                     if getattr(p, key) is not None and p.mean_response_s is not None]
            for p, x, y in shown:
                on = getattr(p, flag)
                ax.scatter(x, y, s=(150 if p.clairvoyant else 60) if on else
                           (110 if p.clairvoyant else 36), zorder=3, alpha=0.9,
                           edgecolors="black" if on else "none", linewidths=1.3,
                           **styles[p.policy])
            front = sorted((x, y) for p, x, y in shown if getattr(p, flag))
            if front:
                ax.plot(*zip(*front), "--", color="black", lw=0.9, zorder=2)
            _value_axis(ax, [y for _, _, y in shown], "y")
            if key == "max_service_lag_s":
                _lag_axis(ax, [x for _, x, _ in shown])
            else:
                from matplotlib.ticker import MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.set_xlabel(label)
            ax.set_ylabel("mean response time (s)")
            if row == 0:
                ax.set_title(w, fontsize=10, loc="left")
            ax.grid(alpha=0.3, which="major")
    handles = [Line2D([], [], linestyle="none", markersize=8, label=p, **styles[p])
               for p in policies]
    handles.append(Line2D([], [], color="black", ls="--", marker="o", markerfacecolor="white",
                          markeredgecolor="black", label="on the Pareto front (black edge)"))
    ncol = max(1, min(len(handles), int(fig.get_figwidth() / 2.6)))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows_of_legend = -(-len(handles) // ncol)
    fig.tight_layout(rect=(0, min(0.4, 0.036 * rows_of_legend + 0.01), 1, 1))
    return fig
