"""The page as the tests build it (specviz.panels.page: nothing imports app.py), and the names of an API
answer's values: gradio_client gives them in the outputs' order, without the session state."""

from __future__ import annotations

from specviz.lab.public_policy import Policy
from specviz.panels.lab_outputs import WIDGET_FIELDS
from specviz.panels.page import Page, build_page, launch_options
from specviz.panels.page_context import PageContext
from specviz.panels.sweep_tab import SWEEP_FIELDS

CONTEXT = PageContext.of(Policy.private())


def page_for(policy: Policy | None = None, **context) -> Page:
    return build_page(PageContext.of(policy or Policy.private(), **context))


def launched(page: Page, port: int, max_size: int | None = None, **launch) -> None:
    """The page served as app.py serves it (its launch options: the door, the upload limit), on loopback."""
    options = {**launch_options(page), **launch}
    page.blocks.queue(max_size=max_size).launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True,
                                                **options)


def named(outputs, extra: tuple[str, ...] = ()) -> dict:
    """A Lab endpoint's answer (/step, /run, /go_to, ...) by the view's field names; `extra` names the outputs an
    event adds after the view (/play and /pause: ("timer",)). A count that does not match is an error, never a
    silent shift."""
    fields = (*WIDGET_FIELDS, *extra)
    if len(outputs) != len(fields):
        raise ValueError(f"{len(outputs)} values for the {len(fields)} fields {fields}")
    return dict(zip(fields, outputs))


def sweep_answer(outputs) -> dict:
    """/sweep's answer by SweepTab's field names (plot, csv_file, table, message)."""
    if len(outputs) != len(SWEEP_FIELDS):
        raise ValueError(f"{len(outputs)} values for the {len(SWEEP_FIELDS)} fields {SWEEP_FIELDS}")
    return dict(zip(SWEEP_FIELDS, outputs))


def counters_of(client) -> dict | None:
    """The live run's counters as data (/counters: dataclasses.asdict of specviz.render.counters.LabCounters, with
    "figures", "mode", "versus_ar", "last_step", ...) in the client's own session; None before a live run."""
    return client.predict(api_name="/counters")


def router_routes(routes, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(path, methods) of every route a FastAPI app's router holds (app.routes), through the routers it includes
    (FastAPI 0.165 keeps an included router whole, under its prefix) and into mounted apps (their path + "/x"), each
    path parameter as "x"."""
    import re

    from fastapi.routing import _IncludedRouter
    from starlette.routing import Mount

    found = []
    for route in routes:
        if isinstance(route, _IncludedRouter):
            found += router_routes(route.original_router.routes, prefix + route.include_context.prefix)
            continue
        path = prefix + re.sub(r"\{[^}]+\}", "x", getattr(route, "path", ""))
        if isinstance(route, Mount):
            path += "/x"
        found.append((path, sorted(getattr(route, "methods", None) or {"GET"})))
    return found
