"""``report.json`` (``Report``) from the results of the demo's steps. Pure: no Prefect, no
simulation, no training, no policy names: roles come from ``Roles`` (settings) and groups
from ``desched.bench.roles`` (what the policies declare).

Definitions the text relies on (also written into ``report.json["definitions"]``):

- *small tenants* of a trace: those whose share of the total service (work) is below the fair
  share ``1 / tenants``; their *mean wait* is the mean over their tasks.
- *gap closed* by Q1's candidate (``ifs-counter``), for a fairness measure ``m`` (max service
  lag, small tenants' mean wait) where lower is fairer:
  ``(m_baseline - m_candidate) / (m_baseline - m_reference)`` in %: 100 % is all of the way
  to the reference (``vtc``), 0 % none of it, negative is further away. Undefined (null)
  when the reference is not better than the baseline by at least 1 % of the latter (no gap
  to close).
- *cost*: relative change of mean response time, the candidate against the baseline (and
  against the reference), in %.
- *Pareto*: a policy is on the front of a workload when no other policy has both a lower
  mean response time and a higher Jain's index (or a lower max service lag, for that front).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from desched.bench import roles
from desched.bench.evaluate import EvalRow, Interval
from desched.bench.learning import reference_label
from desched.bench.report.deploy import PLOT as DEPLOY_PLOT
from desched.bench.report.inputs import (
    HeldoutRuns,
    Ingestion,
    PredictorResult,
    Q1Runs,
    Roles,
    WorkloadInfo,
)
from desched.bench.report.numbers import pct_change
from desched.bench.report.records import (
    CI,
    Brief,
    Costs,
    CurveStep,
    DeploySection,
    Gaps,
    Headline,
    LatencyInfo,
    ObjectiveInfo,
    Pareto,
    ParetoPoint,
    Plots,
    PredictorInfo,
    Q1Section,
    Q1Workload,
    Q2Learner,
    Q2Section,
    Q3Row,
    Q3Section,
    Q3Workload,
    ReferenceInfo,
    Report,
    SeedCI,
    SeedsPolicy,
    SeedsWorkload,
    TenantEffects,
    TenantRatio,
    Timing,
)
from desched.bench.weights import HeldoutVerdict, WeightsCard
from desched.errors import DeschedError
from desched.runs import RunSummary

CONFIDENCE_PCT = 95
NO_GAP_FRAC = 0.01
TENANT_CHANGE = 0.05
"""A tenant is better or worse off under a policy when its mean slowdown moves by more."""
SEED_METRICS = ("mean_response_s", "p99_response_s", "jain_slowdown", "window_jain_min",
                "max_service_lag_s", "window_lag_mean_s", "mean_bounded_slowdown")


def small_tenants(summary: RunSummary) -> list[str]:
    """Tenants whose share of all service is below the fair share ``1 / tenants``."""
    per = summary.tenants()
    total = sum(t.service_s for t in per.values())
    fair = total / max(1, len(per))
    return sorted(name for name, t in per.items() if t.service_s < fair)


def tenants_mean_wait(summary: RunSummary, tenants: Iterable[str]) -> float:
    per = summary.tenants()
    chosen = [per[t] for t in tenants if t in per]
    n = sum(t.tasks for t in chosen)
    return sum(t.mean_wait_s * t.tasks for t in chosen) / n if n else math.nan


def gap_closed_pct(baseline: float, candidate: float, reference: float) -> float | None:
    """``100 * (baseline - candidate) / (baseline - reference)``, or None with no gap."""
    gap = baseline - reference
    if not (math.isfinite(gap) and gap > NO_GAP_FRAC * abs(baseline)):
        return None
    return 100.0 * (baseline - candidate) / gap


def headline(summary: RunSummary, small: Sequence[str]) -> Headline:
    """The figures a policy row of the report shows, from a run summary."""
    drift = summary.drift()
    return Headline(
        mean_response_s=summary.mean_response_s,
        p99_response_s=summary.p99_response_s,
        mean_wait_s=summary.mean_wait_s,
        mean_bounded_slowdown=summary.mean_bounded_slowdown,
        jain_slowdown=summary.jain_slowdown,
        window_jain_min=drift.window_jain_min,
        window_jain_mean=drift.window_jain_mean,
        max_service_lag_s=summary.max_service_lag_s,
        window_lag_mean_s=drift.window_lag_mean_s,
        jain_windows=drift.jain_windows,
        lag_windows=drift.lag_windows,
        small_tenants_mean_wait_s=tenants_mean_wait(summary, small),
        utilization=summary.utilization,
    )


def _num(x: float | None) -> float:
    return math.nan if x is None else x


def q1_workload(runs: Q1Runs, r: Roles) -> Q1Workload:
    """Q1 for one workload: the policy rows, the gap the candidate closes and its cost."""
    base = runs.summaries[r.baseline]
    small = small_tenants(base)
    rows = {p: headline(s, small) for p, s in runs.summaries.items()}
    mem, ref, cand = rows[r.baseline], rows[r.reference], rows[r.candidate]

    def gap(key: str) -> float | None:
        return gap_closed_pct(_num(getattr(mem, key)), _num(getattr(cand, key)),
                              _num(getattr(ref, key)))

    def change(new: float | None, old: float | None) -> float | None:
        return pct_change(_num(new), _num(old))

    return Q1Workload(
        small_tenants=small,
        small_tenants_n=len(small),
        tenants_n=len(base.tenants()),
        policies=rows,
        gap_closed_pct=Gaps(max_service_lag=gap("max_service_lag_s"),
                            small_tenants_mean_wait=gap("small_tenants_mean_wait_s"),
                            window_lag_mean=gap("window_lag_mean_s")),
        cost_pct=Costs(
            mean_response_vs_memoryless=change(cand.mean_response_s, mem.mean_response_s),
            mean_response_vs_vtc=change(cand.mean_response_s, ref.mean_response_s),
            vtc_mean_response_vs_memoryless=change(ref.mean_response_s, mem.mean_response_s),
            p99_response_vs_memoryless=change(cand.p99_response_s, mem.p99_response_s),
        ),
    )


def _seed_ci(ci: Interval, with_n: bool = True) -> SeedCI:
    return SeedCI(mean=ci.mean, half=ci.half, lo=ci.lo, hi=ci.hi, n=ci.n if with_n else None)


def q1_over_seeds(rows: Sequence[EvalRow], r: Roles,
                  label: Callable[[str], str] = str) -> dict[str, SeedsWorkload]:
    """Aggregated evaluation rows (``desched.bench.evaluate.aggregate``) by workload and
    policy, with the lag gap the candidate closes from the means over seeds."""
    blocks: dict[str, tuple[str, list[int], dict[str, SeedsPolicy]]] = {}
    for row in rows:
        spec, seeds, policies = blocks.setdefault(label(row.trace), (row.trace, row.seeds, {}))
        diff = row.vs_baseline["mean_response_s"] if row.vs_baseline is not None else None
        policies[row.policy] = SeedsPolicy(
            **{m: _seed_ci(row.metrics[m]) for m in SEED_METRICS},
            d_mean_response_s=_seed_ci(diff, with_n=False) if diff is not None else None,
        )
    out = {}
    q1 = (r.baseline, r.reference, r.candidate)
    for w, (spec, seeds, policies) in blocks.items():
        gaps = costs = None
        if all(k in policies for k in q1):
            lag = {k: _num(policies[k].max_service_lag_s.mean) for k in q1}
            resp = {k: _num(policies[k].mean_response_s.mean) for k in q1}
            gaps = {"max_service_lag": gap_closed_pct(lag[r.baseline], lag[r.candidate],
                                                      lag[r.reference])}
            costs = {"mean_response_vs_memoryless": pct_change(resp[r.candidate],
                                                               resp[r.baseline])}
        out[w] = SeedsWorkload(spec=spec, seeds=seeds, policies=policies, gap_closed_pct=gaps,
                               cost_pct=costs)
    return out


def _ci(ci: Interval) -> CI:
    return CI(mean=ci.mean, lo=ci.lo, hi=ci.hi, half=ci.half, n=ci.n)


def _brief(s: HeldoutVerdict) -> Brief:
    return Brief(seeds=len(s.seeds), J=_ci(s.J), d_bsld_pct=_ci(s.d_bsld_pct),
                 d_jain=_ci(s.d_jain), d_max_lag_s=_ci(s.d_max_lag_s), verdict=s.verdict)


def q2_learner(card: WeightsCard, label: Callable[[str], str] = str) -> Q2Learner:
    """Q2 for one learner, from its weights card (``desched.bench.tuning.make_card``)."""
    curve = card.learning_curve
    return Q2Learner(
        policy=card.policy,
        weights=card.weights,
        train_objective=card.train_objective,
        learner_seconds=card.learner_seconds,
        steps=len(curve),
        first_value=curve[0].value if curve else None,
        best_value=min(p.best for p in curve) if curve else None,
        curve=[CurveStep(step=p.step, value=p.value, best=p.best) for p in curve],
        heldout={label(w): {c: _brief(s) for c, s in per.items()}
                 for w, per in card.heldout.by_workload.items()},
        overall={c: _brief(s) for c, s in card.heldout.overall.items()},
        train_traces=len(card.split.train),
        heldout_traces=len(card.split.heldout),
    )


def tenant_effects(base: RunSummary, mine: RunSummary,
                   durations: dict[str, float]) -> TenantEffects:
    """How a run (``mine``) changes each tenant's mean slowdown against the baseline's run
    (``base``), split by the tenant's mean task duration (short: at or below the median)."""
    b, m = base.tenants(), mine.tenants()
    median = float(np.median(list(durations.values())))
    ratio = {t: m[t].mean_slowdown / b[t].mean_slowdown
             for t in b if t in m and b[t].mean_slowdown > 0}
    short = [t for t in ratio if durations[t] <= median]
    long = [t for t in ratio if durations[t] > median]

    def count(ts: list[str], better: bool) -> int:
        return sum(1 for t in ts if (ratio[t] < 1 - TENANT_CHANGE if better
                                     else ratio[t] > 1 + TENANT_CHANGE))

    def named(ts: list[str]) -> list[TenantRatio]:
        return [TenantRatio(tenant=t, slowdown_ratio=ratio[t], mean_duration_s=durations[t])
                for t in ts]

    order = sorted(ratio, key=lambda t: (ratio[t], t))
    return TenantEffects(
        median_tenant_duration_s=median,
        short_tenants=len(short), long_tenants=len(long),
        short_better=count(short, True), short_worse=count(short, False),
        long_better=count(long, True), long_worse=count(long, False),
        short_median_ratio=float(np.median([ratio[t] for t in short])) if short else None,
        long_median_ratio=float(np.median([ratio[t] for t in long])) if long else None,
        most_helped=named(order[:3]),
        most_hurt=named(order[::-1][:3]),
    )


