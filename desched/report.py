"""The research bench's report: ``report.json``, ``report.md`` and PNG plots, from the results
of the demo's steps (``flows/demo.py``). Pure: no Prefect, no simulation, no training.

Every number that ``report.md`` states is formatted from a number of ``report.json``, by
``render_markdown`` reading the report dict only; ``unmatched_numbers`` checks a text against
its JSON, and the demo and its test run that check.

Definitions the text relies on (also written into ``report.json["definitions"]``):

- *small tenants* of a trace: those whose share of the total service (work) is below the fair
  share ``1 / tenants``; their *mean wait* is the mean over their tasks.
- *gap closed* by ``ifs-counter``, for a fairness measure ``m`` (max service lag, small
  tenants' mean wait) where lower is fairer:
  ``(m_memoryless - m_counter) / (m_memoryless - m_vtc)`` in %: 100 % is all of the way to
  VTC, 0 % none of it, negative is further away. Undefined (null) when VTC is not better than
  ``ifs-memoryless`` by at least 1 % of the latter (no gap to close).
- *cost*: relative change of mean response time, ``ifs-counter`` against ``ifs-memoryless``
  (and against VTC), in %.
- *Pareto*: a policy is on the front of a workload when no other policy has both a lower
  mean response time and a higher Jain's index (or a lower max service lag, for that front).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from desched.errors import DeschedError

BASELINE = "ifs-memoryless"
Q1_POLICIES: tuple[str, ...] = ("ifs-memoryless", "vtc", "ifs-counter")
Q3_FOCUS: tuple[str, ...] = ("sjf-predicted", "hrrn-predicted", "ifs-predicted", "fair-sjf")
Q3_ORDER: tuple[str, ...] = (
    "ifs-memoryless", "sjf-oracle", *Q3_FOCUS, "fifo", "round-robin", "vtc", "ifs-counter",
)
CONFIDENCE_PCT = 95
NO_GAP_FRAC = 0.01

@dataclass(frozen=True)
class ReportInputs:
    """What the plots read besides ``report.json``: Q1's run folders, per workload and policy,
    and the learning-curve PNGs the tuning wrote."""

    q1_dirs: dict[str, dict[str, str]] = field(default_factory=dict)


# ---- numbers -----------------------------------------------------------------------------


def clean_json(value: Any) -> Any:
    """``value`` with NaN and infinities as null, numpy scalars as Python, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def fmt(x: float | None, digits: int | None = None, sign: bool = False) -> str:
    """A number as the report prints it: 3 significant digits below 100, whole numbers with
    thousands separators above; ``digits`` fixes the decimals; ``-`` for a missing value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if digits is None:
        a = abs(x)
        digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    text = f"{x:,.{digits}f}"
    if sign and x > 0:
        text = "+" + text
    return text


def fmt_ci(ci: dict[str, Any] | None, digits: int | None = None) -> str:
    if not ci:
        return "-"
    half = ci.get("half")
    if half is None or not math.isfinite(half):
        return fmt(ci.get("mean"), digits)
    return f"{fmt(ci['mean'], digits)} ± {fmt(half, digits)}"


_NUMBER = re.compile(r"(?<![A-Za-z_\d.])([+-]?)(\d[\d,]*(?:\.\d+)?)")


def numbers_in_markdown(text: str) -> list[str]:
    """Numeric tokens of a markdown text outside code spans, code blocks and link targets;
    a token glued to a word before it (``p99``, ``t00``, ``Q1``) is part of a name."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return [sign + digits for sign, digits in _NUMBER.findall(text)]


