"""``python -m desched.cli``: the same as the ``desched`` command."""

from desched.cli import main

main()
