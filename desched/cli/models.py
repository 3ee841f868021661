"""Commands of the duration model: train, predict, models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from desched.errors import DeschedError

if TYPE_CHECKING:
    import polars as pl

DEFAULT_REGISTRY = "models/duration"
REGISTRY_OPTION = click.option(
    "--registry",
    type=click.Path(path_type=Path),
    default=DEFAULT_REGISTRY,
    show_default=True,
    help="Model registry folder.",
)


@click.command()
@click.option("--warehouse", "db", type=click.Path(path_type=Path),
              help="DuckDB warehouse of ingested logs (its completions table).")
@click.option(
    "--trace",
    type=click.Path(path_type=Path),
    help="Trace Parquet file, or an SWF log (.swf, .swf.gz).",
)
@REGISTRY_OPTION
@click.option(
    "--max-rounds",
    type=click.IntRange(1),
    default=400,
    show_default=True,
    help="Most boosting rounds per model (early stopping on the valid slice).",
)
@click.option("--seed", type=int, default=0, show_default=True)
def train(db: Path | None, trace: Path | None, registry: Path, max_rounds: int, seed: int) -> None:
    """Train the duration model and offer it to the registry.

    With --trace, one model in REGISTRY. With --warehouse, one model per workload of the warehouse
    (the folder of its log files) in REGISTRY/<workload>: unrelated workloads are never fitted
    together; one too small to train is skipped and said so on stderr. The new version becomes
    the champion only if its held-out MAE beats the constant median prediction's and the
    champion's on the same rows; otherwise it is kept, marked rejected, with the reason.
    """
    from desched.cli.grammar import writable_folder
    from desched.models.promotion import register
    from desched.models.training import (
        TrainSettings,
        load_trace_or_swf,
        load_warehouse_workloads,
        workload_keys,
    )
    from desched.models.training import train as fit

    writable_folder(registry, "--registry")
    settings = TrainSettings(max_rounds=max_rounds, seed=seed)
    if trace is not None and db is None:
        jobs: list[tuple[Path, pl.DataFrame, str, str | None]] = [
            (registry, load_trace_or_swf(trace), str(trace), None)]
    elif db is not None and trace is None:
        workloads = load_warehouse_workloads(db)
        if not workloads:
            raise DeschedError(f"{db}: table 'completions' has no successful completion")
        keys = workload_keys(workloads)
        jobs = [(registry / keys[folder], frame, f"{db}:{folder}", keys[folder])
                for folder, frame in workloads.items()]
    else:
        raise DeschedError("give exactly one of --warehouse FILE.duckdb or --trace TRACE.parquet")
    from desched.cli.progress import bar

    fits = len(settings.objectives) + len(settings.quantiles)
    cards, skipped = [], []
    with bar(len(jobs) * fits, "train", "model") as shown:
        for folder, frame, source, key in jobs:
            try:
                result = fit(frame, settings, source=source, progress=lambda _: shown.update(1))
            except DeschedError as exc:  # a workload too small: the others still train
                if key is None:
                    raise
                skipped.append(f"{key}: skipped ({exc})")
                shown.update(fits)
                continue
            cards.append((key, register(folder, result)))
    for line in skipped:
        click.echo(line, err=True)
    if not cards:
        raise DeschedError(f"{db}: no workload could be trained ({len(skipped)} skipped)")
    for key, card in cards:
        m = card.metrics
        click.echo(f"{key + ': ' if key else ''}{card.version} {card.verdict}: {card.reason}")
        click.echo(
            f"  model ({card.objective}): MAE {m.mae_s:.3f} s, MdAPE {m.mdape_pct:.1f} %, "
            f"Spearman {_fmt(m.spearman)}"
        )
        for name, b in card.baselines.items():
            click.echo(
                f"  {name}: MAE {b.mae_s:.3f} s, MdAPE {b.mdape_pct:.1f} %, "
                f"Spearman {_fmt(b.spearman)}"
            )


@click.command()
@REGISTRY_OPTION
@click.option(
    "--trace", type=click.Path(path_type=Path), required=True,
    help="Input trace Parquet, or an SWF log (.swf, .swf.gz), imported as import-swf does.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Output trace Parquet (the input plus the predictions; may equal a Parquet --trace).",
)
def predict(registry: Path, trace: Path, out: Path) -> None:
    """Add predicted_s (the champion's predicted duration, seconds) to every task of a trace,
    and predicted_p50_s / predicted_p90_s from the quantile models it was trained with (the
    Boost policies' labels, as `desched judge` gives them)."""
    import numpy as np
    import polars as pl

    from desched.cli.grammar import existing_folder
    from desched.models.duration import Predictor
    from desched.swf import is_swf, read_trace_or_swf
    from desched.trace import MIN_PREDICTION_S, QUANTILE_COLUMNS, write_trace

    if is_swf(trace) and out.resolve() == trace.resolve():
        raise click.UsageError(f"--out {out}: the SWF log itself; name a Parquet file")
    from desched.cli.grammar import trace_out

    trace_out(out)
    # refuse a bad or empty trace before loading the model; the predictions it may hold are
    # replaced, whatever their values
    frame = read_trace_or_swf(trace, replacing=("predicted_s", *QUANTILE_COLUMNS))
    predictor = Predictor.load(existing_folder(registry, "--registry"), quantiles=True)
    absent = [c for c in predictor.spec.size_features if c not in frame.columns]
    if absent:  # predicted as missing values: said, not silently
        click.echo(f"note: {trace} lacks the model's size feature(s) {', '.join(absent)}; "
                   "its tasks are predicted without them", err=True)
    known = set(predictor.spec.code_of()["tenant"])
    if known and not frame["tenant"].is_in(list(known)).any():
        click.echo(f"note: no tenant of {trace} was in {predictor.version}'s training data; "
                   "its tasks are predicted without a tenant", err=True)
    x = predictor.features_of(frame)
    # A duration is positive: guard the schema against a model that extrapolates below zero.
    columns = {"predicted_s": predictor.predict_batch(x)}
    for key, values in predictor.predict_quantiles(x).items():
        columns[f"predicted_{key}_s"] = values
    frame = frame.with_columns(
        pl.Series(name, np.maximum(values, MIN_PREDICTION_S), pl.Float64)
        for name, values in columns.items()
    )
    write_trace(frame, out)
    click.echo(f"{out}: {frame.height} predictions ({', '.join(columns)}) "
               f"by {predictor.version}")


@click.command()
@REGISTRY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the listing as JSON.")
def models(registry: Path, as_json: bool) -> None:
    """List the registry's versions (duration or memory models), the champion, and their
    held-out error beside the best baseline's."""
    from desched.cli.grammar import existing_folder
    from desched.models.registry import Registry

    rows = Registry(existing_folder(registry, "--registry")).listing()
    if as_json:
        click.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    if not rows:
        click.echo(f"{registry}: no model versions (an empty registry)")
        return
    from desched.cli.output import echo_markdown
    from desched.tables import markdown_table

    body = []
    for r in rows:
        if r.mae is None:
            body.append([r.version, "", r.verdict, "", "", "", "", ""])
            continue
        body.append([
            r.version, "yes" if r.champion else "", r.verdict, r.objective or "",
            f"{r.mae:.3f} {r.unit or ''}".strip(),
            "n/a" if r.mdape_pct is None else f"{r.mdape_pct:.1f}", _fmt(r.spearman),
            f"{r.best_baseline} ({_fmt(r.best_baseline_mae)} {r.unit})",
        ])
    echo_markdown(markdown_table(
        ["version", "champion", "verdict", "objective", "MAE", "MdAPE %", "Spearman",
         "best baseline (MAE)"], body, "lllllrrl"))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
