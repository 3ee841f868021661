"""Research harness of docs/deploy-policy-research.md: the prototype designs (heaps, lazy deletion) registered at runtime as proto-*."""
from __future__ import annotations

import heapq
import math

import numpy as np

from desched.policies import REGISTRY
from desched.policies.base import Policy, PolicyParams


class ProtoParams(PolicyParams):
    rank: str = "p"          # p | mean | p90 | p50
    c: float = 1e9           # slack per predicted second
    a: float = 0.0           # slack in units of the running mean prediction
    k: float = 1e18          # overtake-count bound
    serve: str = "submit"    # order among overdue: submit | deadline
    sigma_cap: float = 3.0
    T: float = 0.0           # absolute slack seconds


class Proto(Policy):
    name = "proto"
    summary = "prototype"
    Params = ProtoParams
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        pred = np.asarray(tasks.predicted_s, dtype=float)
        self.pred = pred
        self.rankv = pred
        self.p50 = getattr(tasks, "p50", None)
        self.rank_heap = []
        self.dl_heap = []
        self.over = []
        self.fifo = []
        self.queued = set()
        self.arrivals = 0
        self.rank_of = {}
        self.n_sum = 0.0
        self.n_cnt = 0

    def __len__(self):
        return len(self.queued)

    def push(self, i, now):
        p = self.params
        s = self.tasks.submit_s[i]
        self.n_sum += self.pred[i]; self.n_cnt += 1
        mbar = self.n_sum / self.n_cnt
        self.rank_of[i] = self.arrivals; self.arrivals += 1
        r = self.rankv[i]
        heapq.heappush(self.rank_heap, (r, s, i))
        d = s + p.c * self.pred[i] + p.a * mbar + p.T
        heapq.heappush(self.dl_heap, (d, s, i))
        heapq.heappush(self.fifo, (s, i))
        self.queued.add(i)

    def _clean(self, h, idx):
        while h and h[0][idx] not in self.queued:
            heapq.heappop(h)

    def pop(self, now):
        p = self.params
        # deadlines passed -> overdue set
        while self.dl_heap and self.dl_heap[0][0] <= now:
            d, s, i = heapq.heappop(self.dl_heap)
            if i in self.queued:
                heapq.heappush(self.over, ((s if p.serve == "submit" else d), s, i))
        self._clean(self.over, 2)
        self._clean(self.fifo, 1)
        i = None
        if self.over:
            i = heapq.heappop(self.over)[2]
        else:
            _, o = self.fifo[0]
            overt = self.arrivals - self.rank_of[o] - len(self.queued)
            if overt >= p.k:
                i = o
        if i is None:
            self._clean(self.rank_heap, 2)
            i = heapq.heappop(self.rank_heap)[2]
        self.queued.discard(i)
        self.score = 0.0
        return i


def install(trace_frame=None):
    REGISTRY["proto"] = Proto


class Proto2Params(PolicyParams):
    beta: float = 1.5        # deadline: FCFS turn (work queued ahead at arrival) times beta
    a: float = 0.0           # plus a * running mean prediction (work units)
    serve: str = "deadline"  # order among overdue: submit | deadline
    rank: str = "p"
    tw: float = 0.0
    g: float = 0.0           # deadline floor: g * max queued work seen at any arrival so far
    q: float = 1.0           # decay of the max per arrival (1: none)
    mix: float = 0.0         # clock unit = (1-mix) * pred + mix * mean pred (1: count clock)


