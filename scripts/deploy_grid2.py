"""Research harness of docs/deploy-policy-research.md (step 3): the full search grid on six logs + steady/flood (noise 0.5), LOLO with no-harm."""
import json

import numpy as np

from desched.metrics import RunArrays, summarize
from desched.policies import get_policy, make_policy
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from scripts.deploy_eval import LOGS, criteria


def dist(c): return max(0,0.8-c['gain'])+max(0,c['p99']-1)+max(0,-c['djain'])+max(0,c['worst']-2)
SC = {}
for sc in ["steady", "flood"]:
    f = generate(sc, tasks=20000, workers=8, load=0.85, seed=1, predicted_noise=0.5)
    SC[sc] = (f, TaskTable.from_frame(f))
def scen(name, prm):
    f, t = SC[name]
    r = simulate(t, make_policy(prm[0], t, prm[1]), 8); st = np.frombuffer(r.start_s); d = f["duration_s"].to_numpy()
    s = summarize(RunArrays(f["tenant"].to_numpy(), f["submit_s"].to_numpy(), d, st, st + d), 8)
    return s.mean_response_s, s.jain_slowdown, s.max_service_lag_s
today = {sc: scen(sc, ("ifs-memoryless", None)) for sc in SC}
grid = get_policy("guarded-sjf").Params.search.grid()
res = {}
for p in grid:
    spec = f"guarded-sjf?beta={p['beta']}&a={p['a']}"
    cs = {n: criteria(n, spec) for n in LOGS}
    ok = True
    for sc in SC:
        m = scen(sc, ("guarded-sjf", {k: str(v) for k, v in p.items()}))
        t = today[sc]
        ok &= m[0] <= t[0] and m[1] >= t[1] and m[2] <= t[2]
    res[spec] = {"logs": cs, "noharm": bool(ok)}
    print(spec, "noharm", ok, "dist", round(sum(dist(c) for c in cs.values()), 3), flush=True)
with open("data/deploy/grid3.json", "w") as fh:
    json.dump(res, fh)
ok = [s for s in res if res[s]["noharm"]]
for held in LOGS:
    tr = [n for n in LOGS if n != held]
    best = min(ok, key=lambda s: sum(dist(res[s]["logs"][n]) for n in tr))
    c = res[best]["logs"][held]
    print(f"LOLO {held:13s} {best:30s} gain {c['gain']:.3f} p99 {c['p99']:.3f} dJ {c['djain']:+.3f} worst {c['worst']:.2f} dist {dist(c):.3f}")
best = min(ok, key=lambda s: sum(dist(res[s]["logs"][n]) for n in LOGS))
print("all:", best)
