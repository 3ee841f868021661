"""Research harness of docs/deploy-policy-research.md (step 2): the four criteria of issue 12 per log, for policy specs, vs ifs-memoryless."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from desched.bench.demo import workers_for
from desched.metrics import BOUNDED_SLOWDOWN_FLOOR_S, jain
from desched.simulator import simulate
from desched.trace import TaskTable, read_trace

DATA = Path("data/deploy")
CACHE = DATA / "cache"; CACHE.mkdir(parents=True, exist_ok=True)
LOGS = ["LANL-CM5", "LLNL-Atlas", "LLNL-Thunder", "NASA-iPSC", "SDSC-Par", "Sandia-Ross"]
LOAD = 0.9


def load(name):
    f = read_trace(DATA / f"{name}.parquet")
    w = workers_for(f, LOAD)
    span = float(f["submit_s"].max()); mean_s = float(f["duration_s"].mean())
    offered = f.height / span * mean_s / w
    f = f.with_columns(pl.col("submit_s") * (offered / LOAD))
    return f, w

_TRACES = {}
def trace(name):
    if name not in _TRACES:
        truth = name.endswith("@truth")
        f, w = load(name.removesuffix("@truth"))
        if truth:
            f = f.with_columns(pl.col("duration_s").alias("predicted_s"))
        _TRACES[name] = (f, TaskTable.from_frame(f), w)
    return _TRACES[name]


def run(name, spec):
    import hashlib

    from desched.policies import REGISTRY, make_policy, parse_params
    base, _, query = spec.partition("?")
    resolved = spec
    if base in REGISTRY:  # the resolved parameters, so that a changed default is not stale
        from urllib.parse import parse_qsl
        resolved += repr(parse_params(base, dict(parse_qsl(query))).model_dump())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:12]
    key = CACHE / (name + "__" + spec.replace("/", "_").replace("?", "__") + digest + ".npz")
    if key.exists() and "nocache" not in sys.argv:
        return np.load(key)["start"]
    f, tasks, w = trace(name)
    from types import SimpleNamespace
    from urllib.parse import parse_qsl
    b, _, q = spec.partition("?")
    ps = SimpleNamespace(name=b, params=tuple(parse_qsl(q)))
    if ps.name.startswith("proto"):
        from scripts import deploy_proto as dp
        prm = dict(ps.params)
        pol = {"proto": dp.Proto, "proto2": dp.Proto2, "proto3": dp.Proto3, "proto4": dp.Proto4, "proto5": dp.Proto5, "proto6": dp.Proto6}[ps.name](tasks, {"proto": dp.ProtoParams, "proto2": dp.Proto2Params, "proto3": dp.Proto3Params, "proto4": dp.Proto4Params, "proto5": dp.Proto5Params, "proto6": dp.Proto6Params}[ps.name](**prm))
        rk = prm.get("rank", "p")
        if rk != "p":
            p50 = f["predicted_p50_s"].to_numpy(); p90 = f["predicted_p90_s"].to_numpy()
            if rk == "mean":
                sig = np.clip(np.log(np.maximum(p90, p50) / p50) / 1.2816, 0, 3)
                pol.rankv = p50 * np.exp(0.5 * sig**2)
            elif rk == "p90": pol.rankv = p90
            elif rk == "p50": pol.rankv = p50
            elif rk == "meanp": 
                sig = np.clip(np.log(np.maximum(p90, p50) / p50) / 1.2816, 0, 3)
                pol.rankv = pol.pred * np.exp(0.5 * sig**2)
    else:
        pol = make_policy(ps.name, tasks, dict(ps.params))
    res = simulate(tasks, pol, w)
    start = np.frombuffer(res.start_s, dtype=np.float64).copy()
    if not spec.startswith("proto"):
        np.savez(key, start=start)
    return start


def stats(name, start):
    f, _, _ = trace(name)
    sub = f["submit_s"].to_numpy(); dur = f["duration_s"].to_numpy()
    resp = start + dur - sub
    bsd = np.maximum(1.0, resp / np.maximum(dur, BOUNDED_SLOWDOWN_FLOOR_S))
    ten = f["tenant"].to_numpy()
    df = pl.DataFrame({"t": ten, "b": bsd})
    per = df.group_by("t").agg(pl.col("b").mean().alias("m"), pl.len().alias("n")).sort("t")
    return {"mean": resp.mean(), "p99": float(np.percentile(resp, 99)),
            "jain": jain(per["m"].to_numpy()), "per": per}


def criteria(name, spec, base=None, oracle=None):
    base = base or stats(name, run(name, "ifs-memoryless"))
    oracle = oracle or stats(name, run(name, "sjf-oracle"))
    s = stats(name, run(name, spec))
    gain = (base["mean"] - s["mean"]) / (base["mean"] - oracle["mean"])
    j = base["per"].join(s["per"], on="t", suffix="_p").filter(pl.col("n") >= 10)
    worst = float((j["m_p"] / j["m"]).max())
    return {"gain": gain, "p99": s["p99"] / base["p99"], "djain": s["jain"] - base["jain"],
            "worst": worst}


def ok(c):
    return c["gain"] >= 0.8 and c["p99"] <= 1.0 + 1e-9 and c["djain"] >= -1e-9 and c["worst"] <= 2.0


def table(specs, logs=LOGS):
    rows = []
    for spec in specs:
        for name in logs:
            t0 = time.time()
            c = criteria(name, spec)
            rows.append((spec, name, c))
            print(f"{spec[:60]:60s} {name:13s} gain {c['gain']:6.3f} p99 {c['p99']:5.3f} "
                  f"dJ {c['djain']:+.3f} worst {c['worst']:5.2f} {'OK' if ok(c) else '--'} "
                  f"{time.time()-t0:4.1f}s", flush=True)
    return rows


if __name__ == "__main__":
    specs = [a for a in sys.argv[1:] if a != "nocache"]
    table(specs)
