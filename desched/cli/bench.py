"""Commands of the research bench: evaluate (policies x traces x seeds) and tune (weights).

Both run in this process without Prefect; the flows ``evaluate-policies`` and
``tune-weights`` run the same functions on Prefect task runners and publish artifacts.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from desched.cli.output import echo_markdown
from desched.cli.sim import FORCE_OPTION
from desched.errors import DeschedError
from desched.today import TODAY_SCORER


def _split(values: tuple[str, ...], option: str) -> list[str]:
    """The specs of a repeatable, comma-separated option, each once: a spec named twice
    would count its runs twice (as if more seeds) and narrow every interval; said on
    stderr."""
    from desched.cli.grammar import split_specs

    named = split_specs(values)
    once = list(dict.fromkeys(named))
    if len(once) < len(named):
        twice = ", ".join(s for s in once if named.count(s) > 1)
        click.echo(f"note: {option} names {twice} more than once; each runs once", err=True)
    return once


def _seeds(text: str | None, option: str = "--seeds") -> list[int] | None:
    """The seeds ``text`` names, each once: a seed named twice would run twice and count as
    two (narrowing every interval); said on stderr."""
    from desched.bench.specs import parse_seeds

    if not text:
        return None
    named: list[int] = []
    for part in text.replace(",", ";").split(";"):
        if part.strip():
            named.extend(parse_seeds(part))
    once = list(parse_seeds(text))
    if len(named) > len(once):
        twice = ", ".join(str(s) for s in once if named.count(s) > 1)
        click.echo(f"note: {option} {text!r} names seed {twice} more than once; each runs "
                   "once", err=True)
    return once


@click.command()
@click.option("--traces", "traces", multiple=True, required=True,
              help="Trace specs, comma-separated or repeated: a scenario (flood, "
                   "'steady?tasks=2000&load=0.9') or a trace file ('log.swf.gz?slice_tasks=2000"
                   "&load=0.9'; a seed is then a disjoint slice). 'seeds=0-4' in a spec "
                   "overrides --seeds for it.")
@click.option("--policies", "policies", multiple=True, required=True,
              help="Policy specs, comma-separated or repeated: "
                   "'ifs-memoryless?w_backlog=0.3&w_wait=0.7', 'ifs-counter?weights=DIR'.")
@click.option("--seeds", default="0-4", show_default=True,
              help="Seeds, e.g. 0-4 or 0,1,2: regenerated scenarios, or disjoint slices of a "
                   "file (of min(2,000, its tasks / 8) tasks unless slice_tasks=N).")
@click.option("--workers", required=True, type=click.IntRange(min=1), help="Workers simulated.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for evaluation.json, table.parquet and drift.parquet.")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Simulations run in parallel (processes).")
@click.option("--baseline", default=TODAY_SCORER, show_default=True,
              help="Policy spec that paired differences are taken against (if evaluated).")
@click.option("--window-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Window length for drift metrics (default: submission span / 20; never "
                   "under the run's span / 1000, so at most 1,000 windows).")
@FORCE_OPTION
def evaluate(
    traces: tuple[str, ...], policies: tuple[str, ...], seeds: str, workers: int, out: Path,
    jobs: int, baseline: str, window_s: float | None, force: bool,
) -> None:
    """Evaluate policies over traces and seeds: mean and 95 % interval of every metric,
    whole run and per window (drift)."""
    from desched.bench import evaluate as ev
    from desched.cli.grammar import fresh_folder

    fresh_folder(out, force)
    trace_specs, policy_specs = _split(traces, "--traces"), _split(policies, "--policies")
    seed_list = _seeds(seeds) or []
    cells = ev.cells_of(trace_specs, policy_specs, seed_list)
    for note in ev.slice_notes(trace_specs, seed_list):
        click.echo(note, err=True)
    results = ev.run_cells(cells, workers, window_s, jobs)
    rows = ev.aggregate(results, baseline if baseline in policy_specs else None)
    settings = {"traces": trace_specs, "policies": policy_specs, "seeds": seeds,
                "workers": workers, "baseline": baseline, "window_s": window_s}
    paths = ev.write_evaluation(out, settings, rows, results)
    echo_markdown(ev.markdown_table(rows))
    click.echo(f"\n{len(cells)} simulations; wrote {paths['json']}, {paths['table']}, "
               f"{paths['drift']}")


@click.command()
@click.option("--trace", "traces", multiple=True, required=True,
              help="Training trace spec (Parquet or SWF file, or scenario), repeatable or "
                   "comma-separated. A file trains on its first 3 slices by default.")
@click.option("--heldout", "heldout", multiple=True,
              help="Held-out trace spec, repeatable (default: the training specs, other seeds "
                   "or the file's last 5 slices).")
@click.option("--workers", required=True, type=click.IntRange(min=1), help="Workers simulated.")
@click.option("--trials", default=40, show_default=True, type=click.IntRange(min=1),
              help="Optuna trials, or RL iterations.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Weights folder to write, e.g. models/weights/NAME.")
@click.option("--learner", type=click.Choice(["optuna", "rl"]), default="optuna",
              show_default=True, help="Black-box search (Optuna TPE) or policy-gradient agent.")
@click.option("--policy", default=None,
              help="Policy whose weights to learn: any whose parameters are learnable (marked "
                   "in `desched policies`); default today's scorer.")
@click.option("--train-seeds", default=None,
              help="Training seeds/slices, e.g. 0-2 (default: scenarios 0-2, files first 3).")
@click.option("--heldout-seeds", default=None,
              help="Held-out seeds/slices, e.g. 100-104 (default: scenarios 100-104, files "
                   "last 5).")
@click.option("--seed", default=0, show_default=True, help="Seed of the learner.")
@click.option("--windows", default=20, show_default=True, type=click.IntRange(min=1),
              help="RL: decision windows per trace.")
@click.option("--fairness-weight", default=5.0, show_default=True, type=float,
              help="Penalty per unit of Jain's index below the reference's.")
@click.option("--reference", default=None,
              help="Policy J is measured against, at its defaults (default today's scorer).")
@click.option("--force", is_flag=True,
              help="Write into --out even when it holds files other than an earlier card "
                   "(card.json, card.md, learning-curve.png, agent.pt: a run replaces them).")
def tune(
    traces: tuple[str, ...], heldout: tuple[str, ...], workers: int, trials: int, out: Path,
    learner: str, policy: str | None, train_seeds: str | None, heldout_seeds: str | None,
    seed: int, windows: int, fairness_weight: float, reference: str | None, force: bool,
) -> None:
    """Learn the scorer's weights from traces by simulation; judge them on held-out traces;
    write OUT/card.json (loadable as --policy 'POLICY?weights=OUT'), card.md and the learning
    curve."""
    from pydantic import ValidationError

    from desched.bench.learning import Objective
    from desched.bench.tuning import TuneSettings
    from desched.bench.tuning import tune as run_tune
    from desched.cli.grammar import own_folder

    own_folder(out, ("card.json", "card.md", "learning-curve.png", "agent.pt"), force)
    named = {k: v for k, v in (("policy", policy), ("reference", reference)) if v is not None}
    try:
        settings = TuneSettings(
            train=_split(traces, "--trace"), heldout=_split(heldout, "--heldout") or None,
            train_seeds=_seeds(train_seeds, "--train-seeds"),
            heldout_seeds=_seeds(heldout_seeds, "--heldout-seeds"),
            workers=workers, learner=learner,  # type: ignore[arg-type]
            trials=trials, seed=seed, windows=windows,
            objective=Objective(fairness_weight=fairness_weight), **named,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DeschedError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    command = shlex.join(["desched", *sys.argv[1:]]) if Path(sys.argv[0]).name == "desched" \
        else None
    from desched.cli.progress import bar

    with bar(trials, f"tune ({learner})", "trial") as shown:
        def advance(done: int) -> None:
            shown.update(done - shown.n)

        card = run_tune(settings, out, command=command, progress=advance)
    from desched.bench.tuning import verdict_markdown

    echo_markdown(verdict_markdown(card))
    click.echo(f"wrote {out}/card.json (use --policy '{card.policy}?weights={out}'), card.md, "
               "learning-curve.png")
