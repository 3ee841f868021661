"""Research harness of docs/deploy-policy-research.md (step 1): per SWF log, train on first 70 % (by submit), predict last 30 % (rebased), cache."""
import time
from pathlib import Path

import numpy as np
import polars as pl

from desched.bench.demo import workers_for
from desched.models.features import feature_matrix, with_history
from desched.models.training import TrainSettings, train
from desched.swf import import_swf
from desched.trace import write_trace

OUT = Path("data/deploy"); OUT.mkdir(parents=True, exist_ok=True)
for path in sorted(Path("data/samples/traces").glob("*.swf.gz")):
    name = path.name.split("-")[0] + "-" + path.name.split("-")[1]
    dst = OUT / f"{name}.parquet"
    if dst.exists():
        continue
    t0 = time.time()
    frame, _ = import_swf(path)
    frame = frame.rename({"status": "swf_status"}).sort("submit_s", maintain_order=True)
    n = frame.height; cut = round(n * 0.7)
    head, tail = frame[:cut], frame[cut:]
    res = train(head, TrainSettings(num_threads=1), source=name)
    test = with_history(tail)
    x = feature_matrix(test, res.spec)
    pred = np.maximum(res.model.predict_s(x), 1e-6)
    cols = [pl.Series("predicted_s", pred)]
    for k, m in res.quantile_models.items():
        cols.append(pl.Series(f"predicted_{k}_s", np.maximum(m.predict_s(x), 1e-6)))
    out = tail.with_columns(cols).with_columns(pl.col("submit_s") - float(tail["submit_s"].min()))
    out = out.drop([c for c in out.columns if c.startswith("hist")], strict=False)
    write_trace(out, dst)
    w = workers_for(out, 0.9)
    print(name, n, out.height, "workers", w, "obj", res.objective, f"{time.time()-t0:.0f}s", flush=True)