class Proto2(Policy):
    """Work-clock FCFS-turn guard + shortest predicted first."""
    name = "proto2"
    summary = "prototype2"
    Params = Proto2Params
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        self.pred = np.asarray(tasks.predicted_s, dtype=float)
        self.rankv = self.pred
        self.rank_heap = []
        self.dl_heap = []
        self.over = []
        self.queued = set()
        self.qwork = 0.0
        self.D = 0.0
        self.sum = 0.0
        self.cnt = 0
        self.dl = {}

    def __len__(self):
        return len(self.queued)

    def w(self, i):
        p = self.params
        if not hasattr(self, "wt"):
            self.wt = {}
        v = (1 - p.mix) * self.pred[i] + p.mix * 1000.0
        self.wt[i] = v
        return v

    def push(self, i, now):
        p = self.params
        s = self.tasks.submit_s[i]
        self.sum += self.pred[i]; self.cnt += 1
        pi = self.w(i)
        self.qmax = max(getattr(self, "qmax", 0.0) * p.q, self.qwork)
        d = self.D + max(p.beta * self.qwork, p.g * self.qmax) + p.a * self.sum / self.cnt
        self.qwork += pi
        heapq.heappush(self.rank_heap, (self.rankv[i], s, i))
        heapq.heappush(self.dl_heap, (d, s, i))
        self.dl[i] = d
        self.queued.add(i)

    def pop(self, now):
        p = self.params
        while self.dl_heap and self.dl_heap[0][0] <= self.D:
            d, s, i = heapq.heappop(self.dl_heap)
            if i in self.queued:
                heapq.heappush(self.over, ((s if p.serve == "submit" else d), s, i))
        while self.over and self.over[0][2] not in self.queued:
            heapq.heappop(self.over)
        if self.over:
            i = heapq.heappop(self.over)[2]
        else:
            while self.rank_heap[0][2] not in self.queued:
                heapq.heappop(self.rank_heap)
            i = heapq.heappop(self.rank_heap)[2]
        self.queued.discard(i)
        self.qwork -= self.wt[i]
        self.D += self.wt[i]
        self.score = 0.0
        return i


class Proto3Params(PolicyParams):
    beta: float = 1e9        # work-clock guard (1e9: off)
    a: float = 0.0           # guard slack in mean tasks
    d: float = 1.0           # ratio = (wait + A) / P, P = p^d * m^(1-d)
    A: float = 1.0           # A = A * P (HRRN: 1) ... + Am * m
    Am: float = 0.0
    tb: float = 0.0
    k: float = 0.0           # >0: two classes, small = p <= k * mean; small SJF first, large FCFS
    base: float = 0.0        # >0: log buckets of width base (in ln units) above k*mean, FCFS inside


class Proto3(Policy):
    """Generalised HRRN by numpy scan + work-clock guard."""
    name = "proto3"
    summary = "prototype3"
    Params = Proto3Params
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        n = len(tasks)
        self.pred = np.asarray(tasks.predicted_s, dtype=float)
        self.sub = np.asarray(tasks.submit_s, dtype=float)
        self.Aarr = np.zeros(n); self.Parr = np.ones(n); self.dl = np.zeros(n)
        self.cls_ = np.zeros(n)
        self.q = []  # queued list
        self.pos = {}
        self.qwork = 0.0; self.D = 0.0; self.sum = 0.0; self.cnt = 0

    def __len__(self):
        return len(self.q)

    def push(self, i, now):
        p = self.params
        pi = self.pred[i]
        self.sum += pi; self.cnt += 1
        m = self.sum / self.cnt
        P = pi ** p.d * m ** (1 - p.d)
        self.Parr[i] = P
        self.Aarr[i] = p.A * P + p.Am * m
        self.dl[i] = self.D + p.beta * self.qwork + p.a * m
        if p.k > 0:
            th = p.k * m
            if pi <= th:
                self.cls_[i] = -1e30 + pi  # small: by size
            elif p.base > 0:
                self.cls_[i] = math.floor(math.log(pi / th) / p.base)
            else:
                self.cls_[i] = 0.0
        self.qwork += pi
        self.pos[i] = len(self.q); self.q.append(i)

    def pop(self, now):
        p = self.params
        q = np.fromiter(self.q, dtype=np.int64, count=len(self.q))
        dl = self.dl[q]
        j = int(np.argmin(dl))
        if dl[j] <= self.D:
            # earliest deadline (ties by submit)
            i = int(q[j])
        else:
            if p.k > 0:
                o = np.lexsort((q, self.sub[q], self.cls_[q]))
                i = int(q[o[0]])
            else:
                r = (now - self.sub[q] + self.Aarr[q]) / self.Parr[q]
                i = int(q[int(np.argmax(r))])
        k = self.pos.pop(i); last = self.q.pop()
        if last != i:
            self.q[k] = last; self.pos[last] = k
        self.qwork -= self.pred[i]; self.D += self.pred[i]
        self.score = 0.0
        return i


class Proto4Params(PolicyParams):
    beta: float = 1.5
    a: float = 0.0           # extra slack in calibrated mean durations
    cal: int = 1             # calibrate predicted work by completed true/pred
    g: float = 0.0           # floor: g * running max of the FCFS-wait estimate