def json_numbers(value: Any) -> list[float]:
    """Every number of a JSON value (booleans excluded), recursively."""
    out: list[float] = []
    if isinstance(value, dict):
        for v in value.values():
            out.extend(json_numbers(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(json_numbers(v))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(float(value))
    return out


def unmatched_numbers(markdown: str, report: dict[str, Any]) -> list[str]:
    """The numeric tokens of ``markdown`` that no number of ``report`` rounds to, at the
    token's own precision and with its sign (``6,286`` matches 6285.7; ``0.872`` matches
    0.8724; ``-12`` does not match 12)."""
    values = np.asarray(sorted(set(json_numbers(report))), dtype=np.float64)
    missing = []
    for token in numbers_in_markdown(markdown):
        plain = token.replace(",", "")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        x = float(plain)
        tol = 0.5 * 10.0 ** (-decimals) + 1e-9
        if not np.any(np.abs(values - x) <= tol * (1 + 1e-9)):
            missing.append(token)
    return missing


# ---- the questions -----------------------------------------------------------------------


def small_tenants(summary: dict[str, Any]) -> list[str]:
    """Tenants whose share of all service is below the fair share ``1 / tenants``."""
    per = summary["per_tenant"]
    total = sum(t["service_s"] for t in per.values())
    fair = total / max(1, len(per))
    return sorted(name for name, t in per.items() if t["service_s"] < fair)


def tenants_mean_wait(summary: dict[str, Any], tenants: Iterable[str]) -> float:
    per = summary["per_tenant"]
    chosen = [per[t] for t in tenants if t in per]
    n = sum(t["tasks"] for t in chosen)
    return sum(t["mean_wait_s"] * t["tasks"] for t in chosen) / n if n else math.nan


def gap_closed_pct(memoryless: float, counter: float, vtc: float) -> float | None:
    """``100 * (memoryless - counter) / (memoryless - vtc)``, or None with no gap to close."""
    gap = memoryless - vtc
    if not (math.isfinite(gap) and gap > NO_GAP_FRAC * abs(memoryless)):
        return None
    return 100.0 * (memoryless - counter) / gap


def pct_change(new: float, old: float) -> float | None:
    return 100.0 * (new - old) / old if old else None


def headline(summary: dict[str, Any], small: Sequence[str]) -> dict[str, Any]:
    """The figures a policy row of the report shows, from a run summary."""
    from desched.evaluate import window_drift

    drift = window_drift(summary.get("windows", []))
    return {
        "mean_response_s": summary["mean_response_s"],
        "p99_response_s": summary["p99_response_s"],
        "mean_wait_s": summary["mean_wait_s"],
        "mean_bounded_slowdown": summary["mean_bounded_slowdown"],
        "jain_slowdown": summary["jain_slowdown"],
        "window_jain_min": drift["window_jain_min"],
        "window_jain_mean": drift["window_jain_mean"],
        "max_service_lag_s": summary["max_service_lag_s"],
        "window_lag_mean_s": drift["window_lag_mean_s"],
        "small_tenants_mean_wait_s": tenants_mean_wait(summary, small),
        "utilization": summary["utilization"],
    }


def q1_workload(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Q1 for one workload: the policy rows, the gap the counter closes and what it costs."""
    small = small_tenants(summaries[BASELINE])
    rows = {p: headline(summaries[p], small) for p in Q1_POLICIES}
    mem, vtc, ctr = rows["ifs-memoryless"], rows["vtc"], rows["ifs-counter"]
    return {
        "small_tenants": small,
        "small_tenants_n": len(small),
        "tenants_n": len(summaries[BASELINE]["per_tenant"]),
        "policies": rows,
        "gap_closed_pct": {
            "max_service_lag": gap_closed_pct(mem["max_service_lag_s"],
                                              ctr["max_service_lag_s"], vtc["max_service_lag_s"]),
            "small_tenants_mean_wait": gap_closed_pct(
                mem["small_tenants_mean_wait_s"], ctr["small_tenants_mean_wait_s"],
                vtc["small_tenants_mean_wait_s"]),
            "window_lag_mean": gap_closed_pct(mem["window_lag_mean_s"], ctr["window_lag_mean_s"],
                                              vtc["window_lag_mean_s"]),
        },
        "cost_pct": {
            "mean_response_vs_memoryless": pct_change(ctr["mean_response_s"],
                                                      mem["mean_response_s"]),
            "mean_response_vs_vtc": pct_change(ctr["mean_response_s"], vtc["mean_response_s"]),
            "vtc_mean_response_vs_memoryless": pct_change(vtc["mean_response_s"],
                                                          mem["mean_response_s"]),
            "p99_response_vs_memoryless": pct_change(ctr["p99_response_s"],
                                                     mem["p99_response_s"]),
        },
    }


def q1_over_seeds(rows: Sequence[dict[str, Any]],
                  label: Callable[[str], str] = str) -> dict[str, Any]:
    """Aggregated evaluation rows (``desched.evaluate.aggregate``) by workload and policy,
    with the lag gap the counter closes from the means over seeds."""
    out: dict[str, Any] = {}
    for r in rows:
        w = out.setdefault(label(r["trace"]), {"spec": r["trace"], "seeds": r["seeds"],
                                              "policies": {}})
        w["policies"][r["policy"]] = {
            m: {k: r["metrics"][m][k] for k in ("mean", "half", "lo", "hi", "n")}
            for m in ("mean_response_s", "p99_response_s", "jain_slowdown", "window_jain_min",
                      "max_service_lag_s", "window_lag_mean_s", "mean_bounded_slowdown")
        }
        if "vs_baseline" in r:
            w["policies"][r["policy"]]["d_mean_response_s"] = {
                k: r["vs_baseline"]["mean_response_s"][k] for k in ("mean", "half", "lo", "hi")}
    for w in out.values():
        p = w["policies"]
        if all(k in p for k in Q1_POLICIES):
            lag = {k: p[k]["max_service_lag_s"]["mean"] for k in Q1_POLICIES}
            resp = {k: p[k]["mean_response_s"]["mean"] for k in Q1_POLICIES}
            w["gap_closed_pct"] = {"max_service_lag": gap_closed_pct(
                lag["ifs-memoryless"], lag["ifs-counter"], lag["vtc"])}
            w["cost_pct"] = {"mean_response_vs_memoryless": pct_change(
                resp["ifs-counter"], resp["ifs-memoryless"])}
    return out


def q2_learner(card: dict[str, Any], label: Callable[[str], str] = str) -> dict[str, Any]:
    """Q2 for one learner, from its weights card (``desched.tuning.make_card``)."""

    def brief(s: dict[str, Any]) -> dict[str, Any]:
        return {
            "seeds": len(s["seeds"]),
            "J": s["J"], "d_bsld_pct": s["d_bsld_pct"], "d_jain": s["d_jain"],
            "d_max_lag_s": s["d_max_lag_s"], "verdict": s["verdict"],
        }

    curve = card["learning_curve"]
    return {
        "policy": card["policy"],
        "weights": card["weights"],
        "train_objective": card["train_objective"],
        "learner_seconds": card["learner_seconds"],
        "steps": len(curve),
        "first_value": curve[0]["value"] if curve else None,
        "best_value": min(p["best"] for p in curve) if curve else None,
        "curve": [{"step": p["step"], "value": p["value"], "best": p["best"]} for p in curve],
        "heldout": {label(w): {c: brief(s) for c, s in per.items()}
                    for w, per in card["heldout"]["by_workload"].items()},
        "overall": {c: brief(s) for c, s in card["heldout"]["overall"].items()},
        "train_traces": len(card["split"]["train"]),
        "heldout_traces": len(card["split"]["heldout"]),
    }


def tenant_effects(
    summaries: dict[str, dict[str, Any]], durations: dict[str, float], policy: str
) -> dict[str, Any]:
    """How ``policy`` changes each tenant's mean slowdown against ``ifs-memoryless``, split by
    the tenant's mean task duration (short: at or below the median over tenants)."""
    base = summaries[BASELINE]["per_tenant"]
    mine = summaries[policy]["per_tenant"]
    median = float(np.median(list(durations.values())))
    ratio = {t: mine[t]["mean_slowdown"] / base[t]["mean_slowdown"]
             for t in base if t in mine and base[t]["mean_slowdown"] > 0}
    short = [t for t in ratio if durations[t] <= median]
    long = [t for t in ratio if durations[t] > median]

    def count(ts: list[str], better: bool) -> int:
        return sum(1 for t in ts if (ratio[t] < 0.95 if better else ratio[t] > 1.05))

    order = sorted(ratio, key=lambda t: (ratio[t], t))
    return {
        "median_tenant_duration_s": median,
        "short_tenants": len(short), "long_tenants": len(long),
        "short_better": count(short, True), "short_worse": count(short, False),
        "long_better": count(long, True), "long_worse": count(long, False),
        "short_median_ratio": float(np.median([ratio[t] for t in short])) if short else None,
        "long_median_ratio": float(np.median([ratio[t] for t in long])) if long else None,
        "most_helped": [{"tenant": t, "slowdown_ratio": ratio[t],
                         "mean_duration_s": durations[t]} for t in order[:3]],
        "most_hurt": [{"tenant": t, "slowdown_ratio": ratio[t],
                       "mean_duration_s": durations[t]} for t in order[::-1][:3]],
    }


def q3_workload(train: dict[str, Any], sims: dict[str, Any]) -> dict[str, Any]:
    """Q3 for one workload: the predictor against its baselines, its latency, every policy on
    the held-out part, and the tenants that ranking on predictions helps or hurts."""
    summaries = sims["summaries"]
    small = small_tenants(summaries[BASELINE])
    policies = {p: headline(s, small) for p, s in summaries.items()}
    mem = policies[BASELINE]
    for row in policies.values():
        row["d_mean_response_pct"] = pct_change(row["mean_response_s"], mem["mean_response_s"])
        row["d_p99_response_pct"] = pct_change(row["p99_response_s"], mem["p99_response_s"])
        row["d_jain"] = row["jain_slowdown"] - mem["jain_slowdown"]
    best_baseline = min(
        (k for k in train["heldout"] if k != "model"), key=lambda k: train["heldout"][k]["mae_s"])
    model_mae = train["heldout"]["model"]["mae_s"]
    return {
        "predictor": {
            "version": train["version"], "objective": train["objective"],
            "train_rows": train["train_rows"], "heldout_rows": train["heldout_rows"],
            "train_frac_pct": 100.0 * train["train_frac"],
            "heldout": train["heldout"], "card_test": train["card_test"],
            "best_baseline": best_baseline,
            "mae_vs_best_baseline_pct": pct_change(model_mae,
                                                   train["heldout"][best_baseline]["mae_s"]),
            "latency_us": train["latency_us"], "booster_latency_us": train["booster_latency_us"],
            "training_time_s": train["training_time_s"],
            "compile_time_s": train["compile_time_s"],
        },
        "workers": sims["workers"],
        "tasks": sims["tasks"],
        "policies": policies,
        "tenants": {p: tenant_effects(summaries, sims["tenant_durations"], p)
                    for p in Q3_FOCUS if p in summaries},
    }


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


CLAIRVOYANT = frozenset({"sjf-oracle"})
"""Policies that read the true duration: bounds to compare with, never on a front to run."""


def pareto_points(q3: dict[str, Any]) -> list[dict[str, Any]]:
    """One point per (workload, policy) of Q3's held-out runs, with both front memberships
    among the policies one can run (the clairvoyant bound is shown, never on a front)."""
    out = []
    for w, block in q3.items():
        names = [p for p in block["policies"] if p not in CLAIRVOYANT]
        rows = [block["policies"][p] for p in names]
        jain = pareto_flags([(r["mean_response_s"], -r["jain_slowdown"]) for r in rows])
        lag = pareto_flags([(r["mean_response_s"], r["max_service_lag_s"]) for r in rows])
        flags = {p: (fj, fl) for p, fj, fl in zip(names, jain, lag)}
        for p, r in block["policies"].items():
            fj, fl = flags.get(p, (False, False))
            out.append({"workload": w, "policy": p, "mean_response_s": r["mean_response_s"],
                        "jain_slowdown": r["jain_slowdown"],
                        "max_service_lag_s": r["max_service_lag_s"],
                        "clairvoyant": p in CLAIRVOYANT, "pareto_jain": fj, "pareto_lag": fl})
    return out


def build_report(
    *,
    run: str,
    mode: str,
    created: str,
    settings: dict[str, Any],
    workloads: dict[str, dict[str, Any]],
    ingestion: dict[str, Any],
    q1_runs: dict[str, dict[str, dict[str, Any]]],
    q1_eval_rows: Sequence[dict[str, Any]],
    q2_cards: dict[str, dict[str, Any]],
    spec_label: Callable[[str], str] = str,
    q3_train: dict[str, dict[str, Any]],
    q3_sims: dict[str, dict[str, Any]],
    timing: dict[str, Any],
    commands: dict[str, str],
) -> dict[str, Any]:
    """``report.json``: every figure of every question (module docstring for definitions)."""
    q1 = {w: q1_workload(s) for w, s in q1_runs.items()}
    q3 = {w: q3_workload(q3_train[w], q3_sims[w]) for w in q3_train}
    any_card = next(iter(q2_cards.values()))
    report = {
        "schema": 1,
        "run": run,
        "mode": mode,
        "created": created,
        "confidence_pct": CONFIDENCE_PCT,
        "definitions": {k: v for k, v in DEFINITIONS.items()},
        "settings": settings,
        "workloads": workloads,
        "ingestion": ingestion,
        "q1": {"policies": list(Q1_POLICIES), "workloads": q1,
               "over_seeds": q1_over_seeds(q1_eval_rows, spec_label)},
        "q2": {"objective": any_card["objective"], "reference": any_card["reference"],
               "learners": {name: q2_learner(c, spec_label) for name, c in q2_cards.items()}},
        "q3": {"focus": list(Q3_FOCUS), "workloads": q3},
        "pareto": {"points": pareto_points(q3)},
        "timing": timing,
        "commands": commands,
        "plots": {},
    }
    report["plots"] = {
        "q1": {w: f"q1-{w}.png" for w in q1},
        "q2": "q2-learning-curves.png",
        "q3": "q3-tenants.png",
        "pareto": "pareto.png",
    }
    return clean_json(report)  # type: ignore[no-any-return]


DEFINITIONS = {
    "small_tenants": "tenants whose share of all service is below the fair share 1/tenants",
    "gap_closed_pct": "100 * (m_memoryless - m_counter) / (m_memoryless - m_vtc); null when "
                      "vtc is not better than ifs-memoryless by at least 1 % (no gap)",
    "cost_pct": "100 * (mean_response_counter - mean_response_other) / mean_response_other",
    "jain_slowdown": "Jain's index over per-tenant mean slowdown (1 = equal)",
    "max_service_lag_s": "largest service lag between two tenants backlogged throughout a "
                         "window (VTC's measure); windows are the submission span / 20",
    "pareto": "no other policy has both lower mean response time and better fairness",
    "thresholds": {"tenant_change_pct": 5.0, "no_gap_pct": 100.0 * NO_GAP_FRAC},
    "J": "mean bounded slowdown / that of ifs-memoryless 0.1/0.9 on the same trace + "
         "fairness_weight * max(0, Jain_ref - Jain); 1 = today's scorer, lower is better",
}


# ---- the text ----------------------------------------------------------------------------


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{fmt(x, 1, sign=True)} %"


def _gap(x: float | None) -> str:
    return "no gap" if x is None else f"{fmt(x, 1)} %"


def q1_gap_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload: gaps closed and costs (the Q1 table artifact)."""
    rows = []
    for w, b in report["q1"]["workloads"].items():
        rows.append({"workload": w, **{f"gap_closed_{k}_pct": v
                                       for k, v in b["gap_closed_pct"].items()},
                     **{f"cost_{k}_pct": v for k, v in b["cost_pct"].items()}})
    return rows


def _closes(x: float | None, what: str) -> str:
    if x is None:
        return f"nothing in {what} (there is no gap: `vtc` is not lower)"
    return f"{fmt(x, 1)} % in {what}"


def _findings(r: dict[str, Any]) -> list[str]:
    out = []
    for w, b in r["q1"]["workloads"].items():
        g, c = b["gap_closed_pct"], b["cost_pct"]
        out.append(
            f"**Q1, {w}:** of the gap between `ifs-memoryless` and `vtc`, `ifs-counter` closes "
            f"{_closes(g['max_service_lag'], 'max service lag')} and "
            f"{_closes(g['small_tenants_mean_wait'], 'small tenants’ mean wait')}, for "
            f"{_pct(c['mean_response_vs_memoryless'])} mean response time.")
    for name, le in r["q2"]["learners"].items():
        o = le["overall"]["learned"]
        out.append(
            f"**Q2, {name}:** learned weights give J = {fmt_ci(o['J'], 3)} on "
            f"{le['heldout_traces']} held-out traces (today's = {fmt(1.0, 0)}), "
            f"bounded slowdown {fmt_ci(o['d_bsld_pct'], 1)} %: **{o['verdict']}**.")
    for w, b in r["q3"]["workloads"].items():
        p = b["predictor"]
        pol = b["policies"]
        focus = [x for x in r["q3"]["focus"] if x in pol]
        best = min(focus, key=lambda x: pol[x]["mean_response_s"])
        out.append(
            f"**Q3, {w}:** the model's MAE is {fmt(p['heldout']['model']['mae_s'])} s against "
            f"{fmt(p['heldout'][p['best_baseline']]['mae_s'])} s for the best baseline "
            f"(`{p['best_baseline']}`), {fmt(p['latency_us']['p50'])} µs per prediction; "
            f"`{best}` has mean response {fmt(pol[best]['mean_response_s'])} s against "
            f"{fmt(pol[BASELINE]['mean_response_s'])} s (`ifs-memoryless`) and "
            f"{fmt(pol['sjf-oracle']['mean_response_s'])} s (`sjf-oracle`), Jain's index "
            f"{fmt(pol[best]['jain_slowdown'], 3)} against {fmt(pol[BASELINE]['jain_slowdown'], 3)}.")
    return out


def render_markdown(r: dict[str, Any]) -> str:
    """``report.md`` from ``report.json`` alone."""
    t = r["timing"]
    lines = [
        f"# desched report `{r['run']}`",
        "",
        (f"Mode **{r['mode']}**, created `{r['created']}`; the demo ran for "
        f"{fmt(t['total_s'], 0)} s (load average at the end "
        f"{', '.join(fmt(x, 2) for x in t['load_average'])} on {fmt(t['cpus'], 0)} CPUs). "
        "Every number here is in `report.json`."),
        "",
        "## Headline findings",
        "",
        *[f"- {f}" for f in _findings(r)],
        "",
        "## Workloads",
        "",
        ("Real logs: a user is a tenant and a job one task on one worker; the worker count is "
        "the one whose offered load (total work / submission span / workers) is closest to "
        f"the target {fmt(r['settings']['target_load'], 2)}. `ifs-counter`'s half-life is "
        f"{fmt(r['settings']['counter_memory_tasks'], 0)} mean task durations of the workload "
        "(its default on the DES scenarios)."),
        "",
    ]
    rows = []
    for w, info in r["workloads"].items():
        rows.append([w, f"`{info['source']}`", fmt(info["tasks"], 0), fmt(info["tenants"], 0),
                     fmt(info["workers"], 0), fmt(info["offered_load"], 3),
                     fmt(info["span_h"], 1), fmt(info["mean_duration_s"]),
                     fmt(info["counter_params"]["half_life_s"])])
    lines += _table(["workload", "source", "tasks", "tenants", "workers", "offered load",
                     "span h", "mean duration s", "ifs-counter half-life s"], rows)
    ing = r["ingestion"]
    lines += [
        "",
        (f"The baseline's decision logs were ingested into DuckDB: {fmt(ing['files_read'], 0)} "
        f"files, {fmt(ing['decisions_loaded'], 0)} decisions and "
        f"{fmt(ing['completions_loaded'], 0)} completions loaded, "
        f"{fmt(ing['rows_quarantined'], 0)} rows quarantined."),
        "",
        "## Q1: memoryless scoring against one counter",
        "",
        ("Small tenants: those below the fair share of service. Gap closed: "
        "`(m_memoryless - m_counter) / (m_memoryless - m_vtc)`, for the max service lag and "
        "for the small tenants' mean wait; cost: the change of mean response time."),
        "",
    ]
    head = ["policy", "mean resp s", "p99 resp s", "small tenants' wait s", "Jain",
            "min window Jain", "max lag s", "mean window lag s"]
    for w, b in r["q1"]["workloads"].items():
        lines += [(f"### {w} ({fmt(b['small_tenants_n'], 0)} small tenants of "
                  f"{fmt(b['tenants_n'], 0)})"), ""]
        lines += _table(head, ([p, fmt(x["mean_response_s"]), fmt(x["p99_response_s"]),
                                fmt(x["small_tenants_mean_wait_s"]), fmt(x["jain_slowdown"], 3),
                                fmt(x["window_jain_min"], 3), fmt(x["max_service_lag_s"]),
                                fmt(x["window_lag_mean_s"])]
                               for p, x in b["policies"].items()))
        lines += ["", f"![Q1 {w}]({r['plots']['q1'][w]})", ""]
    lines += ["### Gap closed and cost, per workload", ""]
    lines += _table(
        ["workload", "max lag gap closed", "small tenants' wait gap closed",
         "mean resp vs memoryless", "mean resp vs vtc", "p99 resp vs memoryless"],
        ([w, _gap(b["gap_closed_pct"]["max_service_lag"]),
          _gap(b["gap_closed_pct"]["small_tenants_mean_wait"]),
          _pct(b["cost_pct"]["mean_response_vs_memoryless"]),
          _pct(b["cost_pct"]["mean_response_vs_vtc"]),
          _pct(b["cost_pct"]["p99_response_vs_memoryless"])]
         for w, b in r["q1"]["workloads"].items()))
    seeds = r["q1"]["over_seeds"]
    if seeds:
        lines += ["", "### Over seeds", "",
                  (f"Mean ± half-width of the {fmt(r['confidence_pct'], 0)} % t-interval over "
                  "regenerated scenarios and disjoint slices of the logs (smaller traces)."), ""]
        rows = []
        for w, b in seeds.items():
            for p, m in b["policies"].items():
                rows.append([w, p, fmt(len(b["seeds"]), 0), fmt_ci(m["mean_response_s"]),
                             fmt_ci(m["jain_slowdown"], 3), fmt_ci(m["window_jain_min"], 3),
                             fmt_ci(m["max_service_lag_s"])])
        lines += _table(["workload", "policy", "seeds", "mean resp s", "Jain",
                         "min window Jain", "max lag s"], rows)
        gaps = [[w, _gap(b["gap_closed_pct"]["max_service_lag"]),
                 _pct(b["cost_pct"]["mean_response_vs_memoryless"])]
                for w, b in seeds.items() if "gap_closed_pct" in b]
        if gaps:
            lines += ["", "From the means over seeds:", ""]
            lines += _table(["workload", "max lag gap closed", "mean resp vs memoryless"], gaps)

    q2 = r["q2"]
    lines += ["", "## Q2: learned weights against 0.1 / 0.9", "",
              (f"Objective: `{q2['objective']['text']}`. Held-out traces were never trained on "
              "(other seeds of the scenarios, later slices of the LANL log, slices of the "
              "Atlas log). Verdict `beats` when the interval of J lies below today's."), ""]
    for name, le in q2["learners"].items():
        w = ", ".join(f"{k} = {fmt(v, 3)}" for k, v in le["weights"].items())
        lines += [f"### {name}", "",
                  (f"Learned static weights: {w}; training objective "
                  f"{fmt(le['train_objective'], 3)} after {fmt(le['steps'], 0)} steps "
                  f"(first {fmt(le['first_value'], 3)}, best {fmt(le['best_value'], 3)}), "
                  f"{fmt(le['learner_seconds'], 0)} s."), ""]
        rows = []
        for wl, per in {**le["heldout"], "all held-out": le["overall"]}.items():
            for cand, s in per.items():
                rows.append([wl, cand, fmt(s["seeds"], 0), fmt_ci(s["J"], 3),
                             fmt_ci(s["d_bsld_pct"], 1), fmt_ci(s["d_jain"], 3),
                             s["verdict"]])
        lines += _table(["held-out workload", "candidate", "traces", "J", "Δ bsld %",
                         "Δ Jain", "verdict"], rows)
        lines += [""]
    lines += [f"![Q2 learning curves]({r['plots']['q2']})", ""]

    lines += ["## Q3: predicted duration", "",
              ("Each model learns from the first part of its trace (time order) and predicts "
               "the rest; a held-out task's tenant-history features come only from tasks that "
               "had ended, under today's scorer, before it was submitted. Policies then run on "
               "the held-out part alone."), ""]
    for w, b in r["q3"]["workloads"].items():
        p = b["predictor"]
        lines += [f"### {w}", "",
                  (f"Trained on the first {fmt(p['train_frac_pct'], 0)} % of the trace "
                  f"({fmt(p['train_rows'], 0)} validated completion records from the "
                  f"warehouse), objective `{p['objective']}`; scored and simulated on the "
                  f"other {fmt(p['heldout_rows'], 0)} tasks, never trained on. Latency per "
                  f"prediction (compiled forest): p50 {fmt(p['latency_us']['p50'])} µs, p99 "
                  f"{fmt(p['latency_us']['p99'])} µs; LightGBM's own single-row predict: p50 "
                  f"{fmt(p['booster_latency_us']['p50'])} µs."), ""]
        lines += _table(["predictor (held-out part)", "MAE s", "MdAPE %", "Spearman"],
                        ([k, fmt(v["mae_s"]), fmt(v["mdape_pct"], 1), fmt(v["spearman"], 3)]
                         for k, v in p["heldout"].items()))
        lines += ["", f"On {fmt(b['tasks'], 0)} held-out tasks, {fmt(b['workers'], 0)} workers:",
                  ""]
        lines += _table(
            ["policy", "mean resp s", "p99 resp s", "Δ mean resp", "Jain", "Δ Jain",
             "max lag s", "small tenants' wait s"],
            ([name, fmt(x["mean_response_s"]), fmt(x["p99_response_s"]),
              _pct(x["d_mean_response_pct"]), fmt(x["jain_slowdown"], 3),
              fmt(x["d_jain"], 3, sign=True), fmt(x["max_service_lag_s"]),
              fmt(x["small_tenants_mean_wait_s"])]
             for name, x in b["policies"].items()))
        lines += ["", ("Which tenants: mean slowdown against `ifs-memoryless`, tenants split at "
                  "the median of their mean task duration (better/worse: by more than 5 %)."), ""]
        lines += _table(
            ["policy", "short tenants better", "short worse", "long better", "long worse",
             "median ratio short", "median ratio long", "most hurt"],
            ([name, fmt(e["short_better"], 0), fmt(e["short_worse"], 0),
              fmt(e["long_better"], 0), fmt(e["long_worse"], 0),
              fmt(e["short_median_ratio"], 3), fmt(e["long_median_ratio"], 3),
              ", ".join(f"`{h['tenant']}` {fmt(h['slowdown_ratio'], 3)}"
                        for h in e["most_hurt"][:2])]
             for name, e in b["tenants"].items()))
        lines += [""]
    lines += [f"![Q3 tenants]({r['plots']['q3']})", ""]

    lines += ["## Which policy to run: mean response against fairness", "",
              ("Every policy on the held-out part of each Q3 workload; on the front, no other "
              "policy has both a lower mean response time and a higher Jain's index; "
              "`sjf-oracle` (clairvoyant) is drawn as the bound, never on the front."), "",
              f"![Pareto]({r['plots']['pareto']})", ""]
    front = [pt for pt in r["pareto"]["points"] if pt["pareto_jain"]]
    lines += _table(["workload", "policy on the front", "mean resp s", "Jain", "max lag s",
                     "also on the lag front"],
                    ([pt["workload"], pt["policy"], fmt(pt["mean_response_s"]),
                      fmt(pt["jain_slowdown"], 3), fmt(pt["max_service_lag_s"]),
                      "yes" if pt["pareto_lag"] else "no"] for pt in front))
    lines += ["", "## Rerun", "", "```sh", *r["commands"].values(), "```", ""]
    steps = t.get("steps", {})
    if steps:
        lines += ["Time per step (s): " + ", ".join(f"{k} {fmt(v, 1)}" for k, v in steps.items())
                  + ".", ""]
    return "\n".join(lines)


# ---- plots -------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_q1(dirs: dict[str, str], report_q1: dict[str, Any], title: str, out: Path) -> Path:
    """Per policy: mean wait per time bin (top) and share of service started per bin (middle)
    of the largest tenants and the rest; bottom: windowed Jain's index and service lag."""
    import polars as pl

    plt = _plt()
    frames = {p: pl.read_parquet(Path(d) / "tasks.parquet",
                                 columns=["tenant", "submit_s", "start_s", "duration_s",
                                          "wait_s"]) for p, d in dirs.items()}
    base = frames[BASELINE]
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
        summary = json.loads((Path(d) / "summary.json").read_text())
        ws = summary["windows"]
        x = [w["start_s"] / scale for w in ws]
        ax_j.plot(x, [w["jain_slowdown"] for w in ws], ".-", label=policy)
        ax_l.plot(x, [w["service_lag_s"] for w in ws], ".-", label=policy)
    ax_j.set_ylabel("windowed Jain's index")
    ax_l.set_ylabel("service lag per window (s)")
    for ax in (ax_j, ax_l):
        ax.set_xlabel(f"window start ({unit})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for col in range(2, len(frames)):
        axes[2, col].axis("off")
    if len(frames) > 2:
        gap = report_q1["gap_closed_pct"]
        text = (f"gap closed (max lag): {_gap(gap['max_service_lag'])}\n"
                f"gap closed (small tenants' wait): {_gap(gap['small_tenants_mean_wait'])}\n"
                f"mean response vs memoryless: "
                f"{_pct(report_q1['cost_pct']['mean_response_vs_memoryless'])}")
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


def plot_learning_curves(learners: dict[str, Any], out: Path) -> Path:
    """One panel per learner of Q2: its learning curve (``desched.tuning.draw_curve``)."""
    from desched.tuning import draw_curve, step_label

    plt = _plt()
    fig, axes = plt.subplots(1, len(learners), figsize=(5.5 * len(learners), 3.2), squeeze=False)
    for ax, (name, le) in zip(axes[0], learners.items()):
        draw_curve(ax, le["curve"], step_label(name), legend_fontsize=7)
        ax.set_title(f"{name}", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_q3_tenants(q3: dict[str, Any], durations: dict[str, dict[str, float]],
                    per_tenant: dict[str, dict[str, dict[str, float]]], out: Path) -> Path:
    """Per Q3 workload: each tenant's mean slowdown under a predicted-duration policy over
    that under ``ifs-memoryless``, against the tenant's mean task duration."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plt = _plt()
    fig, axes = plt.subplots(1, len(q3), figsize=(4.6 * len(q3), 3.6), squeeze=False)
    for ax, w in zip(axes[0], q3):
        d = durations[w]
        base = per_tenant[w][BASELINE]
        for i, p in enumerate(Q3_FOCUS):
            if p not in per_tenant[w]:
                continue
            ts = [t for t in base if t in per_tenant[w][p] and base[t] > 0]
            ax.scatter([d[t] for t in ts], [per_tenant[w][p][t] / base[t] for t in ts], s=10,
                       alpha=0.7, color=f"C{i}", label=p)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tenant's mean task duration (s)")
        ax.set_ylabel("mean slowdown / ifs-memoryless's")
        ax.set_title(w, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_pareto(points: Sequence[dict[str, Any]], out: Path) -> Path:
    plt = _plt()
    workloads = list(dict.fromkeys(p["workload"] for p in points))
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.6 * len(workloads), 7.0),
                             squeeze=False)
    for col, w in enumerate(workloads):
        pts = [p for p in points if p["workload"] == w]
        for row, (key, flag, label) in enumerate(
                [("jain_slowdown", "pareto_jain", "Jain's index (higher is fairer)"),
                 ("max_service_lag_s", "pareto_lag", "max service lag s (lower is fairer)")]):
            ax = axes[row, col]
            for p in pts:
                on = p[flag]
                ax.scatter(p[key], p["mean_response_s"], s=40 if on else 18, zorder=3,
                           marker="*" if p["clairvoyant"] else "o",
                           color="C3" if on else "C0" if p["clairvoyant"] else "0.5")
                ax.annotate(p["policy"].replace(" weights)", ")"), (p[key], p["mean_response_s"]),
                            fontsize=6, xytext=(3, 2), textcoords="offset points")
            front = sorted((p[key], p["mean_response_s"]) for p in pts if p[flag])
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


def write_report(report: dict[str, Any], inputs: ReportInputs, out_dir: str | Path,
                 q3_extra: dict[str, Any] | None = None) -> Path:
    """Write ``report.json``, ``report.md`` and the plots; refuse a text that states a number
    the JSON lacks. Returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = report["plots"]
    for w, dirs in inputs.q1_dirs.items():
        plot_q1(dirs, report["q1"]["workloads"][w], f"Q1 on {w}: per-tenant wait and service "
                "share over time", out / plots["q1"][w])
    plot_learning_curves(report["q2"]["learners"], out / plots["q2"])
    if q3_extra:
        plot_q3_tenants(report["q3"]["workloads"], q3_extra["durations"],
                        q3_extra["per_tenant"], out / plots["q3"])
    plot_pareto(report["pareto"]["points"], out / plots["pareto"])
    text = render_markdown(report)
    missing = unmatched_numbers(text, report)
    if missing:
        raise DeschedError(f"report.md states numbers absent from report.json: "
                           f"{', '.join(missing[:10])}")
    (out / "report.json").write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    (out / "report.md").write_text(text)
    return out


def markdown_with_inline_images(folder: Path) -> str:
    """``report.md`` with its PNGs inlined as data URLs (for a Prefect markdown artifact)."""
    text = (folder / "report.md").read_text()

    def inline(m: re.Match[str]) -> str:
        path = folder / m.group(2)
        if not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode()
        return f"![{m.group(1)}](data:image/png;base64,{data})"

    return re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, text)