def focus_of(sims: HeldoutRuns) -> list[str]:
    """The candidates of a held-out part that rank on predictions."""
    return [label for label, run in sims.runs.items() if roles.predictive(run.policy)]


def bounds_of(sims: HeldoutRuns) -> list[str]:
    """The candidates of a held-out part that are clairvoyant bounds."""
    return [label for label, run in sims.runs.items() if roles.clairvoyant(run.policy)]


def q3_workload(train: PredictorResult, sims: HeldoutRuns, baseline: str) -> Q3Workload:
    """Q3 for one workload: the predictor against its baselines, its latency, every policy on
    the held-out part, and the tenants that ranking on predictions helps or hurts."""
    base = sims.runs[baseline].summary
    small = small_tenants(base)
    mem = headline(base, small)
    policies = {}
    for label, run in sims.runs.items():
        row = headline(run.summary, small)
        policies[label] = Q3Row(
            **row.model_dump(),
            d_mean_response_pct=pct_change(_num(row.mean_response_s),
                                           _num(mem.mean_response_s)),
            d_p99_response_pct=pct_change(_num(row.p99_response_s), _num(mem.p99_response_s)),
            d_jain=_num(row.jain_slowdown) - _num(mem.jain_slowdown),
        )
    heldout = train.heldout
    best_baseline = min((k for k in heldout if k != "model"),
                        key=lambda k: _num(heldout[k]["mae_s"]))
    return Q3Workload(
        predictor=PredictorInfo(
            version=train.version, objective=train.objective,
            train_rows=train.train_rows, heldout_rows=train.heldout_rows,
            train_frac_pct=100.0 * train.train_frac,
            heldout=heldout, card_test=train.card_test,
            best_baseline=best_baseline,
            mae_vs_best_baseline_pct=pct_change(_num(heldout["model"]["mae_s"]),
                                                _num(heldout[best_baseline]["mae_s"])),
            latency_us=LatencyInfo(**train.latency_us.model_dump()),
            booster_latency_us=LatencyInfo(**train.booster_latency_us.model_dump()),
            training_time_s=train.training_time_s,
            compile_time_s=train.compile_time_s,
        ),
        workers=sims.workers,
        tasks=sims.tasks,
        policies=policies,
        tenants={label: tenant_effects(base, sims.runs[label].summary, sims.tenant_durations)
                 for label in focus_of(sims)},
    )


