"""Commands of the scheduling core: scenario, import-swf, simulate, compare, policies."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from desched.cli import exit_without_teardown
from desched.cli.grammar import (
    POLICY_SPEC_HELP,
    fresh_folder,
    policy_spec,
    split_specs,
    written_over,
)
from desched.cli.output import echo_markdown
from desched.errors import DeschedError
from desched.records import json_text

if TYPE_CHECKING:
    import polars as pl

    from desched.runs import RunSummary
    from desched.simulator import Engine


TRACE_OPTION = click.option("--trace", "trace_path", required=True,
                            type=click.Path(path_type=Path),
                            help="Trace Parquet file, or an SWF log (.swf, .swf.gz), imported "
                                 "on the fly as `desched import-swf` would.")
FORCE_OPTION = click.option("--force", is_flag=True,
                            help="Write into --out even when it already holds files "
                                 "(they are replaced).")
WORKERS_OPTION = click.option("--workers", required=True, type=click.IntRange(min=1),
                              help="Number of workers.")
REBASE_OPTION = click.option(
    "--rebase-clock", "rebase_clock", is_flag=True,
    help="Simulate the trace shifted to start at 0 and write the files on its own clock: on a "
         "late clock (epoch seconds, where a double's spacing is 2.4e-7 s) short durations "
         "keep their precision. Without it the run is on the trace's clock, as DESIGN.md's "
         "semantics and the live service have it.")


def _finite_window(ctx: click.Context, param: click.Parameter, value: float | None
                   ) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds")
    return value


WINDOW_OPTION = click.option("--window-s", type=click.FloatRange(min=0, min_open=True),
                             default=None, callback=_finite_window,
                             help="Window length for drift metrics (default: submission span / "
                                  "20; never under the run's span / 1000, so at most 1,000 "
                                  "windows).")


def _progress(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", disable=None, leave=False, mininterval=0.5)


def keep_freed_memory() -> None:
    """Tune glibc's allocator for one short process that allocates and frees arrays of a few
    MB many times (``desched simulate`` on a large trace): blocks up to 32 MB come from the
    heap rather than fresh mappings, and freed heap memory is kept, not trimmed, so that it is
    neither unmapped (with a TLB shootdown on every core polars' threads ran on) nor faulted
    in again. The process's memory then falls only at exit. A no-op off glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, (1 << 31) - 1)


COARSE_CLOCK = 1e-3
"""A run on the trace's own clock says so (``note_coarse_clock``) where some task is shorter
than 1,000 times the clock's spacing at the trace's last submission: its end time is then off
by more than 0.05 % of its duration (a microsecond task at 1.7e9 s, epoch seconds, by up to
12 %)."""


def note_coarse_clock(trace: pl.DataFrame, path: Path) -> None:
    """One note on stderr where the trace's clock is too coarse for its shortest tasks
    (``COARSE_CLOCK``), naming ``--rebase-clock``."""
    import numpy as np

    if trace.height == 0:
        return
    last = float(trace["submit_s"].max())  # type: ignore[arg-type]
    spacing = float(np.spacing(last))
    short = int((trace["duration_s"] * COARSE_CLOCK < spacing).sum())
    if short:
        print(f"note: {path}: {short} task(s) shorter than 1,000 times the clock's spacing "
              f"({spacing:.2g} s at {last:.6g} s); their end times lose precision (give "
              "--rebase-clock to simulate the trace shifted to start at 0)",
              file=sys.stderr, flush=True)


def one_blas_thread() -> None:
    """Leave out OpenBLAS's thread pool, which numpy starts on import: ``desched simulate``
    multiplies no matrices, and the pool's idle threads spin for about 0.1 s of CPU after
    start-up (a tenth of a 100k-task run's process). Set before numpy is imported, as
    ``configure_logging`` sets the libraries' logging; an explicit
    ``OPENBLAS_NUM_THREADS`` wins. A no-op where numpy is already loaded."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def run_policy(
    trace: pl.DataFrame,
    policy_name: str,
    params: dict[str, str],
    workers: int,
    out_dir: Path,
    seed: int,
    window_s: float | None,
    controls: Any = None,
    *,
    engine: Engine = "auto",
    decision_log: bool = True,
    rebase_clock: bool = False,
) -> RunSummary:
    """Simulate one policy over a validated trace and write its run folder; returns the
    summary. ``controls`` (``desched.controls.Controls``) and the trace's ``priority``
    column apply tenant controls. ``engine`` (``desched.simulator.simulate``): where the
    policy's compiled kernel runs, the trace goes to it as arrays, with no task table. The run
    is on the trace's own clock (DESIGN.md; the live service's), or with ``rebase_clock``
    on that clock shifted to start at 0, written back on the trace's clock (``write_run``'s
    ``origin``): short durations on a late clock keep their precision, and ties that the
    coarse clock made (or broke) may go the other way."""
    import polars as pl

    from desched import kernels
    from desched.controls import controlled, kernel_inputs
    from desched.policies import check_reads, get_policy, make_policy, parse_params
    from desched.runs import write_run
    from desched.simulator import simulate, simulate_arrays

    submitted = trace["submit_s"]
    origin = float(submitted.min()) if rebase_clock and trace.height else 0.0  # type: ignore[arg-type]
    if origin:
        trace = trace.with_columns(pl.col("submit_s") - origin)
    inputs = None
    if engine != "python" and kernels.available(policy_name):
        inputs = kernel_inputs(trace, controls)
    if inputs is not None:
        cls = get_policy(policy_name)
        parsed = parse_params(policy_name, params)
        check_reads(policy_name, "predicted_s" in trace.columns)  # validated: no NaN
        result = simulate_arrays(policy_name, parsed, cls.components, workers, inputs)
        components, params_used = cls.components, parsed.model_dump()
    else:
        tasks, gate = controlled(trace, controls)
        policy = make_policy(policy_name, tasks, params)
        with _progress(len(tasks), policy_name) as bar:
            done = [0]

            def tick(n: int) -> None:
                bar.update(n - done[0])
                done[0] = n

            result = simulate(tasks, policy, workers, progress=tick, gate=gate, engine=engine)
        components, params_used = policy.components, policy.params.model_dump()
    if controls is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "controls.json").write_text(json.dumps(
            {k: c.as_dict() for k, c in controls.tenants.items()}, indent=2, sort_keys=True))
    return write_run(
        out_dir,
        trace,
        result,
        components=components,
        params=params_used,
        seed=seed,
        window_s=window_s,
        decision_log=decision_log,
        origin=origin,
        submit_s=submitted,
        tenants=None if inputs is None else (inputs.tenant_names, inputs.tenant),
    )


@click.command()
@click.argument("name")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Trace Parquet file to write (required unless NAME is list).")
@click.option("--seed", default=0, show_default=True, help="Random seed of the generator.")
@click.option("--tasks", default=20_000, show_default=True, type=click.IntRange(min=1),
              help="Number of tasks.")
@click.option("--tenants", type=int, default=None,
              help="Number of tenants (default: the scenario's own).")
@click.option("--load", default=0.85, show_default=True,
              help="Offered load: arrival rate x mean duration / workers.")
@click.option("--workers", default=8, show_default=True,
              help="Worker count the offered load refers to.")
@click.option("--predicted-noise", type=float, default=None,
              help="Add predicted_s = duration_s x lognormal(0, SIGMA): a stand-in for a "
                   "model with a controlled error.")
def scenario(
    name: str, out: Path | None, seed: int, tasks: int, tenants: int | None, load: float, workers: int,
    predicted_noise: float | None,
) -> None:
    """Generate the synthetic workload NAME as a trace; `desched scenario list` lists them."""
    from desched.trace import write_trace
    from desched.workloads import SCENARIOS, generate

    if name == "list":
        for key, value in SCENARIOS.items():
            click.echo(f"{key:14s} {value.description}")
        return
    if name not in SCENARIOS:
        raise DeschedError(f"unknown scenario {name!r} (scenarios: {', '.join(SCENARIOS)}; "
                           "`desched scenario list` describes them)")
    if out is None:
        raise DeschedError(f"scenario {name}: give --out FILE.parquet, the trace to write")
    from desched.cli.grammar import trace_out

    trace_out(out)
    kwargs: dict[str, Any] = {"tasks": tasks, "load": load, "workers": workers, "seed": seed,
                              "predicted_noise": predicted_noise}
    if tenants is not None:
        kwargs["tenants"] = tenants
    frame = generate(name, **kwargs)
    write_trace(frame, out)
    click.echo(f"{out}: {frame.height} tasks, {frame['tenant'].n_unique()} tenants "
               f"(scenario {name}, seed {seed})")


def note_no_user_ids(frame: Any, log: Path) -> None:
    """A note on stderr where an SWF log's every kept job lacks a user id: one tenant."""
    if frame["tenant"].n_unique() == 1 and frame["tenant"][0] == "unknown":
        click.echo(f"note: {log}: no job has a user id (field 12 is -1 on every kept line): "
                   "the trace is one tenant, 'unknown', and every fairness figure over tenants "
                   "is trivial", err=True)


