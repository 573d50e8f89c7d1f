"""The prompts a sweep or a static-tree study runs on: the page's own prompt (as the door parsed it), or a named
suite's items, each without its own token limit (the study's tokens per prompt rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specviz.studies.suite import SuiteItem
from specviz.errors import SpecvizError, quoted
from specviz.lab.lab_state import Settings

PAGE_PROMPT = "page prompt"


def scoped_prompts(scope, settings: Settings, suites: Mapping[str, Sequence[SuiteItem]],
                   max_prompts: int | None = None) -> list[SuiteItem]:
    """The items of scope: PAGE_PROMPT, or one of suites' names (at most max_prompts of them). SpecvizError, one
    sentence, for an unknown scope, an empty suite or one over the limit."""
    if scope == PAGE_PROMPT:
        return [SuiteItem.of(settings.model_prompt, id=PAGE_PROMPT)]
    items = suites.get(scope) if isinstance(scope, str) else None
    if items is None:
        raise SpecvizError(f"Measure on one of: {', '.join((PAGE_PROMPT, *suites))}; got {quoted(scope)}.")
    if not items:
        raise SpecvizError(f"No prompts in {scope}.")
    if max_prompts is not None and len(items) > max_prompts:
        raise SpecvizError(f"This Space measures on at most {max_prompts} prompts; {scope} has {len(items)}.")
    return [item.without_limit() for item in items]
