"""The development-log judge run of ``boost-lanes`` beside ``boost-predicted``, as first run
when the candidate was a script (docs/deploy-policy.md, "What would close the gap"). The
policy is registered now (``desched.policies.boost_lanes``; its rule was committed at
``e165f36`` before any run); this runs

    desched judge --set dev --jobs 1 --policies boost-predicted,boost-lanes

with any further judge options after it, e.g.
``.venv/bin/python -m scripts.boost_lanes --out data/judge-lanes``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from desched.cli import cli

    cli.main(["judge", "--set", "dev", "--jobs", "1",
              "--policies", "boost-predicted,boost-lanes", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
