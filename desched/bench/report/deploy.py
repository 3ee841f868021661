"""The report's section "Which policy to deploy", from a deployment judge's results.

``deploy_section`` turns a ``JudgeResult`` (``desched.bench.judge``: ``desched judge``'s
``judge.json``) into the report's ``DeploySection``: the criteria per real log for every
judged policy, the no-harm check on the DES scenarios, the judge's recommendation and the
service's deployed default (``desched.policies.RECOMMENDED``), which the text says agree or
not. ``markdown_section`` writes the text, ``plot_tenant_harm`` the per-tenant harm plot
(each tenant's mean bounded slowdown under a policy over today's, log scale). No policy name
is written here: every name comes from the judge's results or the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desched.bench.report.numbers import fmt
from desched.bench.report.records import DeployHarmRow, DeployRow, DeploySection
from desched.tables import table_lines

if TYPE_CHECKING:
    from desched.bench.judge import JudgeResult

PLOT = "deploy-tenants.png"


def deploy_section(result: JudgeResult, source: str) -> DeploySection:
    """The report's record of a judge run (``source``: where its results came from)."""
    from desched.policies import RECOMMENDED

    rows: list[DeployRow] = []
    harm: list[DeployHarmRow] = []
    for v in result.verdicts:
        if v.policy == result.today:
            continue
        failed = [k for k, c in v.criteria.items() if not c.passed]
        if v.kind == "log":
            c = v.criteria
            rows.append(DeployRow(
                workload=v.workload, policy=v.policy, gain=c["gain"].value,
                frontier_share=c["frontier_share"].value if "frontier_share" in c else None,
                p99_ratio=c["p99"].value, delta_jain=c["delta_jain"].value,
                worst_tenant=c["worst_tenant"].value, worst_tenant_name=v.worst_tenant_name,
                passed=v.passed, criteria=len(c), failed=failed,
                mean_response_s=v.outcome.mean_response_s,
                today_mean_response_s=v.today.mean_response_s,
                tenant_ratio=v.tenant_ratio))
        else:
            o, t = v.outcome, v.today
            harm.append(DeployHarmRow(
                workload=v.workload, policy=v.policy, mean_response_s=o.mean_response_s,
                today_mean_response_s=t.mean_response_s, jain_slowdown=o.jain_slowdown,
                today_jain_slowdown=t.jain_slowdown, max_service_lag_s=o.max_service_lag_s,
                today_max_service_lag_s=t.max_service_lag_s, passed=v.passed,
                criteria=len(v.criteria), failed=failed))
    candidates = [p for p in result.policies if p not in (result.today, result.oracle)]
    all_pass = [p for p in candidates
                if all(v.all_passed for v in result.verdicts if v.policy == p)]
    rec = [v for v in result.verdicts if v.policy == result.recommendation]
    loads = [c.load for c in result.cases if c.kind == "log"]
    return DeploySection(
        source=source, today=result.today, oracle=result.oracle,
        thresholds=result.thresholds.model_dump(), load=loads[0] if loads else None,
        recommendation_passed=sum(v.passed for v in rec),
        recommendation_criteria=sum(len(v.criteria) for v in rec),
        logs=list(dict.fromkeys(c.name for c in result.cases if c.kind == "log")),
        scenarios=list(dict.fromkeys(c.name for c in result.cases if c.kind == "scenario")),
        policies=candidates, rows=rows, harm=harm, recommendation=result.recommendation,
        reason=result.recommendation_reason, deployed_default=RECOMMENDED, all_pass=all_pass)


def candidate_totals(d: DeploySection) -> dict[str, tuple[int, int]]:
    """Per judged candidate: criteria passed and criteria judged, over every workload."""
    totals: dict[str, tuple[int, int]] = {}
    rows: list[DeployRow | DeployHarmRow] = [*d.rows, *d.harm]
    for row in rows:
        if row.policy in d.policies:
            passed, judged = totals.get(row.policy, (0, 0))
            totals[row.policy] = (passed + row.passed, judged + row.criteria)
    return totals


