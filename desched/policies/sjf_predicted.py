"""``sjf-predicted``: shortest predicted duration first."""

from __future__ import annotations

from desched.policies.sjf_oracle import ShortestColumnFirst, ShortestColumnFirstNaive


class SjfPredictedNaive(ShortestColumnFirstNaive):
    """Reference for ``sjf-predicted``."""

    name = "sjf-predicted"
    summary = "shortest predicted duration first, non-preemptive"
    column = "predicted_s"
    reads = frozenset({"predicted_s"})


class SjfPredicted(ShortestColumnFirst):
    """Shortest predicted duration first, non-preemptive (SJF on a duration model).

    Rule: the smallest ``(predicted_s, submit_s, position)`` wins; ``sjf-oracle`` is the
    same rule on the true ``duration_s``, so the gap between the two measures what
    prediction error costs (DESIGN.md, question 3). State: none per tenant. Cost: O(log n)
    per push and pop. Score logged: the winner's ``predicted_s``.
    """

    name = "sjf-predicted"
    summary = SjfPredictedNaive.summary
    column = SjfPredictedNaive.column
    reads = SjfPredictedNaive.reads
    naive = SjfPredictedNaive
