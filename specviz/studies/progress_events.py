"""A long model call (a sweep, a static-tree study) answers a stream of progress events and ends with its
result: one reader for both, so that neither needs a tagged tuple."""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from specviz.errors import SpecvizError

Result = TypeVar("Result")
Progress = TypeVar("Progress")


def final_result(events: Iterable[object], progress_type: type[Progress], result_type: type[Result], what: str,
                 progress: Callable[[Progress], None] | None = None) -> Result:
    """The result_type event that ends events, handing each progress_type event to progress on the way.
    TypeError for an event of another type; SpecvizError when the events end without a result ("The {what}
    ended without a result.")."""
    result = None
    for event in events:
        if isinstance(event, progress_type):
            if progress is not None:
                progress(event)
        elif isinstance(event, result_type):
            result = event
        else:
            raise TypeError(f"a {what} reports {progress_type.__name__} and {result_type.__name__}, not "
                            f"{type(event).__name__}")
    if result is None:
        raise SpecvizError(f"The {what} ended without a result.")
    return result
