"""The research bench: how policies are measured, tuned and reported (no Prefect import).

- ``specs``: trace and policy specs (a name and a seed become one trace, a policy to run);
- ``evaluate``: cells (trace, policy, seed), intervals over seeds, drift, ``evaluation.json``;
- ``learning``, ``tuning``, ``rl``: the objective ``J``, the split, and the two learners
  (Optuna, REINFORCE) of any policy whose parameters are learnable;
- ``weights``, ``curves``: weights cards (``card.json``) and learning-curve plots;
- ``roles``: which policies play which part, from what they declare;
- ``demo``: the end-to-end run's settings and steps; ``report``: its report.

The Prefect layer (``desched/flows/``, ``desched/tasks/``) only wraps these functions.
"""
