"""Progress of long commands on stderr: on a terminal, a bar with the elapsed time and an
estimate of the time left (tqdm); piped or redirected, no bar at all, so logs and captured
output stay clean. Results always go to stdout."""

from __future__ import annotations

import sys
from typing import Any


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (a bar is drawn only then)."""
    return sys.stderr.isatty()


def bar(total: int, desc: str, unit: str = "step") -> Any:
    """A tqdm bar of ``total`` units on stderr, disabled unless stderr is a terminal; its
    ``[elapsed<left]`` is the estimate of time left at the rate so far."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr,
                disable=not stderr_is_terminal(), leave=False, mininterval=0.5,
                dynamic_ncols=True)


class MessageBar:
    """Progress driven by messages ``"<item>: <what>"`` (the judge's): a bar over ``total``
    items, advanced when a message names a new item, or once per message with
    ``per_message``. Piped, each message is a line on stderr prefixed with the elapsed time,
    as before (with ``lines``, only every ``ceil(total / lines)``-th message and the last:
    about ``lines`` lines however many messages); on a terminal the message is the bar's
    postfix."""

    def __init__(self, total: int, desc: str, *, per_message: bool = False,
                 started: float | None = None, lines: int | None = None) -> None:
        import time

        self.clock = time.perf_counter
        self.started = self.clock() if started is None else started
        self.per_message = per_message
        self.bar = bar(total, desc, "item")
        self.current: str | None = None
        self.total = total
        self.every = max(1, -(-total // lines)) if lines else 1
        self.messages = 0

    def __call__(self, message: str) -> None:
        self.messages += 1
        if self.bar.disable:
            if self.messages % self.every and self.messages != self.total:
                return
            sys.stderr.write(f"[{self.clock() - self.started:6.0f} s] {message}\n")
            sys.stderr.flush()
            return
        item = message.partition(":")[0]
        if self.per_message:
            self.bar.update(1)
        elif item != self.current:
            if self.current is not None:
                self.bar.update(1)
            self.current = item
        self.bar.set_postfix_str(message[:60], refresh=False)

    def close(self) -> None:
        if not self.bar.disable and self.current is not None and not self.per_message:
            self.bar.update(1)
        self.bar.close()
