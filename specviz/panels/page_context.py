"""What every panel of the page shares: the policy (what visitors may ask for), the example prompts, the suites,
the shipped traces and the limits of sessions and model events. Built once by the app and handed to each panel,
so no module keeps a policy in a global that start-up has to replace."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specviz.studies.suite import example_prompts, load_suite
from specviz.lab.public_policy import Policy
from specviz.lab.shipped_traces import shipped_traces
from specviz.methods import DEFAULT_METHOD

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
# model events at once: 2 answered 8 concurrent visitors sooner than 1 or 4 on 2 cores (README, "Many visitors")
MODEL_CONCURRENCY = int(os.environ.get("SPECVIZ_MODEL_CONCURRENCY", "2"))
SESSION_TTL_S = int(os.environ.get("SPECVIZ_SESSION_TTL", "1800"))
MODEL_QUEUE = "model"  # the concurrency group of every event that runs a model
# public mode: every other event of the page in one group of this many at once (panels.page.share_page_events)
PAGE_QUEUE = "page"
PAGE_CONCURRENCY = int(os.environ.get("SPECVIZ_PAGE_CONCURRENCY", "2"))


def _first_trace(traces: dict[str, Path]) -> str | None:
    """The trace a first visit plays: the default method on the code-rename prompt when it ships."""
    preferred = f"{DEFAULT_METHOD}-code-rename"
    return preferred if preferred in traces else next(iter(traces), None)


@dataclass(frozen=True)
class PageContext:
    policy: Policy
    examples: dict[str, str]                   # example label -> prompt text (assets/suite.jsonl)
    suites: dict[str, list]                    # "tuning suite" / "held-out suite" -> their items
    traces: dict[str, Path]                    # shipped trace name -> file (assets/traces)
    first_trace: str | None                    # the one a first visit plays
    model_concurrency: int = MODEL_CONCURRENCY  # model events running at once (one queue for every panel)
    session_ttl_s: int = SESSION_TTL_S         # a connected session's state lives this long untouched

    @property
    def model_events(self) -> dict:
        """The keyword arguments of every event that runs a model: one queue for every panel."""
        return {"concurrency_id": MODEL_QUEUE, "concurrency_limit": self.model_concurrency}

    @property
    def tuning_suite(self) -> list:
        return self.suites["tuning suite"]

    @classmethod
    def of(cls, policy: Policy, session_ttl_s: int = SESSION_TTL_S) -> "PageContext":
        traces = shipped_traces()
        return cls(policy, example_prompts(ASSETS / "suite.jsonl"),
                   {"tuning suite": load_suite(ASSETS / "suite.jsonl"),
                    "held-out suite": load_suite(ASSETS / "heldout.jsonl")},
                   traces, _first_trace(traces), session_ttl_s=session_ttl_s)