@click.command("import-swf")
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Trace Parquet file to write.")
@click.option("--rejected", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Parquet file to write the dropped jobs to: line, reason, raw text.")
def import_swf(log: Path, out: Path, rejected: Path | None) -> None:
    """Import a Standard Workload Format log (.swf or .swf.gz) as a trace.

    A user becomes a tenant, the executable (else the queue) the task type, requested
    processors and time become features, run time the duration. Jobs that cannot be used
    are dropped and counted by reason; --rejected keeps them with their reason.
    """
    from desched.cli.grammar import not_the_input, trace_out
    from desched.swf import import_swf as do_import
    from desched.trace import write_trace

    not_the_input(out, log)
    trace_out(out)
    if rejected is not None:
        not_the_input(rejected, log, "--rejected")
        if rejected.resolve() == out.resolve():
            raise DeschedError(f"--rejected {rejected}: is the --out file; write to another")
    frame, report = do_import(log)
    write_trace(frame, out)
    click.echo(f"{out}: {report.summary()}")
    note_no_user_ids(frame, log)
    if rejected is not None:
        rejected.parent.mkdir(parents=True, exist_ok=True)
        report.rejected.write_parquet(rejected)
        click.echo(f"{rejected}: {report.rejected.height} dropped jobs with their reasons")


@click.command()
@TRACE_OPTION
@click.option("--policy", required=True, metavar="SPEC", help=f"Policy: {POLICY_SPEC_HELP}.")
@WORKERS_OPTION
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder to write.")
@click.option("--seed", default=0, show_default=True, help="Seed recorded with the run.")
@WINDOW_OPTION
@FORCE_OPTION
@click.option("--tenants", "tenants_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Tenant controls (TOML, JSON or CSV: tenant, weight, cap, rate, burst); "
                   "a trace column 'priority' sets priority levels (README, tenant controls).")
@click.option("--engine", type=click.Choice(["auto", "kernel", "python"]), default="auto",
              show_default=True,
              help="auto: the policy's compiled kernel where it has one and no cap or "
                   "priority level applies, else the Python loop; kernel: insist on it; "
                   "python: the Python loop (the reference). summary.json names the engine.")
@click.option("--no-decision-log", "no_decision_log", is_flag=True,
              help="Leave out decision-log.parquet (tasks, decisions and summary stay).")
@REBASE_OPTION
def simulate(
    trace_path: Path, policy: str, workers: int, out: Path, seed: int, window_s: float | None,
    force: bool, tenants_file: Path | None, engine: Engine, no_decision_log: bool,
    rebase_clock: bool,
) -> None:
    """Simulate a policy over a trace; write tasks, decisions, decision log and summary.

    \b
    Example:
      desched simulate --trace T.parquet --policy 'ifs-memoryless?w_wait=0.8' \\
        --workers 8 --out data/runs/r1
    """
    one_blas_thread()  # before the imports below load numpy
    from desched.controls import Controls
    from desched.runs import RUN_FILES
    from desched.swf import is_swf, read_trace_or_swf

    keep_freed_memory()
    fresh_folder(out, force)
    written_over({"--trace": trace_path, "--tenants": tenants_file},
                 [out / name for name in RUN_FILES])
    controls = None if tenants_file is None else Controls.read(tenants_file)
    name, params = policy_spec(policy)
    trace = read_trace_or_swf(trace_path)
    if is_swf(trace_path):
        note_no_user_ids(trace, trace_path)
    if controls is not None:
        absent = sorted(set(controls.tenants) - set(trace["tenant"].unique().to_list()))
        if absent:
            named = ", ".join(repr(t) for t in absent[:5]) + (", ..." if len(absent) > 5 else "")
            print(f"note: {tenants_file}: {len(absent)} tenant(s) not in the trace, whose "
                  f"controls apply to nothing: {named}", file=sys.stderr, flush=True)
    if not rebase_clock:
        note_coarse_clock(trace, trace_path)
    summary = run_policy(trace, name, params, workers, out, seed, window_s, controls,
                         engine=engine, decision_log=not no_decision_log,
                         rebase_clock=rebase_clock)
    click.echo(
        f"{out}: {summary.tasks} tasks, mean wait {summary.mean_wait_s:.1f} s, "
        f"p99 response {summary.p99_response_s:.1f} s, Jain {summary.jain_slowdown:.3f}, "
        f"max service lag {summary.max_service_lag_s:.1f} s"
    )
    exit_without_teardown()  # the run folder is written and closed


TABLE_COLUMNS = (
    ("mean_wait_s", "mean wait s"),
    ("p99_wait_s", "p99 wait s"),
    ("mean_response_s", "mean resp s"),
    ("p99_response_s", "p99 resp s"),
    ("mean_bounded_slowdown", "mean bsld"),
    ("jain_slowdown", "Jain"),
    ("max_service_lag_s", "max lag s"),
    ("utilization", "util"),
)


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:,.0f}"


