"""specviz: the Gradio app. It builds the page (specviz.panels.page) and launches it; every panel's handler checks
what a visitor sends through specviz.lab, which holds the logic, and shows it through specviz.render."""

from __future__ import annotations

import argparse
import logging
import os

try:  # ZeroGPU: `spaces` must come before anything touches CUDA (elsewhere its GPU decorator changes nothing)
    import spaces  # noqa: F401
except ImportError:
    spaces = None

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # the app works offline; it phones nobody

from specviz.lab import model_calls, startup  # noqa: E402
from specviz.lab.public_policy import Policy, enforce  # noqa: E402
from specviz.methods import DEFAULT_METHOD  # noqa: E402
from specviz.panels.page import build_page, launch_options  # noqa: E402
from specviz.panels.page_context import PageContext  # noqa: E402
from specviz.runtime.compute_thread import short_gil_turns  # noqa: E402
from specviz.runtime.placement import on_space  # noqa: E402
from specviz.runtime.shared_resources import set_model_slots  # noqa: E402
from specviz.runtime.threads import follow_cpu_quota  # noqa: E402

QUEUE_CONCURRENCY = 8  # events of any kind at once (model events have their own, lower limit)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="specviz app")
    # a Hugging Face Space (SPACE_ID set) routes traffic to 0.0.0.0; everywhere else stay on loopback
    default_host = "0.0.0.0" if on_space() else "127.0.0.1"
    parser.add_argument("--host", default=os.environ.get("SPECVIZ_HOST", default_host))
    parser.add_argument("--port", type=int, default=int(os.environ.get("SPECVIZ_PORT", "7860")))
    parser.add_argument("--public", action="store_true",
                        help="public mode (on by itself when SPACE_ID is set): an allow-list of models and limits")
    return parser.parse_args(argv)


def show_logs(level: str) -> None:
    """specviz's own log lines at level and above on stderr (INFO adds the queue's turns: panels.queue_guard)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("specviz")
    logger.addHandler(handler)
    logger.setLevel(level.upper() if level.upper() in logging.getLevelNamesMapping() else logging.WARNING)
    logger.propagate = False


def main(argv=None) -> None:
    args = parse_args(argv)
    follow_cpu_quota()  # threads from the container's CPU quota, not the host's count
    short_gil_turns()  # the compute thread gets the GIL back soon beside Gradio's own Python work
    show_logs(os.environ.get("SPECVIZ_LOG_LEVEL", "WARNING"))
    context = PageContext.of(Policy.from_environment(args.public))
    policy = context.policy
    model = policy.default_model or os.environ.get("SPECVIZ_MODEL", "")
    if model_calls.zero_gpu():  # the allowed models on cuda now, on the main thread (spaces lends the GPU per call)
        startup.place_models(list(policy.models) or [model])
    elif policy.model_slots:
        set_model_slots(policy.model_slots)
    enforce(policy)
    # the page is up at once (a shipped trace replays) while the model loads and warms up
    startup.start_in_background(model, context.examples[next(iter(context.examples))], DEFAULT_METHOD,
                                model_calls.zero_gpu())
    page = build_page(context)
    page.blocks.queue(default_concurrency_limit=QUEUE_CONCURRENCY, max_size=policy.max_queue).launch(
        server_name=args.host, server_port=args.port, **launch_options(page))


if __name__ == "__main__":
    main()
