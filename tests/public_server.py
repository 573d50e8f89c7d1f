"""The page in public mode as a server of its own, for tests that attack it from outside (tests/test_cost_fuzz.py,
tests/test_fair_share.py, tests/hostile_report.py): the public policy in force (its session, queue and share
limits), the app's launch options (the door), and no warm-up (a test starts from a known load).
Usage: python tests/public_server.py PORT; from a test: started()."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def started(log=subprocess.DEVNULL, timeout_s: float = 120) -> tuple[subprocess.Popen, str]:
    """This script run as a Space would run it (SPACE_ID set) on a free port, its output to log: the process and
    its URL once the page answers."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_app import free_port

    port = free_port()
    # the tests stand in for the Space's proxy: their X-Forwarded-For names the visitor (lab.visitor_address)
    env = {**os.environ, "SPACE_ID": "specviz/tests", "HF_HUB_OFFLINE": "1", "SPECVIZ_HEAD_TRAINING": "off",
           "SPECVIZ_TRUSTED_PROXIES": "127.0.0.1"}
    process = subprocess.Popen([sys.executable, __file__, str(port)], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read(1)
            return process, url
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the public-mode server exited with {process.returncode}") from None
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the public-mode server did not come up in {timeout_s:.0f} s")


def serve(port: int) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("SPECVIZ_HEAD_TRAINING", "off")
    from app_page import launched, page_for
    from specviz.lab.public_policy import Policy, enforce

    policy = Policy.for_public()
    enforce(policy)
    launched(page_for(policy), port, max_size=policy.max_queue)
    print("serving", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
