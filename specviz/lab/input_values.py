"""Values from a visitor, of any JSON type: a text, a whole number in a range, a checkbox, a method parameter's
scalar. Each is refused with one sentence that names what is wanted and quotes (briefly) what came."""

from __future__ import annotations

from specviz.errors import SpecvizError, quoted
from specviz.params import finite_number

MAX_TOKENS_PRIVATE = 1 << 20  # new tokens with no policy limit: the model's context ends a run first


def text_value(name: str, value, limit: int | None = None) -> str:
    """A text input: None is blank; anything but a string is refused (a list, a number, an object)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecvizError(f"{name} must be text, got {type(value).__name__}.")
    if limit is not None and len(value) > limit:
        raise SpecvizError(f"{name} is {len(value):,} characters long; at most {limit:,} are accepted.")
    return value


def whole_number(name: str, value, low: int, high: int) -> int:
    """A whole number in [low, high] from a slider, a text box or JSON: "nan", "inf", 1e400, 2.5, True, a list
    are each refused with the range."""
    wanted = f"a whole number between {low:,} and {high:,}"
    number = finite_number(name, value, wanted)
    if number != int(number) or not low <= number <= high:
        raise SpecvizError(f"{name} must be {wanted}, got {quoted(value)}.")
    return int(number)


def number_in(name: str, value, low: float, high: float) -> float:
    """A finite number in [low, high] (a slider's value)."""
    wanted = f"a number between {low:g} and {high:g}"
    number = finite_number(name, value, wanted)
    if not low <= number <= high:
        raise SpecvizError(f"{name} must be {wanted}, got {quoted(value)}.")
    return number


def flag(name: str, value) -> bool:
    """A checkbox: a boolean (JSON true/false, or 0/1); anything else is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise SpecvizError(f"{name} must be true or false, got {quoted(value)}.")


def scalar(name: str, value):
    """A method parameter as sent: one number, boolean or short text (the method's Param checks its range)."""
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 100):
        return value
    raise SpecvizError(f"{name} must be one number or a short word, got {quoted(value)}.")
