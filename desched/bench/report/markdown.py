"""``report.md`` from ``report.json`` (``Report``) alone: every number it states is formatted
from a number of the record, which ``numbers.unmatched_numbers`` checks.

The text is a sequence of sections (``SECTIONS``), each a function of the report: first the
page of answers (``answers``: one sentence and one figure per question), then the appendix of
evidence, opening with the findings per workload (``FINDINGS``, one function per question).
A new section is a field of ``Report``, a function here and a line in each tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from desched.bench.report.answers import QUIET_PCT, answers_section
from desched.bench.report.deploy import markdown_section
from desched.bench.report.numbers import MIN_INTERVAL_N, fmt, fmt_ci, has_interval, pct
from desched.bench.report.records import Report, Timing
from desched.tables import table_lines

FEW_WINDOWS = 5
"""A windowed figure resting on fewer windows says how many."""


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return table_lines(head, rows)


def _over_windows(text: str, windows: int | None) -> str:
    """A windowed figure, with how many windows it rests on when they are few."""
    if windows is None or windows >= FEW_WINDOWS:
        return text
    if windows == 0:
        return "- (no window qualified)"
    return f"{text} ({windows} window{'' if windows == 1 else 's'})"


def _gap(x: float | None) -> str:
    return "no gap" if x is None else f"{fmt(x, 1)} %"


def _weights(r: Report, sep: str = "/") -> str:
    """The reference's weights, ``0.1/0.9``."""
    return sep.join(f"{v:g}" for v in r.q2.reference.weights.values())


def _closes(x: float | None, what: str, reference: str) -> str:
    if x is None:
        return f"nothing in {what} (there is no gap: `{reference}` is not lower)"
    return f"{fmt(x, 1)} % in {what}"


def q1_findings(r: Report) -> list[str]:
    q1 = r.q1
    out = []
    for w, b in q1.workloads.items():
        lag = _closes(b.gap_closed_pct.max_service_lag, "max service lag", q1.reference)
        wait = _closes(b.gap_closed_pct.small_tenants_mean_wait, "small tenants’ mean wait",
                       q1.reference)
        out.append(f"**Q1, {w}:** of the gap between `{q1.baseline}` and `{q1.reference}`, "
                   f"`{q1.candidate}` closes {lag} and {wait}, for "
                   f"{pct(b.cost_pct.mean_response_vs_memoryless)} mean response time.")
    return out


def q2_findings(r: Report) -> list[str]:
    out = []
    for name, le in r.q2.learners.items():
        o = le.overall["learned"]
        out.append(
            f"**Q2, {name}:** learned weights give J = {fmt_ci(o.J, 3, n=o.J.n)} on "
            f"{le.heldout_traces} held-out traces (today's = {fmt(1.0, 0)}), "
            f"bounded slowdown {fmt_ci(o.d_bsld_pct, 1, n=o.d_bsld_pct.n)} %: "
            f"**{o.verdict}**.")
    return out


def q3_findings(r: Report) -> list[str]:
    out = []
    base = r.q3.baseline
    for w, b in r.q3.workloads.items():
        p = b.predictor
        pol = b.policies
        focus = [x for x in r.q3.focus if x in pol]
        if not focus:
            continue
        moves = [abs(x.d_mean_response_pct) for x in pol.values()
                 if x.d_mean_response_pct is not None]
        if not moves or max(moves) < QUIET_PCT:
            out.append(f"**Q3, {w}:** no policy moves mean response time by "
                       f"{fmt(QUIET_PCT, 0)} % on this held-out part: nothing queues long "
                       "enough for ranking to matter, so it says nothing about Q3.")
            continue
        best = min(focus, key=lambda x: pol[x].mean_response_s or 0.0)
        against = " and ".join(f"{fmt(pol[x].mean_response_s)} s (`{x}`)"
                               for x in (base, *r.q3.bounds) if x in pol)
        out.append(
            f"**Q3, {w}:** the model's MAE is {fmt(p.heldout['model']['mae_s'])} s against "
            f"{fmt(p.heldout[p.best_baseline]['mae_s'])} s for the best baseline "
            f"(`{p.best_baseline}`), {fmt(p.latency_us.p50)} µs per prediction; "
            f"`{best}` has mean response {fmt(pol[best].mean_response_s)} s against "
            f"{against}, Jain's index {fmt(pol[best].jain_slowdown, 3)} against "
            f"{fmt(pol[base].jain_slowdown, 3)}.")
    return out