class Proto4(Policy):
    """Time-domain FCFS-turn guard: deadline = submit + beta * c * Q_pred / W."""
    name = "proto4"
    summary = "prototype4"
    Params = Proto4Params
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        self.pred = np.asarray(tasks.predicted_s, dtype=float)
        self.rank_heap = []; self.dl_heap = []; self.queued = set()
        self.qwork = 0.0; self.busy = 0; self.wmax = 1
        self.ct = 0.0; self.cp = 0.0; self.sum = 0.0; self.cnt = 0; self.vmax = 0.0

    def __len__(self):
        return len(self.queued)

    def complete(self, i, now, duration_s):
        self.busy -= 1
        self.ct += duration_s; self.cp += self.pred[i]

    def push(self, i, now):
        p = self.params
        s = self.tasks.submit_s[i]
        c = (self.ct / self.cp) if (p.cal and self.cp > 0) else 1.0
        self.sum += self.pred[i]; self.cnt += 1
        v = c * self.qwork / self.wmax
        self.vmax = max(self.vmax, v)
        d = s + max(p.beta * v, p.g * self.vmax) + p.a * c * self.sum / self.cnt
        self.qwork += self.pred[i]
        heapq.heappush(self.rank_heap, (self.pred[i], s, i))
        heapq.heappush(self.dl_heap, (d, s, i))
        self.queued.add(i)

    def pop(self, now):
        while self.dl_heap[0][2] not in self.queued:
            heapq.heappop(self.dl_heap)
        if self.dl_heap[0][0] <= now:
            i = heapq.heappop(self.dl_heap)[2]
        else:
            while self.rank_heap[0][2] not in self.queued:
                heapq.heappop(self.rank_heap)
            i = heapq.heappop(self.rank_heap)[2]
        self.queued.discard(i)
        self.qwork -= self.pred[i]
        self.busy += 1
        self.wmax = max(self.wmax, self.busy)
        self.score = 0.0
        return i


class Proto5Params(Proto2Params):
    cal: float = 0.0     # EWMA weight of a tenant's log(true/pred) per completion (0: off)
    capr: float = 3.0    # cap |log r|
    guardcal: int = 0    # also scale the guard's work by r


class Proto5(Proto2):
    """guarded-sjf with per-tenant online calibration of predictions (frozen at push)."""
    name = "proto5"
    Params = Proto5Params

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        self.logr = {}

    def complete(self, i, now, duration_s):
        p = self.params
        k = self.tasks.tenant[i]
        x = math.log(max(duration_s, 1.0) / max(self.pred[i], 1.0))
        r = self.logr.get(k, 0.0)
        self.logr[k] = r + p.cal * (x - r)

    def push(self, i, now):
        p = self.params
        k = self.tasks.tenant[i]
        lr = max(-p.capr, min(p.capr, self.logr.get(k, 0.0)))
        self.rankv = self.rankv if isinstance(self.rankv, dict) else {}
        self.rankv[i] = self.pred[i] * math.exp(lr)
        super().push(i, now)


class Proto6Params(PolicyParams):
    wb: float = 0.1


class Proto6(Policy):
    """ifs-memoryless picks the tenant (its oldest task's wait + backlog), SJF within it."""
    name = "proto6"
    Params = Proto6Params
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks, params=None):
        super().__init__(tasks, params)
        self.pred = np.asarray(tasks.predicted_s, dtype=float)
        self.per = {}   # tenant -> (fifo heap, sjf heap)
        self.queued = set()

    def __len__(self):
        return len(self.queued)

    def push(self, i, now):
        k = self.tasks.tenant[i]
        f, s, _ = self.per.setdefault(k, ([], [], [0]))
        heapq.heappush(f, (self.tasks.submit_s[i], i))
        heapq.heappush(s, (self.pred[i], self.tasks.submit_s[i], i))
        self.per[k][2][0] += 1
        self.queued.add(i)

    def pop(self, now):
        best = None
        ks = [k for k, v in self.per.items() if v[2][0] > 0]
        heads = {}
        for k in ks:
            f = self.per[k][0]
            while f[0][1] not in self.queued:
                heapq.heappop(f)
            heads[k] = f[0][0]
        mb = max(self.per[k][2][0] for k in ks)
        mw = max(now - heads[k] for k in ks)
        for k in ks:
            sc = self.params.wb * self.per[k][2][0] / mb + (1 - self.params.wb) * ((now - heads[k]) / mw if mw > 0 else 0)
            key = (sc, -heads[k])
            if best is None or key > best[0]:
                best = (key, k)
        k = best[1]
        s = self.per[k][1]
        while s[0][2] not in self.queued:
            heapq.heappop(s)
        i = heapq.heappop(s)[2]
        self.queued.discard(i)
        self.per[k][2][0] -= 1
        return i