def pareto_flags(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For (cost, badness) pairs, both lower-is-better: whether each is on the front."""
    flags = []
    for i, (c, b) in enumerate(points):
        dominated = any(
            (c2 <= c and b2 <= b) and (c2 < c or b2 < b)
            for j, (c2, b2) in enumerate(points) if j != i
        )
        flags.append(not dominated)
    return flags


def pareto_points(q3: dict[str, Q3Workload], sims: dict[str, HeldoutRuns]) -> list[ParetoPoint]:
    """One point per (workload, candidate) of Q3's held-out runs, with both front
    memberships among the policies one can run (a clairvoyant bound is shown, never on a
    front)."""
    out = []
    for w, block in q3.items():
        bounds = set(bounds_of(sims[w]))
        names = [p for p in block.policies if p not in bounds]
        rows = [block.policies[p] for p in names]
        jain = pareto_flags([(_num(r.mean_response_s), -_num(r.jain_slowdown)) for r in rows])
        lag = pareto_flags([(_num(r.mean_response_s), _num(r.max_service_lag_s)) for r in rows])
        flags = {p: (fj, fl) for p, fj, fl in zip(names, jain, lag)}
        for p, r in block.policies.items():
            fj, fl = flags.get(p, (False, False))
            out.append(ParetoPoint(workload=w, policy=p, mean_response_s=r.mean_response_s,
                                   jain_slowdown=r.jain_slowdown,
                                   max_service_lag_s=r.max_service_lag_s,
                                   clairvoyant=p in bounds, pareto_jain=fj, pareto_lag=fl))
    return out


def definitions(r: Roles, reference_weights: str) -> dict[str, Any]:
    """What the report's terms mean, with the roles' names (``report.json["definitions"]``)."""
    return {
        "small_tenants": "tenants whose share of all service is below the fair share 1/tenants",
        "gap_closed_pct": f"100 * (m_{r.baseline} - m_{r.candidate}) / (m_{r.baseline} - "
                          f"m_{r.reference}); null when {r.reference} is not better than "
                          f"{r.baseline} by at least 1 % (no gap)",
        "cost_pct": f"100 * (mean_response_{r.candidate} - mean_response_other) / "
                    "mean_response_other",
        "jain_slowdown": "Jain's index over per-tenant mean slowdown (1 = equal)",
        "max_service_lag_s": "largest service lag between two tenants backlogged throughout a "
                             "window (VTC's measure); windows are the submission span / 20",
        "pareto": "no other policy has both lower mean response time and better fairness",
        "thresholds": {"tenant_change_pct": 100.0 * TENANT_CHANGE,
                       "no_gap_pct": 100.0 * NO_GAP_FRAC},
        "J": f"mean bounded slowdown / that of {reference_weights} on the same trace + "
             "fairness_weight * max(0, Jain_ref - Jain); 1 = today's scorer, lower is better",
    }


def check_roles(r: Roles, q1_runs: dict[str, Q1Runs]) -> None:
    """Refuse roles that name a policy outside Q1's family or one that did not run."""
    family = roles.q1_family(r.baseline)
    for part, name in (("reference", r.reference), ("candidate", r.candidate)):
        if name not in family:
            raise DeschedError(f"Q1 {part} {name!r} keeps no per-tenant service counter "
                               f"(Q1's family: {', '.join(family)})")
    for w, runs in q1_runs.items():
        missing = [p for p in (r.baseline, r.reference, r.candidate) if p not in runs.summaries]
        if missing:
            raise DeschedError(f"Q1 on {w!r}: no run of {', '.join(missing)}")


def build_report(
    *,
    run: str,
    mode: str,
    created: str,
    settings: dict[str, Any],
    parts: Roles,
    workloads: dict[str, WorkloadInfo],
    ingestion: Ingestion,
    q1_runs: dict[str, Q1Runs],
    q1_eval_rows: Sequence[EvalRow],
    q2_cards: dict[str, WeightsCard],
    spec_label: Callable[[str], str] = str,
    q3_train: dict[str, PredictorResult],
    q3_sims: dict[str, HeldoutRuns],
    timing: Timing,
    commands: dict[str, str],
    deploy: DeploySection | None = None,
) -> Report:
    """``report.json``: every figure of every question (module docstring for definitions);
    ``deploy`` is the deployment judge's section (``desched.bench.report.deploy``)."""
    check_roles(parts, q1_runs)
    q1 = {w: q1_workload(s, parts) for w, s in q1_runs.items()}
    q3 = {w: q3_workload(q3_train[w], q3_sims[w], parts.baseline) for w in q3_train}
    any_card = next(iter(q2_cards.values()))
    first = next(iter(q3_sims.values()), None)
    return Report(
        run=run,
        mode=mode,
        created=created,
        confidence_pct=CONFIDENCE_PCT,
        definitions=definitions(parts, reference_label(any_card.reference)),
        settings=settings,
        workloads=workloads,
        ingestion=ingestion,
        q1=Q1Section(baseline=parts.baseline, reference=parts.reference,
                     candidate=parts.candidate, policies=roles.q1_family(parts.baseline),
                     workloads=q1, over_seeds=q1_over_seeds(q1_eval_rows, parts, spec_label)),
        q2=Q2Section(objective=ObjectiveInfo(**any_card.objective.model_dump()),
                     reference=ReferenceInfo(**any_card.reference.model_dump()),
                     learners={name: q2_learner(c, spec_label) for name, c in q2_cards.items()}),
        q3=Q3Section(baseline=parts.baseline,
                     focus=focus_of(first) if first else [],
                     bounds=bounds_of(first) if first else [],
                     workloads=q3),
        pareto=Pareto(points=pareto_points(q3, q3_sims)),
        deploy=deploy,
        timing=timing,
        commands=commands,
        plots=Plots(q1={w: f"q1-{w}.png" for w in q1}, q2="q2-learning-curves.png",
                    q3="q3-tenants.png", pareto="pareto.png",
                    deploy=DEPLOY_PLOT if deploy is not None else None),
    )
