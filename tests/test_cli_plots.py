"""The report's plots read at a glance: no text on the Pareto panels, every policy and the
front named in one legend, labelled ticks on every log axis that never overlap, and the
learning curve shows the score of the weights actually shipped."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from desched.bench.report.plots import pareto_figure, plot_pareto
from desched.bench.report.records import ParetoPoint
from desched.bench.weights import CurvePoint

POLICIES = ["fifo", "round-robin", "vtc", "ifs-memoryless", "ifs-memoryless (optuna)",
            "ifs-memoryless (rl)", "ifs-counter", "fair-sjf", "hrrn-predicted",
            "sjf-predicted", "ifs-predicted", "sjf-oracle"]
RANGES = {"steady": (40, 60), "flood": (22.6, 22.95), "lanl": (8_000, 52_000),
          "atlas": (100_000, 1_200_000)}


@pytest.fixture
def points() -> list[ParetoPoint]:
    rng = random.Random(1)
    out = []
    for w, (lo, hi) in RANGES.items():
        for i, p in enumerate(POLICIES):
            out.append(ParetoPoint(
                workload=w, policy=p, mean_response_s=rng.uniform(lo, hi),
                jain_slowdown=rng.uniform(0.996, 0.9995) if w == "flood" else rng.uniform(0.3, 1),
                max_service_lag_s=0.0 if w == "flood" else rng.choice([0.0, rng.uniform(1e2, 1e6)]),
                clairvoyant=p == "sjf-oracle", pareto_jain=i % 4 == 0, pareto_lag=i % 3 == 0))
    return out


def _overlaps(boxes: list) -> list[tuple[int, int]]:
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2)
            if a.overlaps(b)]


def test_the_pareto_plot_names_every_policy_in_a_legend_and_writes_no_text_on_panels(points):
    import matplotlib.pyplot as plt

    fig = pareto_figure(points)
    try:
        assert all(not ax.texts for ax in fig.axes)  # no per-point labels to collide
        [legend] = fig.legends
        names = [t.get_text() for t in legend.get_texts()]
        assert names[:len(POLICIES)] == POLICIES
        assert any("Pareto front" in n for n in names)
    finally:
        plt.close(fig)


def test_no_tick_labels_overlap_and_every_log_axis_has_labelled_ticks(points):
    import matplotlib.pyplot as plt

    fig = pareto_figure(points)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                lo, hi = sorted(axis.get_view_interval())
                labels = [t for t in axis.get_ticklabels()
                          if t.get_text() and lo <= t.get_position()[axis is ax.yaxis] <= hi]
                assert len(labels) >= 2, (ax.get_title(), axis.axis_name)
                assert _overlaps([t.get_window_extent(renderer) for t in labels]) == []
                if axis.get_scale() == "log":
                    assert len(labels) >= 2
    finally:
        plt.close(fig)


def test_plot_pareto_writes_a_png(points, tmp_path: Path):
    out = plot_pareto(points, tmp_path / "p.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_the_learning_curve_shows_the_score_of_the_weights_shipped():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from desched.bench.curves import draw_curve

    values = [1.2, 1.1, 1.05, 1.0, 0.94, 1.3, 1.1]
    curve = [CurvePoint(step=i, value=v, best=min(values[: i + 1]))
             for i, v in enumerate(values)]
    fig, ax = plt.subplots()
    try:
        draw_curve(ax, curve, "iteration", shipped=1.041)
        labels = [line.get_label() for line in ax.get_lines()]
        assert "weights shipped: J = 1.041" in labels
        shipped = next(line for line in ax.get_lines()
                       if line.get_label() == "weights shipped: J = 1.041")
        assert list(shipped.get_ydata()) == [1.041, 1.041]
        lo, hi = ax.get_ylim()
        assert lo < 1.041 < hi
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "weights shipped: J = 1.041" in legend and "best so far" in legend
    finally:
        plt.close(fig)


@pytest.mark.parametrize("workloads", [1, 2, 4])
def test_the_pareto_legend_fits_inside_the_figure(points, workloads):
    import matplotlib.pyplot as plt

    keep = list(RANGES)[:workloads]
    fig = pareto_figure([p for p in points if p.workload in keep])
    try:
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
        width, height = fig.canvas.get_width_height()
        assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height
        for ax in fig.axes:  # and below every panel, not over one
            assert not ax.get_window_extent().overlaps(box)
    finally:
        plt.close(fig)
