"""Shareable settings: the method and its hyperparameters as page-URL query parameters, and back.
Anything a URL says that we cannot use is named in a note and left at its default; nothing raises."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from specviz.accept.sampling import SamplingSettings
from specviz.errors import SpecvizError, quoted
from specviz.lab.input_values import whole_number
from specviz.methods import DEFAULT_METHOD, METHODS
from specviz.tree.budget import Budget

RUN_KEYS = ("method", "budget", "max_new_tokens", "temperature", "top_p", "seed", "example", "prompt")
MAX_PROMPT_CHARS = 20_000
MAX_NOTES = 8

if TYPE_CHECKING:
    from specviz.lab.visitor_request import VisitorRequest


def settings_from_query(query: dict[str, str], examples: dict[str, str]) -> tuple[dict, list[str]]:
    """The settings a URL's query parameters give ({name: value}, only the valid ones) and a note for each
    one ignored. Method parameters are checked against the method the URL names (or the default method)."""
    settings, notes = {}, []
    method = query.get("method", DEFAULT_METHOD)
    if method not in METHODS:
        notes.append(f"method={quoted(method)} is not a method (choose one of {', '.join(METHODS)})")
        method = DEFAULT_METHOD
    elif "method" in query:
        settings["method"] = method
    own = {p.name: p for p in METHODS[method].params}
    for key, raw in query.items():
        if key in ("method", "__theme", "view"):
            continue
        try:
            if key == "budget":
                settings["budget"] = Budget.parse(raw).setting  # the widgets' form: "auto" or the number
            elif key == "max_new_tokens":
                settings[key] = whole_number(key, raw, 1, 1024)
            elif key in ("temperature", "top_p", "seed"):
                checked = SamplingSettings.checked(**{"temperature": 0.0, "top_p": 1.0, "seed": 0, key: raw})
                settings[key] = getattr(checked, key)
            elif key == "example":
                label = next((k for k in examples if k == raw or k.endswith(f": {raw}")), None)
                if label is None:
                    raise SpecvizError("not an example prompt")
                settings["example"] = label
            elif key == "prompt":
                if len(raw) > MAX_PROMPT_CHARS:
                    raise SpecvizError(f"longer than {MAX_PROMPT_CHARS:,} characters")
                settings["prompt"] = raw
            elif key in own:
                settings[key] = METHODS[method].resolve_params({key: raw})[key]
            else:
                notes.append(f"{quoted(key)} is not a setting of {method}")
        except SpecvizError as error:  # our sentences quote what they refuse (errors.quoted): never markup
            notes.append(f"{quoted(key)}={quoted(raw)} ignored ({str(error).rstrip('.')})")
        except (ValueError, TypeError):  # another library's words may repeat the value as it came: not shown
            notes.append(f"{quoted(key)}={quoted(raw)} ignored (not a value it takes)")
    if len(notes) > MAX_NOTES:  # a link with a thousand keys gets a short message
        notes = [*notes[:MAX_NOTES], f"and {len(notes) - MAX_NOTES} more"]
    return settings, notes


def query_from_settings(method: str, budget: Budget | int | str, max_new_tokens, temperature, top_p, seed,
                        params: dict, example: str | None = None) -> str:
    """The query string that restores these settings (parameters at their default are left out)."""
    query = {"method": method, "budget": str(Budget.parse(budget)), "max_new_tokens": int(max_new_tokens)}
    if float(temperature):
        query.update(temperature=float(temperature), top_p=float(top_p), seed=int(seed))
    spec = METHODS.get(method)
    for p in (spec.params if spec else []):
        if p.name in params and params[p.name] != p.default and params[p.name] is not None:
            value = params[p.name]
            query[p.name] = int(value) if p.kind is int else value
    if example:
        query["example"] = example.split(": ", 1)[-1]
    return "?" + urlencode(query)


def link_for(request: "VisitorRequest", examples: dict[str, str]) -> tuple[str, bool]:
    """The query string of a checked request (the page's settings and token limit), and whether its prompt is
    one of the examples (a link names an example; any other prompt is left out of it)."""
    chosen, sampling = request.settings, request.settings.sampling
    example = next((label for label, text in examples.items() if text == chosen.prompt), None)
    return (query_from_settings(chosen.method, chosen.budget, request.max_new_tokens, sampling.temperature,
                                sampling.top_p, sampling.seed, dict(chosen.params), example), example is not None)
