"""The report's first page: the answer to each of its four questions (Q1, Q2, Q3, which
policy to deploy), each one sentence computed from ``report.json`` and the one figure that
shows it best. The evidence (every table) follows in the appendix (``markdown``).

Rules the sentences keep: a range over workloads is stated as a range, a policy that shares
the best count with another is "tied", an interval is shown only over ``MIN_INTERVAL_N``
values or more (``numbers.fmt_ci``), and a workload where no policy moves mean response
time by ``QUIET_PCT`` % or more is named as showing no difference rather than counted as a
result. No policy name is written here: every name comes from the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from desched.bench.report.deploy import standing
from desched.bench.report.numbers import fmt, fmt_ci, pct
from desched.bench.report.records import Report
from desched.records import Record

QUIET_PCT = 1.0
"""A Q3 workload where every policy's mean response is within this many % of the baseline's
shows no difference (nothing queues long enough for ranking to matter)."""


class Answer(Record):
    """One question of the first page: its title, the one sentence that answers it and the
    figure (a file beside ``report.md``, None when the report has none for it)."""

    question: str
    sentence: str
    figure: str | None
    caption: str


def _names(xs: Sequence[str]) -> str:
    return ", ".join(f"`{x}`" for x in xs)


def _seconds(x: float | None) -> str:
    return "0 s" if x == 0 else f"{fmt(x)} s"


def _span(values: Sequence[float], show: Callable[[float], str]) -> str:
    """``a`` or ``a to b`` (ascending) of the values, each shown by ``show``."""
    lo, hi = min(values), max(values)
    return show(lo) if show(lo) == show(hi) else f"{show(lo)} to {show(hi)}"


def q1_answer(r: Report) -> Answer:
    """Q1: the share of the max-service-lag gap the candidate closes, where there is a gap,
    and its cost; the figure is the workload where today's scorer lags most behind."""
    q1 = r.q1
    base, ref, cand = q1.baseline, q1.reference, q1.candidate
    blocks = q1.workloads
    closed = {w: b.gap_closed_pct.max_service_lag for w, b in blocks.items()
              if b.gap_closed_pct.max_service_lag is not None}
    no_gap = [w for w in blocks if w not in closed]
    question = ("Q1: does memoryless scoring treat tenants fairly over time, and can one "
                "per-tenant counter fix it?")
    if not closed:
        return Answer(
            question=question,
            sentence=(f"On none of the workloads ({_names(list(blocks))}) is `{ref}` fairer "
                      f"than `{base}` by the max service lag, so there is no gap for `{cand}` "
                      "to close here."),
            figure=r.plots.q1.get(next(iter(blocks))) if blocks else None,
            caption="per-tenant wait and service share over time, windowed fairness")

    def lag_gap(w: str) -> float:
        """The lag gap in mean task durations of the workload: how far behind it falls."""
        p = blocks[w].policies
        lag_base, lag_ref = p[base].max_service_lag_s or 0.0, p[ref].max_service_lag_s or 0.0
        info = r.workloads.get(w)
        scale = info.mean_duration_s if info is not None and info.mean_duration_s > 0 else 1.0
        return (lag_base - lag_ref) / scale

    shown = max(closed, key=lambda w: (lag_gap(w), w))
    p = blocks[shown].policies
    costs = [c for w in closed
             if (c := blocks[w].cost_pct.mean_response_vs_memoryless) is not None]
    where = (f"on {_names(list(closed))}"
             + (f" (on {_names(no_gap)} there is no gap: `{ref}` is not fairer there)"
                if no_gap else ""))
    cost = f", for {_span(costs, pct)} mean response time" if costs else ""
    sentence = (
        f"`{cand}` closes {_span(list(closed.values()), lambda x: f'{fmt(x, 1)} %')} of the "
        f"gap in max service lag between `{base}` and `{ref}` {where}{cost}; on `{shown}` "
        f"(the figure) `{base}`'s largest lag between two backlogged tenants is "
        f"{_seconds(p[base].max_service_lag_s)}, `{cand}`'s "
        f"{_seconds(p[cand].max_service_lag_s)}.")
    return Answer(question=question, sentence=sentence, figure=r.plots.q1[shown],
                  caption=f"Q1 on {shown}: per-tenant wait and service share over time, "
                          "windowed Jain's index and service lag")


def q2_answer(r: Report) -> Answer:
    """Q2: each learner's held-out J (today's = 1) and its verdict."""
    learners = r.q2.learners
    weights = "/".join(f"{v:g}" for v in r.q2.reference.weights.values())
    parts = []
    verdicts = []
    for name, le in learners.items():
        o = le.overall["learned"]
        verdicts.append(o.verdict)
        parts.append(f"{name} J = {fmt_ci(o.J, 3, n=o.J.n)} (**{o.verdict}**)")
    traces = sorted({le.heldout_traces for le in learners.values()})
    lead = ("Yes" if "beats" in verdicts else
            "Not better" if set(verdicts) <= {"tie", "worse"} and "tie" in verdicts else "No")
    sentence = (f"{lead}: on {_span([float(t) for t in traces], lambda x: fmt(x, 0))} "
                f"held-out traces never trained on, the learned weights give "
                f"{'; '.join(parts)}, where today's {weights} is J = {fmt(1.0, 0)} and lower "
                "is better.")
    return Answer(question="Q2: can weights learned offline from the decision logs beat "
                           f"{weights}?",
                  sentence=sentence, figure=r.plots.q2,
                  caption="Q2 learning curves: J per step, best so far, today's weights and "
                          "the weights shipped")