def standing(d: DeploySection) -> str:
    """How the recommendation's count of criteria passed stands among the candidates: "the
    most of any candidate", "tied for the most with `x`", or which candidates pass more
    (then the judge's rule, not the count, chose it)."""
    totals = candidate_totals(d)
    rec = d.recommendation
    if rec is None or rec not in totals:
        return "no count to compare"
    mine = totals[rec][0]
    more = sorted((p for p, (n, _) in totals.items() if n > mine), key=lambda p: -totals[p][0])
    tied = [p for p, (n, _) in totals.items() if n == mine and p != rec]
    if more:
        return ("fewer than " + ", ".join(f"`{p}` ({totals[p][0]} of {totals[p][1]})"
                                          for p in more)
                + ": the judge's rule, not the count, chose it")
    if tied:
        return ("tied for the most with " + ", ".join(f"`{p}`" for p in tied)
                + f" (also {mine} of {totals[tied[0]][1]})")
    return "the most of any candidate"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{fmt(value, 2)}×"


def _mark(row: DeployRow | DeployHarmRow, key: str, text: str) -> str:
    return f"{text} ✗" if key in row.failed else text


def markdown_section(d: DeploySection | None, plot: str | None) -> list[str]:
    """The text of "Which policy to deploy" (nothing when the report has no judge run)."""
    if d is None:
        return []
    th = d.thresholds
    lines = [
        "## Which policy to deploy", "",
        (f"Judged by `desched judge` (`{d.source}`): per real log, the duration model is "
         "trained on the first part of the log by submit time and the rest is simulated "
         f"at utilisation {fmt(d.load, 2)} against today's `{d.today}` and the clairvoyant "
         f"`{d.oracle}`. The three promises: a p99 response of at most "
         f"{fmt(th['p99_ratio_max'], 2)}× today's, a Jain's index (per-tenant mean bounded "
         f"slowdown) at least today's {fmt(th['delta_jain_min'], 2, sign=True)}, and no "
         f"tenant with {th['min_tenant_tasks']:.0f} tasks or more worse than "
         f"{fmt(th['worst_tenant_max'], 1)}×. The oracle share is the gain over the "
         f"clairvoyant's (at least {fmt(th['gain_floor'], 1)}); the frontier share the gain "
         "over the largest gain a clairvoyant policy of the judge's family reaches keeping "
         f"the promises (target {fmt(th['frontier_share_min'], 1)}); ✗ marks a failed "
         "criterion."), "",
    ]

    def worst(r: DeployRow) -> str:
        name = f" (`{r.worst_tenant_name}`)" if r.worst_tenant_name else ""
        return _mark(r, "worst_tenant", _x(r.worst_tenant) + name)

    lines += table_lines(
        ["log", "policy", "oracle share", "frontier share", "p99 vs today", "Δ Jain",
         "worst tenant", "passed"],
        [[f"`{r.workload}`", f"`{r.policy}`", _mark(r, "gain", fmt(r.gain, 2)),
          _mark(r, "frontier_share", fmt(r.frontier_share, 2)),
          _mark(r, "p99", _x(r.p99_ratio)),
          _mark(r, "delta_jain", fmt(r.delta_jain, 3, sign=True)), worst(r),
          f"{r.passed} of {r.criteria}"] for r in d.rows])
    if d.harm:
        lines += ["", (f"No harm on the DES scenarios (the policy's value / `{d.today}`'s):"),
                  ""]
        lines += table_lines(
            ["scenario", "policy", "mean response s", "Jain", "max service lag s", "passed"],
            [[f"`{h.workload}`", f"`{h.policy}`",
              (f"{_mark(h, 'mean_response', fmt(h.mean_response_s))} / "
              f"{fmt(h.today_mean_response_s)}"),
              (f"{_mark(h, 'jain_slowdown', fmt(h.jain_slowdown, 3))} / "
              f"{fmt(h.today_jain_slowdown, 3)}"),
              (f"{_mark(h, 'max_service_lag', fmt(h.max_service_lag_s))} / "
              f"{fmt(h.today_max_service_lag_s)}"),
              f"{h.passed} of {h.criteria}"] for h in d.harm])
    if plot:
        lines += ["", f"![per-tenant harm]({plot})"]
    rec = d.recommendation
    passing = ", ".join(f"`{p}`" for p in d.all_pass) or "no candidate"
    lines += ["", f"Every criterion on every workload: {passing}.", "",
              (f"**Recommendation: `{rec}`**, which passes {d.recommendation_passed} of "
               f"{d.recommendation_criteria} criteria over all workloads, {standing(d)} (the "
               "rule: promises first, then the highest smallest frontier share)." if rec else
               "**No recommendation**: no candidate clears the rule."),
              (f"The service's default with a duration model is `{d.deployed_default}` "
               "(`desched.policies.RECOMMENDED`)"
               + (", the judge's recommendation." if d.deployed_default == rec else
                  f", not this run's recommendation `{rec}`: set it after a full judge run.")),
              ""]
    return lines


