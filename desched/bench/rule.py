"""The recommendation rule of the deployment judge, written down before the run (issue 19).

Among the candidates (never today's scorer, never a clairvoyant policy or point):

1. **Gain floor.** A candidate whose gain is below ``gain_floor`` (0.1) of the oracle's on any
   judged log where the frontier gain reaches the floor is never recommended (on a log where
   no clairvoyant policy of the family gains 0.1 safely, the floor would contradict the
   promises, so it is not applied there).
2. **Promises first.** The most workloads where every promise holds (a log: the three
   promises of ``desched.bench.frontier``; a DES scenario: no harm to mean response, Jain's
   index, max service lag), then the most promise criteria kept in all.
3. **Then the frontier share.** The highest *smallest* frontier share over the logs where it
   is defined (issue 19's target is a share ≥ 0.8 on every log).
4. **Ties are ties.** Candidates equal on step 2 whose smallest shares differ by at most
   ``share_tie`` (0.01) are tied; the result lists them all. The one named as the
   recommendation (the service needs one) is the tied candidate with the highest mean share,
   then the first in the candidates' order, and the reason says it is a tie.

No candidate past the floor: no recommendation (the service then keeps today's scorer). Nor
is one recommended that beats today's mean response on none of the judged logs (gain ≤ 0, or
undefined where the oracle itself does not beat today): on a log where no clairvoyant policy
gains the floor, step 1 does not apply, and without this a policy that only reorders would
be named, or a tie of policies that gain nothing. (Added after issue 19's runs, for such
logs; no verdict on the bundled logs changed: every candidate gains there.)
The same ranking (``rank_key``) chooses a leave-one-log-out grid point
(``desched.bench.lolo``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from desched.bench.verdicts import PROMISES, Thresholds, Verdict, promise_checks
from desched.records import Record

__all__ = ["PROMISES", "Standing", "promise_checks", "rank_key", "recommend", "standing", "tied"]


class Standing(Record):
    """One candidate's figures under the rule (module docstring)."""

    spec: str
    workloads: int
    all_kept: int
    promises_kept: int
    promises: int
    min_share: float | None
    mean_share: float | None
    below_floor: list[str]
    gains: bool = True
    """Whether it beats today's mean response on some judged log (module docstring)."""

    @property
    def eligible(self) -> bool:
        return not self.below_floor and self.gains


def standing(spec: str, verdicts: Sequence[Verdict], th: Thresholds) -> Standing:
    """The figures of candidate ``spec`` over its ``verdicts`` (others are ignored)."""
    mine = [v for v in verdicts if v.policy == spec]
    checks = [promise_checks(v) for v in mine]
    shares = [s for v in mine if v.kind == "log"
              and (s := v.criteria["frontier_share"].value) is not None]
    below = [v.workload for v in mine if v.kind == "log"
             and (gain := v.criteria["gain"].value) is not None and gain < th.gain_floor
             and (v.frontier_gain is None or v.frontier_gain >= th.gain_floor)]
    return Standing(spec=spec, workloads=len(mine), all_kept=sum(all(c) for c in checks),
                    promises_kept=sum(sum(c) for c in checks),
                    promises=sum(len(c) for c in checks),
                    min_share=min(shares) if shares else None,
                    mean_share=sum(shares) / len(shares) if shares else None,
                    below_floor=below,
                    gains=any((gain := v.criteria["gain"].value) is not None and gain > 0
                              for v in mine if v.kind == "log"))


def rank_key(s: Standing) -> tuple[int, int, float]:
    """Larger is better: workloads with every promise kept, promises kept, smallest share."""
    return (s.all_kept, s.promises_kept, -math.inf if s.min_share is None else s.min_share)


def tied(a: Standing, b: Standing, th: Thresholds) -> bool:
    """Whether ``a`` and ``b`` are tied under the rule (step 4)."""
    if rank_key(a)[:2] != rank_key(b)[:2]:
        return False
    if a.min_share is None or b.min_share is None:
        return a.min_share is None and b.min_share is None
    return abs(a.min_share - b.min_share) <= th.share_tie + 1e-12


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def recommend(verdicts: Sequence[Verdict], candidates: Sequence[str], th: Thresholds,
              ) -> tuple[str | None, list[str], str, list[Standing]]:
    """The rule of the module docstring: the recommendation (or ``None``), every candidate
    tied with it (itself included; one element when there is no tie), the reason, and every
    candidate's standing, best first (candidates below the floor last)."""
    from desched.bench.roles import clairvoyant
    from desched.policies import WITHOUT_PREDICTION

    order = {spec: i for i, spec in enumerate(candidates)}
    rows = [standing(spec, verdicts, th) for spec in candidates
            if spec.partition("?")[0] != WITHOUT_PREDICTION
            and not clairvoyant(spec.partition("?")[0])
            and any(v.policy == spec for v in verdicts)]
    if not rows:
        return None, [], "no candidate policy was judged", []
    rows.sort(key=lambda s: (not s.eligible, tuple(-x for x in rank_key(s)),
                             -(s.mean_share if s.mean_share is not None else -math.inf),
                             order[s.spec]))
    eligible = [s for s in rows if s.eligible]
    if not eligible:
        if not any(s.gains for s in rows):
            return None, [], ("no candidate beats today's mean response on any judged log: "
                              "keep today's scorer"), rows
        worst = ", ".join(f"{s.spec} ({', '.join(s.below_floor) or 'gains on no log'})"
                          for s in rows)
        return None, [], (f"every candidate gains less than {th.gain_floor} of the oracle's "
                          f"gain on some log, or on no log: {worst}"), rows
    tie = [s for s in eligible if tied(s, eligible[0], th)]
    best = min(tie, key=lambda s: (-(s.mean_share if s.mean_share is not None else -math.inf),
                                   order[s.spec]))
    group = [s.spec for s in tie]
    kept = (f"keeps every promise on {best.all_kept} of {best.workloads} workloads"
            if best.all_kept else f"keeps every promise on none of the {best.workloads} "
            "workloads, as no candidate does, and the most promises")
    reason = (f"{best.spec} {kept} ({best.promises_kept} of {best.promises} promises), "
              f"smallest frontier share {_share(best.min_share)}, mean "
              f"{_share(best.mean_share)}")
    if len(group) > 1:
        others = ", ".join(g for g in group if g != best.spec)
        reason += (f"; TIE with {others} (same promises, smallest shares within "
                   f"{th.share_tie}): named first by the higher mean share")
    return best.spec, group, reason, rows