def q3_answer(r: Report) -> Answer:
    """Q3: what ranking on predictions does to mean response and Jain's index (the best
    predicted policy per workload), and the model's error and latency."""
    q3 = r.q3
    base = q3.baseline
    d_resp: list[float] = []
    d_jain: list[float] = []
    best_of: dict[str, str] = {}
    quiet: list[str] = []
    mae: list[float] = []
    latency: list[float] = []
    for w, b in q3.workloads.items():
        pol = b.policies
        if b.predictor.mae_vs_best_baseline_pct is not None:
            mae.append(b.predictor.mae_vs_best_baseline_pct)
        latency.append(b.predictor.latency_us.p50)
        moves = [abs(x.d_mean_response_pct) for x in pol.values()
                 if x.d_mean_response_pct is not None]
        if not moves or max(moves) < QUIET_PCT:
            quiet.append(w)
            continue
        focus = [x for x in q3.focus if x in pol and pol[x].mean_response_s is not None]
        if not focus:
            continue
        best = min(focus, key=lambda x: (pol[x].mean_response_s or 0.0, x))
        best_of[w] = best
        row = pol[best]
        if row.d_mean_response_pct is not None:
            d_resp.append(row.d_mean_response_pct)
        if row.d_jain is not None:
            d_jain.append(row.d_jain)
    question = ("Q3: can a small, fast model of task duration make ranking better, and what "
                "does that do to fairness?")
    model = ""
    if mae:
        model = (f"The model's mean absolute error differs from the best baseline "
                 f"predictor's by {_span(mae, pct)}, at {_span(latency, lambda x: fmt(x))} µs "
                 "per prediction (p50); ")
    if not d_resp:
        sentence = model + "no predicted-duration policy ran on a part where ranking matters."
    else:
        policies = sorted(set(best_of.values()))
        sentence = (
            f"{model}ranking on its predictions ({_names(policies)}, the fastest per "
            f"workload) changes mean response time by {_span(d_resp, pct)} against `{base}` "
            f"and Jain's index by {_span(d_jain, lambda x: fmt(x, 3, sign=True))}"
            + (f"; on {_names(quiet)} no policy moves mean response by {fmt(QUIET_PCT, 0)} %"
               " (nothing queues long enough to rank)" if quiet else "") + ".")
    return Answer(question=question, sentence=sentence, figure=r.plots.pareto,
                  caption="mean response time against Jain's index and max service lag, "
                          "every policy on the held-out part of each workload")


def deploy_answer(r: Report) -> Answer:
    """Which policy to deploy: the judge's recommendation, how it stands against the other
    candidates (ties named), and whether any candidate meets every criterion everywhere."""
    question = "Which policy to deploy?"
    d = r.deploy
    if d is None:
        return Answer(question=question, figure=None, caption="",
                      sentence="This report has no judge run (`desched judge`).")
    if d.recommendation is None:
        return Answer(question=question, figure=r.plots.deploy, caption="",
                      sentence="No recommendation: no candidate was judged.")
    everywhere = (f"{_names(d.all_pass)} meets every criterion on every workload"
                  if d.all_pass else "no candidate meets every criterion on every workload")
    default = ("it is the service's default with a duration model" if
               d.deployed_default == d.recommendation else
               f"the service's default with a duration model is still `{d.deployed_default}`")
    sentence = (f"`{d.recommendation}`: it passes {fmt(d.recommendation_passed, 0)} of "
                f"{fmt(d.recommendation_criteria, 0)} criteria over the judge's workloads "
                f"({_names([*d.logs, *d.scenarios])}), {standing(d)}; "
                f"{everywhere}; {default}.")
    return Answer(question=question, sentence=sentence, figure=r.plots.deploy,
                  caption=f"each tenant's bounded slowdown over `{d.today}`'s, per real log, "
                          "with the judge's bound")


ANSWERS: tuple[Callable[[Report], Answer], ...] = (q1_answer, q2_answer, q3_answer,
                                                   deploy_answer)


def answers(r: Report) -> list[Answer]:
    """The first page's four answers, in order."""
    return [answer(r) for answer in ANSWERS]


def answers_section(r: Report) -> list[str]:
    """The first page: each question, its one sentence and its figure."""
    lines = ["## Answers", ""]
    for a in answers(r):
        lines += [f"### {a.question}", "", a.sentence, ""]
        if a.figure:
            lines += [f"![{a.caption}]({a.figure})", ""]
    return lines
