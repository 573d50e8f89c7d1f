"""The page in public mode as a server of its own, for tests that attack it from outside (tests/test_cost_fuzz.py):
the public policy, its session and queue limits, the app's launch options, and no warm-up (a test starts from a
known load). Usage: python tests/public_server.py PORT"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("SPECVIZ_HEAD_TRAINING", "off")

from app_page import launched, page_for  # noqa: E402
from specviz.lab.public_policy import Policy, enforce  # noqa: E402

if __name__ == "__main__":
    policy = Policy.for_public()
    enforce(policy)
    page = page_for(policy)
    launched(page, int(sys.argv[1]), max_size=policy.max_queue)
    print("serving", flush=True)
    while True:
        time.sleep(3600)