FINDINGS: tuple[Callable[[Report], list[str]], ...] = (q1_findings, q2_findings, q3_findings)


def ran_for(t: Timing) -> str:
    """How long the demo ran: from its process's start where known (what a user of
    ``desched demo`` waits, Prefect's local server starting before the flow), with the
    flow's own seconds beside it."""
    if t.process_s is None:
        return f"{fmt(t.total_s, 0)} s"
    return (f"{fmt(t.process_s, 0)} s from its process's start to this report "
            f"({fmt(t.total_s, 0)} s in its flow)")


def title_section(r: Report) -> list[str]:
    t = r.timing
    return [
        f"# desched report `{r.run}`",
        "",
        (f"Mode **{r.mode}**, created `{r.created}`; the demo ran for {ran_for(t)} "
         f"(load average at the end "
         f"{', '.join(fmt(x, 2) for x in t.load_average)} on {fmt(t.cpus, 0)} CPUs). "
         "The answers come first, one sentence and one figure each; the evidence follows in "
         "the appendix. Every number here is in `report.json`."),
        "",
        *answers_section(r),
    ]


def findings_section(r: Report) -> list[str]:
    return [
        "---",
        "",
        "# Appendix: the evidence",
        "",
        "## Findings per workload",
        "",
        *[f"- {f}" for findings in FINDINGS for f in findings(r)],
        "",
    ]


def workloads_section(r: Report) -> list[str]:
    scaled: dict[str, dict[str, float]] = r.settings.get("duration_scaled", {})
    memory = " ".join(
        f"`{policy}`'s `{key}` is {fmt(factor, 0)} mean task durations of the workload (its "
        "default on the DES scenarios)."
        for policy, keys in scaled.items() for key, factor in keys.items())
    lines = [
        "## Workloads",
        "",
        ("Real logs: a user is a tenant and a job one task on one worker; the worker count is "
         "the one whose offered load (total work / submission span / workers) is closest to "
         f"the target {fmt(r.settings['target_load'], 2)}. {memory}").rstrip(),
        "",
    ]
    columns = [(policy, key) for policy, keys in scaled.items() for key in keys]
    rows = []
    for w, info in r.workloads.items():
        rows.append([w, f"`{info.source}`", fmt(info.tasks, 0), fmt(info.tenants, 0),
                     fmt(info.workers, 0), fmt(info.offered_load, 3), fmt(info.span_h, 1),
                     fmt(info.mean_duration_s),
                     *(fmt(info.scaled_params.get(p, {}).get(k)) for p, k in columns)])
    lines += _table(["workload", "source", "tasks", "tenants", "workers", "offered load",
                     "span h", "mean duration s", *(f"{p} {k}" for p, k in columns)], rows)
    ing = r.ingestion
    lines += [
        "",
        (f"The baseline's decision logs were ingested into DuckDB: {fmt(ing.files_read, 0)} "
         f"files, {fmt(ing.decisions_loaded, 0)} decisions and "
         f"{fmt(ing.completions_loaded, 0)} completions loaded, "
         f"{fmt(ing.rows_quarantined, 0)} rows quarantined."),
        "",
    ]
    return lines


