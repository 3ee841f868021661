"""The line ``desched live-demo --keep`` prints to stop what it left running, run by ``sh``
on stand-ins: workers that take half a second to stop, and a service that notes when it is
told to stop. (The real processes: ``test_live_demo.py``.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from desched.cli.live import stop_line

STAND_IN = """
import signal, sys, time
from pathlib import Path
name, delay_s = sys.argv[1], float(sys.argv[2])
def stop(*_):
    Path(name + ".told").write_text(repr(time.time()))
    time.sleep(delay_s)
    Path(name + ".ended").write_text(repr(time.time()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
Path(name + ".ready").touch()
while True:
    time.sleep(0.05)
"""


def stand_in(folder: Path, name: str, delay_s: float) -> int:
    """The pid of a stand-in in its own session whose parent has exited, as the children
    of ``live-demo --keep`` are once it ends (so nothing here leaves it a zombie)."""
    launch = ("import subprocess, sys; print(subprocess.Popen(sys.argv[1:], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, "
              "start_new_session=True).pid)")
    out = subprocess.run([sys.executable, "-c", launch, sys.executable, "-c", STAND_IN, name,
                          str(delay_s)], cwd=folder, capture_output=True, text=True, check=True)
    return int(out.stdout)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_stop_line_ends_the_workers_before_it_tells_the_service_and_server(
    tmp_path: Path,
) -> None:
    workers = [stand_in(tmp_path, f"worker-{k}", 0.5) for k in range(2)]
    others = [stand_in(tmp_path, name, 0.0) for name in ("service", "server")]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"{n}.ready").exists()
                      for n in ("worker-0", "worker-1", "service", "server")):
            assert time.monotonic() < deadline, "the stand-ins did not start"
            time.sleep(0.05)
        subprocess.run(stop_line(workers, others), shell=True, check=True, timeout=60)

        def at(name: str) -> float:
            return float((tmp_path / name).read_text())

        deadline = time.monotonic() + 10
        while not all((tmp_path / f"{n}.ended").exists() for n in ("service", "server")):
            assert time.monotonic() < deadline, "the service and server were not told to stop"
            time.sleep(0.05)
        last_worker_ended = max(at("worker-0.ended"), at("worker-1.ended"))
        assert last_worker_ended <= min(at("service.told"), at("server.told"))
        assert at("service.told") - last_worker_ended < 5.0  # it waited for them, not for 30 s
    finally:
        for pid in [*workers, *others]:
            if not gone(pid):
                os.killpg(pid, signal.SIGKILL)
