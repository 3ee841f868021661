"""A kinetic tournament tree over response ratios, the fast path of ``hrrn-predicted``.

An item ``(submit_s, p)`` has the response ratio ``((now - submit_s) + p) / p`` at time
``now``: a line in ``now`` with slope ``1 / p``, so the order of items changes over time.
The tree answers "which item has the highest ratio now" (ties to the earlier ``submit_s``,
then the smaller item id) with the very float expression and tie-break of a brute-force
scan, without rescanning (kinetic tournaments: Basch, Guibas and Hershberger, "Data
structures for mobile data", SODA 1997; kinetic segment trees, Agarwal et al.).
"""

from __future__ import annotations

import math

_INF = math.inf
_NEG_INF = -math.inf
REL_MARGIN = 1e-9
"""Relative band around a crossing inside which a comparison is re-evaluated at every query.

A float ratio at ``now >= submit_s`` is within ``3.4e-16`` (relative) of the exact line, so
outside this band the float comparison has the sign of the exact one; the margin also
covers the rounding of the melt-time formula itself.
"""
_LO = 1.0 - REL_MARGIN
_HI = 1.0 + REL_MARGIN
_LO2 = 1.0 - 2.0 * REL_MARGIN
_HI2 = 1.0 + 2.0 * REL_MARGIN


def response_ratio(now: float, submit_s: float, p: float) -> float:
    """``(wait + p) / p`` with ``wait = now - submit_s``: the expression both paths evaluate."""
    return ((now - submit_s) + p) / p


class KineticTournament:
    """The item with the highest response ratio at a non-decreasing query time.

    Layout: a complete binary tree in arrays; leaves ``cap .. 2 cap - 1`` are item slots,
    handed out from a free list (last freed first) and doubled (O(n) rebuild) when full.
    Every internal node keeps the winner of its subtree as last evaluated and its melt time:
    the earliest time at which a comparison in its subtree may give another answer.
    Invariants: ``melt[node] <= min(melt[children])``; an empty subtree and a leaf have an
    infinite melt time; a node with ``melt > now`` holds the exact winner at ``now``.

    Certificates: two items with the same ``p`` never swap (every float operation on the
    way is monotone in ``submit_s``), so such a node never melts. Otherwise, with the winner
    ``w`` and loser ``l`` evaluated at ``now``, the comparison is certain while
    ``(1 - r) f_w(t) > (1 + r) f_l(t)`` with ``r = REL_MARGIN``; that linear condition fails
    at ``now + N / D`` with ``N = (1 - r) F_w - (1 + r) F_l`` from the float ratios at
    ``now`` and ``D = (1 + 2 r) / p_l - (1 - 2 r) / p_w`` (never if ``D <= 0``), which is
    earlier than the first possible flip of the float comparison. Inside the band
    (``N <= 0``), before an item's submission, on overflow or NaN the melt time is the next
    float after ``now``, so the node is re-evaluated at the next query.

    Cost: insert and delete mark one leaf-to-root path (O(log n)); a query repairs the
    marked and melted nodes, each in O(1), bottom-up: amortised O(log^2 n) per operation for
    lines (the kinetic tournament bound), O(log n) when no order changes.
    """

    def __init__(self, capacity: int = 16) -> None:
        cap = 1
        while cap < capacity:
            cap *= 2
        self.cap = cap
        self.win: list[int] = [-1] * (2 * cap)
        self.melt: list[float] = [_INF] * (2 * cap)
        self.submit: list[float] = [0.0] * cap
        self.pred: list[float] = [1.0] * cap
        self.item: list[int] = [-1] * cap
        self.free: list[int] = list(range(cap - 1, -1, -1))
        self.slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def __contains__(self, item: int) -> bool:
        return item in self.slot_of

    def insert(self, item: int, submit_s: float, p: float) -> None:
        """Add ``item`` (a non-negative id not in the tree) with the line ``(submit_s, p)``.

        ``p`` is finite and positive.
        """
        if not self.free:
            self._grow()
        slot = self.free.pop()
        self.slot_of[item] = slot
        self.submit[slot] = submit_s
        self.pred[slot] = p
        self.item[slot] = item
        node = self.cap + slot
        self.win[node] = slot
        self._mark(node >> 1)

    def delete(self, item: int) -> None:
        """Remove ``item``."""
        slot = self.slot_of.pop(item)
        self.item[slot] = -1
        self.free.append(slot)
        node = self.cap + slot
        self.win[node] = -1
        self._mark(node >> 1)

    def best(self, now: float) -> tuple[int, float]:
        """The winner at ``now`` (not earlier than any previous query) and its ratio.

        Precondition: the tree is not empty.
        """
        if self.melt[1] <= now:
            self._repair(now)
        slot = self.win[1]
        return self.item[slot], response_ratio(now, self.submit[slot], self.pred[slot])

    def _mark(self, node: int) -> None:
        melt = self.melt
        while node and melt[node] != _NEG_INF:
            melt[node] = _NEG_INF
            node >>= 1

    def _grow(self) -> None:
        old = self.cap
        cap = 2 * old
        self.cap = cap
        self.win = [-1] * cap + [-1] * cap
        self.win[cap : cap + old] = [slot if self.item[slot] >= 0 else -1 for slot in range(old)]
        self.melt = [_NEG_INF] * cap + [_INF] * cap
        self.melt[0] = _INF
        self.submit += [0.0] * old
        self.pred += [1.0] * old
        self.item += [-1] * old
        self.free = list(range(cap - 1, old - 1, -1))

    def _repair(self, now: float) -> None:
        """Re-evaluate every node with ``melt <= now``, children before parents."""
        win, melt = self.win, self.melt
        submit, pred, item = self.submit, self.pred, self.item
        stack = [1]
        order: list[int] = []
        while stack:
            node = stack.pop()
            order.append(node)
            left = 2 * node
            if melt[left] <= now:
                stack.append(left)
            if melt[left + 1] <= now:
                stack.append(left + 1)
        nextafter = math.nextafter
        inf, lo, hi, lo2, hi2 = _INF, _LO, _HI, _LO2, _HI2
        for node in reversed(order):
            left = 2 * node
            a = win[left]
            b = win[left + 1]
            if a < 0:
                win[node] = b
                melt[node] = melt[left + 1]
                continue
            if b < 0:
                win[node] = a
                melt[node] = melt[left]
                continue
            sa = submit[a]
            pa = pred[a]
            sb = submit[b]
            pb = pred[b]
            fa = ((now - sa) + pa) / pa
            fb = ((now - sb) + pb) / pb
            if fa > fb or (fa == fb and (sa < sb or (sa == sb and item[a] < item[b]))):
                win[node] = a
                pw = pa
                fw = fa
                pl = pb
                fl = fb
            else:
                win[node] = b
                pw = pb
                fw = fb
                pl = pa
                fl = fa
            if pw == pl:
                cert = inf
            elif now < sa or now < sb or fw == inf:
                cert = nextafter(now, inf)
            else:
                gap = lo * fw - hi * fl
                if gap > 0.0:
                    closing = hi2 / pl - lo2 / pw
                    if closing > 0.0:
                        cert = now + gap / closing
                        if not cert > now:
                            cert = nextafter(now, inf)
                    elif closing <= 0.0:
                        cert = inf
                    else:
                        cert = nextafter(now, inf)
                else:
                    cert = nextafter(now, inf)
            melt[node] = min(cert, melt[left], melt[left + 1])