def q1_section(r: Report) -> list[str]:
    q1 = r.q1
    lines = [
        "## Q1: memoryless scoring against one counter",
        "",
        ("Small tenants: those below the fair share of service. Gap closed: "
         f"`(m_{q1.baseline} - m_{q1.candidate}) / (m_{q1.baseline} - m_{q1.reference})`, "
         "for the max service lag and for the small tenants' mean wait; cost: the change of "
         f"mean response time of `{q1.candidate}`. Window figures: the minimum windowed Jain's "
         "index is over windows with submissions, the mean window lag over windows in which "
         "two tenants or more were backlogged throughout; a figure resting on few windows "
         "says how many."),
        "",
    ]
    head = ["policy", "mean resp s", "p99 resp s", "small tenants' wait s", "Jain",
            "min window Jain", "max lag s", "mean window lag s"]
    for w, b in q1.workloads.items():
        lines += [(f"### {w} ({fmt(b.small_tenants_n, 0)} small tenants of "
                   f"{fmt(b.tenants_n, 0)})"), ""]
        lines += _table(head, ([p, fmt(x.mean_response_s), fmt(x.p99_response_s),
                                fmt(x.small_tenants_mean_wait_s), fmt(x.jain_slowdown, 3),
                                _over_windows(fmt(x.window_jain_min, 3), x.jain_windows),
                                fmt(x.max_service_lag_s),
                                _over_windows(fmt(x.window_lag_mean_s), x.lag_windows)]
                               for p, x in b.policies.items()))
        lines += ["", f"![Q1 {w}]({r.plots.q1[w]})", ""]
    lines += ["### Gap closed and cost, per workload", ""]
    lines += _table(
        ["workload", "max lag gap closed", "small tenants' wait gap closed",
         f"mean resp vs {q1.baseline}", f"mean resp vs {q1.reference}",
         f"p99 resp vs {q1.baseline}"],
        ([w, _gap(b.gap_closed_pct.max_service_lag),
          _gap(b.gap_closed_pct.small_tenants_mean_wait),
          pct(b.cost_pct.mean_response_vs_memoryless), pct(b.cost_pct.mean_response_vs_vtc),
          pct(b.cost_pct.p99_response_vs_memoryless)]
         for w, b in q1.workloads.items()))
    seeds = q1.over_seeds
    if seeds:
        fewest = min(len(sb.seeds) for sb in seeds.values())
        how = (f"Mean ± half-width of the {fmt(r.confidence_pct, 0)} % t-interval over "
               "regenerated scenarios and disjoint slices of the logs (smaller traces)."
               if has_interval(fewest) else
               ("Means over regenerated scenarios and disjoint slices of the logs (smaller "
                "traces); no interval where a workload has fewer than "
                f"{fmt(MIN_INTERVAL_N, 0)} seeds."))
        lines += ["", "### Over seeds", "", how, ""]
        rows = []
        for w, sb in seeds.items():
            n = len(sb.seeds)
            for p, m in sb.policies.items():
                rows.append([w, p, fmt(n, 0), fmt_ci(m.mean_response_s, n=n),
                             fmt_ci(m.jain_slowdown, 3, n=n),
                             fmt_ci(m.window_jain_min, 3, n=n),
                             fmt_ci(m.max_service_lag_s, n=n)])
        lines += _table(["workload", "policy", "seeds", "mean resp s", "Jain",
                         "min window Jain", "max lag s"], rows)
        gaps = [[w, _gap(sb.gap_closed_pct["max_service_lag"]),
                 pct((sb.cost_pct or {}).get("mean_response_vs_memoryless"))]
                for w, sb in seeds.items() if sb.gap_closed_pct is not None]
        if gaps:
            lines += ["", "From the means over seeds:", ""]
            lines += _table(["workload", "max lag gap closed",
                             f"mean resp vs {q1.baseline}"], gaps)
    return [*lines, ""]


def q2_section(r: Report) -> list[str]:
    q2 = r.q2
    lines = ["## Q2: learned weights against " + _weights(r, " / "), "",
             (f"Objective: `{q2.objective.text}`. Held-out traces were never trained on "
              "(other seeds of the scenarios, later slices of the LANL log, slices of the "
              "Atlas log). Verdict `beats` when the interval of J lies below today's; "
              f"intervals ({fmt(r.confidence_pct, 0)} %) are shown over "
              f"{fmt(MIN_INTERVAL_N, 0)} traces or more."), ""]
    for name, le in q2.learners.items():
        w = ", ".join(f"{k} = {fmt(v, 3)}" for k, v in le.weights.items())
        lines += [f"### {name}", "",
                  (f"Learned static weights: {w}; training objective "
                   f"{fmt(le.train_objective, 3)} after {fmt(le.steps, 0)} steps "
                   f"(first {fmt(le.first_value, 3)}, best {fmt(le.best_value, 3)}), "
                   f"{fmt(le.learner_seconds, 0)} s."), ""]
        rows = []
        for wl, per in {**le.heldout, "all held-out": le.overall}.items():
            for cand, s in per.items():
                rows.append([wl, cand, fmt(s.seeds, 0), fmt_ci(s.J, 3, n=s.J.n),
                             fmt_ci(s.d_bsld_pct, 1, n=s.d_bsld_pct.n),
                             fmt_ci(s.d_jain, 3, n=s.d_jain.n), s.verdict])
        lines += _table(["held-out workload", "candidate", "traces", "J", "Δ bsld %",
                         "Δ Jain", "verdict"], rows)
        lines += [""]
    return [*lines, f"![Q2 learning curves]({r.plots.q2})", ""]