def plot_tenant_harm(d: DeploySection, out: Path) -> Path:
    """Per real log: each tenant's (>= the judge's tenant floor of tasks) mean bounded
    slowdown under every judged policy over today's, sorted, on a log scale; the judge's
    2× bound dashed. One legend names every line, both bounds included."""
    import matplotlib.pyplot as plt

    fig = tenant_harm_figure(d)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def tenant_harm_figure(d: DeploySection) -> Any:
    """The figure of ``plot_tenant_harm``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    logs = d.logs or sorted({r.workload for r in d.rows})
    cols = min(3, max(1, len(logs)))
    nrows = -(-len(logs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    policies = list(dict.fromkeys(r.policy for r in d.rows))
    for k, w in enumerate(logs):
        ax = axes[k // cols, k % cols]
        for i, p in enumerate(policies):
            row = next((r for r in d.rows if r.workload == w and r.policy == p), None)
            if row is None or not row.tenant_ratio:
                continue
            ratios = sorted(row.tenant_ratio.values(), reverse=True)
            style: dict[str, Any] = {"lw": 2.2 if p == d.recommendation else 1.1}
            if p == d.oracle:
                style.update(ls=":", color="0.3")
            else:
                style.update(color=f"C{i}")
            ax.plot(range(1, len(ratios) + 1), ratios, label=p, **style)
        ax.axhline(1.0, color="k", lw=0.8, label=f"as under {d.today} (1×)")
        bound = d.thresholds["worst_tenant_max"]
        ax.axhline(bound, color="C3", lw=0.8, ls="--",
                   label=f"the judge's bound ({fmt(bound, 1)}×)")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tenants, worst first")
        ax.set_ylabel(f"bounded slowdown / {d.today}'s")
        ax.set_title(w, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    for k in range(len(logs), nrows * cols):
        axes[k // cols, k % cols].axis("off")
    named: dict[str, Any] = {}  # every line of every panel, once: policies, then both bounds
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            named.setdefault(label, handle)
    ncol = min(len(named), 4)
    fig.legend(list(named.values()), list(named), loc="lower center", ncol=ncol, fontsize=8,
               frameon=False)
    legend_rows = -(-len(named) // max(ncol, 1))
    fig.tight_layout(rect=(0, min(0.4, (0.045 if nrows == 1 else 0.025) * legend_rows + 0.02),
                           1, 1))
    return fig


def judge_for_report(workloads: Sequence[tuple[str, Path, int | None]],
                     scenarios: Sequence[tuple[str, int]], *, results: Path | None,
                     cache_dir: Path, settings: Any = None,
                     progress: Any = None, pool: Any = None) -> tuple[JudgeResult, str]:
    """The judge's results for the report: ``results`` (a ``judge.json`` or its folder) when
    it exists, else a judge run on ``workloads`` (name, SWF path, max tasks or None) and
    ``scenarios`` (name, tasks), cached under ``cache_dir``. Returns them and their source.
    With ``pool`` (``desched.bench.pool.Pool``) the cases' preparation and the judge's
    simulations run on it (``desched.bench.pooled_judge``): the same results."""
    from desched.bench import judge as jd

    if results is not None and Path(results).exists():
        return jd.read_judge(results), f"results of {results}"
    if pool is not None:
        from desched.bench import pooled_judge

        cases = pooled_judge.prepare_cases([(path, n) for _, path, n in workloads], scenarios,
                                           cache_dir=cache_dir, settings=settings, pool=pool)
        pooled_judge.prefill_outcomes(cases, pool=pool)
    else:
        cases = [jd.prepare_log(path, cache_dir=cache_dir, max_tasks=max_tasks,
                                settings=settings, progress=progress)
                 for _, path, max_tasks in workloads]
        cases += [jd.prepare_scenario(name, cache_dir=cache_dir, tasks=tasks,
                                      settings=settings, progress=progress)
                  for name, tasks in scenarios]
    names = ", ".join(path.name + (f" (first {n:,} tasks)" if n else "")
                      for _, path, n in workloads)
    # the report shows verdicts and standings, not the family run on predictions: not run
    return jd.run_judge(cases, deployable=False), f"run by the demo on {names}"