def format_table(summaries: dict[str, RunSummary], tenants: list[str]) -> str:
    """A markdown table of the headline metrics, then mean wait of the given tenants."""
    from desched.tables import table_lines

    numeric = "r" * len(TABLE_COLUMNS)
    lines = table_lines(
        ["policy", *(label for _, label in TABLE_COLUMNS)],
        [[name, *(_fmt(getattr(s, k)) for k, _ in TABLE_COLUMNS)]
         for name, s in summaries.items()],
        "l" + numeric,
    )
    if tenants:
        lines += ["", "mean wait (s) per tenant:", ""]
        lines += table_lines(
            ["tenant", *summaries],
            [[t, *(_fmt(s.tenants()[t].mean_wait_s) for s in summaries.values())]
             for t in tenants],
            "l" + "r" * len(summaries),
        )
    return "\n".join(lines)


def top_tenants(summary: RunSummary, n: int) -> list[str]:
    per = summary.tenants()
    return sorted(per, key=lambda t: (-per[t].tasks, t))[:n]


def plot_wait_over_time(run_dirs: dict[str, Path], tenants: list[str], out: Path) -> Path:
    """One panel per policy: mean wait per time bin of each named tenant and of the rest.
    Tenant names the font cannot draw (emoji, some scripts) are drawn as boxes, without
    matplotlib's warning per missing glyph; a long name is cut at 40 characters."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        return _plot_wait_over_time(run_dirs, tenants, out)


def _plot_wait_over_time(run_dirs: dict[str, Path], tenants: list[str], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import polars as pl

    frames = {p: pl.read_parquet(d / "tasks.parquet", columns=["tenant", "submit_s", "wait_s"])
              for p, d in run_dirs.items()}
    t_max = max(float(f["submit_s"].cast(pl.Float64).max() or 0.0)  # type: ignore[arg-type]
                for f in frames.values())
    bin_s = max(t_max / 40, 1e-9)
    fig, axes = plt.subplots(len(frames), 1, figsize=(9, 2.4 * len(frames)), sharex=True,
                             sharey=True, squeeze=False)
    for ax, (policy, frame) in zip(axes[:, 0], frames.items()):
        binned = frame.with_columns(
            pl.when(pl.col("tenant").is_in(tenants)).then(pl.col("tenant"))
            .otherwise(pl.lit("other tenants")).alias("who"),
            ((pl.col("submit_s") / bin_s).floor() * bin_s / 3600).alias("hour"),
        ).group_by("who", "hour").agg(pl.col("wait_s").mean()).sort("hour")
        for rank, who in enumerate([*tenants, "other tenants"]):
            part = binned.filter(pl.col("who") == who)
            if part.height:
                style = {"color": "black", "lw": 2.0} if rank == 0 else {"lw": 1.0}
                label = who if len(who) <= 40 else who[:39] + "…"
                ax.plot(part["hour"], part["wait_s"], label=label, marker=".", ms=4, **style)
        ax.set_title(policy, fontsize=10, loc="left")
        ax.set_ylabel("mean wait (s)")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("submission time (h)")
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


@click.command()
@TRACE_OPTION
@click.option("--policies", multiple=True, required=True, metavar="SPECS",
              help=f"Policies, comma-separated or repeated; each {POLICY_SPEC_HELP}, e.g. "
                   "'fifo,ifs-counter?half_life_s=600'.")
@WORKERS_OPTION
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for one run folder per policy, compare.json and the plot.")
@click.option("--seed", default=0, show_default=True, help="Seed recorded with the runs.")
@WINDOW_OPTION
@click.option("--tenants", "n_tenants", default=5, show_default=True, type=click.IntRange(min=0),
              help="Tenants shown by name in the table and plot (largest first).")
@FORCE_OPTION
@REBASE_OPTION
def compare(
    trace_path: Path, policies: tuple[str, ...], workers: int, out: Path,
    seed: int, window_s: float | None, n_tenants: int, force: bool, rebase_clock: bool,
) -> None:
    """Run several policies on one trace; print a table, write compare.json and a plot.

    Each policy's run folder is OUT/<its spec, with ? and & as _>. With --force the runs
    written replace their earlier files; the run folders of policies not in this run stay
    (compare.json names this run's).
    """
    import re

    from desched.policies import check_reads
    from desched.runs import RUN_FILES
    from desched.swf import read_trace_or_swf

    named = split_specs(policies)
    specs = list(dict.fromkeys(named))
    if not specs:
        raise DeschedError("--policies: no policy named")
    if len(specs) < len(named):
        twice = ", ".join(s for s in specs if named.count(s) > 1)
        print(f"note: --policies names {twice} more than once; each runs once",
              file=sys.stderr, flush=True)
    # refuse bad names, parameters and a used folder before running anything
    parsed = {spec: policy_spec(spec, "--policies") for spec in specs}
    fresh_folder(out, force)
    run_dirs: dict[str, Path] = {}
    for spec in specs:  # one folder each, even where two specs spell to one name
        base = name = re.sub(r"[^A-Za-z0-9._=+-]+", "_", spec)
        while any(name.lower() == d.name.lower() for d in run_dirs.values()):
            name = f"{base}-{sum(d.name.startswith(base) for d in run_dirs.values()) + 1}"
        run_dirs[spec] = out / name
    written_over({"--trace": trace_path},
                 [out / "compare.json", out / "wait-over-time.png",
                  *(folder / name for folder in run_dirs.values() for name in RUN_FILES)])
    trace = read_trace_or_swf(trace_path)
    for name, _ in parsed.values():  # and a policy the trace cannot feed, before any run
        check_reads(name, "predicted_s" in trace.columns)
    if not rebase_clock:
        note_coarse_clock(trace, trace_path)
    summaries: dict[str, RunSummary] = {}
    for spec, (name, params) in parsed.items():
        summaries[spec] = run_policy(trace, name, params, workers, run_dirs[spec], seed,
                                     window_s, rebase_clock=rebase_clock)
    tenants = top_tenants(next(iter(summaries.values())), n_tenants)
    table = format_table(summaries, tenants)
    plot = plot_wait_over_time(run_dirs, tenants, out / "wait-over-time.png")
    (out / "compare.json").write_text(json_text(
        {"trace": str(trace_path), "workers": workers,
         "policies": {n: s.model_dump() for n, s in summaries.items()},
         "run_dirs": {n: d.name for n, d in run_dirs.items()},
         "plot": plot.name}, indent=2) + "\n")
    echo_markdown(table)
    click.echo(f"\nwrote {out / 'compare.json'} and {plot}")


@click.command()
@click.option("--markdown", is_flag=True,
              help="print the README's policy table (generated from the registry) instead")
def policies(markdown: bool) -> None:
    """List the registered policies, their parameters and what they do."""
    from desched.policies import REGISTRY, registry_markdown
    from desched.policies.learnable import learnable_keys

    if markdown:
        click.echo(registry_markdown(), nl=False)
        return

    for name in sorted(REGISTRY):
        cls = REGISTRY[name]
        fields = cls.Params.model_fields
        params = ", ".join(f"{k}={f.default}" for k, f in sorted(
            fields.items(), key=lambda kv: kv[0] == "weights")) or "no parameters"
        reads = f" [reads {', '.join(sorted(cls.reads))}]" if cls.reads else ""
        if cls.optional_reads:
            reads += f" [uses {', '.join(sorted(cls.optional_reads))} where given]"
        keys = learnable_keys(cls.Params)
        learnable = f"{'':16s}   learnable (desched tune): {', '.join(keys)}" if keys else ""
        click.echo(f"{name:16s} {cls.summary}{reads}")
        click.echo(f"{'':16s}   {params}")
        if learnable:
            click.echo(learnable)