def q3_section(r: Report) -> list[str]:
    lines = ["## Q3: predicted duration", "",
             ("Each model learns from the first part of its trace (time order) and predicts "
              "the rest; a held-out task's tenant-history features come only from tasks that "
              "had ended, under today's scorer, before it was submitted. Policies then run on "
              "the held-out part alone."), ""]
    for w, b in r.q3.workloads.items():
        p = b.predictor
        lines += [f"### {w}", "",
                  (f"Trained on the first {fmt(p.train_frac_pct, 0)} % of the trace "
                   f"({fmt(p.train_rows, 0)} validated completion records from the "
                   f"warehouse), objective `{p.objective}`; scored and simulated on the "
                   f"other {fmt(p.heldout_rows, 0)} tasks, never trained on. Latency per "
                   f"prediction (compiled forest): p50 {fmt(p.latency_us.p50)} µs, p99 "
                   f"{fmt(p.latency_us.p99)} µs; LightGBM's own single-row predict: p50 "
                   f"{fmt(p.booster_latency_us.p50)} µs."), ""]
        lines += _table(["predictor (held-out part)", "MAE s", "MdAPE %", "Spearman"],
                        ([k, fmt(v["mae_s"]), fmt(v["mdape_pct"], 1), fmt(v["spearman"], 3)]
                         for k, v in p.heldout.items()))
        lines += ["", f"On {fmt(b.tasks, 0)} held-out tasks, {fmt(b.workers, 0)} workers:", ""]
        lines += _table(
            ["policy", "mean resp s", "p99 resp s", "Δ mean resp", "Jain", "Δ Jain",
             "max lag s", "small tenants' wait s"],
            ([name, fmt(x.mean_response_s), fmt(x.p99_response_s),
              pct(x.d_mean_response_pct), fmt(x.jain_slowdown, 3),
              fmt(x.d_jain, 3, sign=True), fmt(x.max_service_lag_s),
              fmt(x.small_tenants_mean_wait_s)]
             for name, x in b.policies.items()))
        lines += ["", (f"Which tenants: mean slowdown against `{r.q3.baseline}`, tenants split "
                       "at the median of their mean task duration (better/worse: by more than "
                       f"{fmt(r.definitions['thresholds']['tenant_change_pct'], 0)} %)."), ""]
        lines += _table(
            ["policy", "short tenants better", "short worse", "long better", "long worse",
             "median ratio short", "median ratio long", "most hurt"],
            ([name, fmt(e.short_better, 0), fmt(e.short_worse, 0),
              fmt(e.long_better, 0), fmt(e.long_worse, 0),
              fmt(e.short_median_ratio, 3), fmt(e.long_median_ratio, 3),
              ", ".join(f"`{h.tenant}` {fmt(h.slowdown_ratio, 3)}" for h in e.most_hurt[:2])]
             for name, e in b.tenants.items()))
        lines += [""]
    return [*lines, f"![Q3 tenants]({r.plots.q3})", ""]


def pareto_section(r: Report) -> list[str]:
    bounds = ", ".join(f"`{b}`" for b in r.q3.bounds)
    drawn = (f"{bounds} (clairvoyant) is drawn as the bound, never on the front"
             if bounds else "no clairvoyant bound ran")
    lines = ["## Which policy to run: mean response against fairness", "",
             ("Every policy on the held-out part of each Q3 workload; on the front, no other "
              "policy has both a lower mean response time and a higher Jain's index; "
              f"{drawn}."), "",
             f"![Pareto]({r.plots.pareto})", ""]
    front = [pt for pt in r.pareto.points if pt.pareto_jain]
    lines += _table(["workload", "policy on the front", "mean resp s", "Jain", "max lag s",
                     "also on the lag front"],
                    ([pt.workload, pt.policy, fmt(pt.mean_response_s),
                      fmt(pt.jain_slowdown, 3), fmt(pt.max_service_lag_s),
                      "yes" if pt.pareto_lag else "no"] for pt in front))
    return [*lines, ""]


def deploy_section(r: Report) -> list[str]:
    return markdown_section(r.deploy, r.plots.deploy)


def rerun_section(r: Report) -> list[str]:
    lines = ["## Rerun", "", "```sh", *r.commands.values(), "```", ""]
    steps = r.timing.steps
    if steps:
        lines += ["Time per step (s): " + ", ".join(f"{k} {fmt(v, 1)}" for k, v in steps.items())
                  + ".", ""]
    return lines


SECTIONS: tuple[Callable[[Report], list[str]], ...] = (
    title_section, findings_section, workloads_section, q1_section, q2_section, q3_section, pareto_section,
    deploy_section, rerun_section,
)


def render_markdown(r: Report) -> str:
    """``report.md`` from the report alone, section by section (``SECTIONS``)."""
    return "\n".join(line for section in SECTIONS for line in section(r))
