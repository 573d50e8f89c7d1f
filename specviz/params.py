"""Hyperparameters as the app shows them: a name, a default, a range, and one clear error for bad values."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specviz.errors import SpecvizError, quoted


def finite_number(name: str, value, wanted: str) -> float:
    """A finite float from a user's value of any JSON type, or a SpecvizError that says what was wanted: "nan",
    "inf", 1e400, True, a list or an object are each refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecvizError(f"{name} must be {wanted}, got {quoted(value)}.")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecvizError(f"{name} must be {wanted}, got {quoted(value)}.") from None
    if not math.isfinite(number):
        raise SpecvizError(f"{name} must be {wanted}, got {quoted(value)}.")
    return number


@dataclass(frozen=True)
class Param:
    name: str
    default: float | int
    low: float | int
    high: float | int
    kind: type = int          # int, float, or str (then one of choices)
    help: str = ""
    choices: tuple = ()

    def coerce(self, value) -> float | int | str:
        """Parse and range-check one value (from a slider, a dropdown, a CLI string or JSON)."""
        if self.kind is str:
            text = str(value).strip()
            if text not in self.choices:
                raise SpecvizError(f"{self.name} must be one of {', '.join(self.choices)}, got {quoted(value)}.")
            return text
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise SpecvizError(f"{self.name} must be a number, got {quoted(value)}.") from None
        if isinstance(value, bool) or not math.isfinite(number):  # "nan", "inf", 1e400: no number of a range
            raise SpecvizError(f"{self.name} must be a number between {self.low} and {self.high}, got {quoted(value)}.")
        if self.kind is int:
            if number != int(number):
                raise SpecvizError(f"{self.name} must be a whole number, got {quoted(value)}.")
            number = int(number)
        if not self.low <= number <= self.high:
            raise SpecvizError(f"{self.name} must be between {self.low} and {self.high}, got {quoted(value)}.")
        return number


def resolve(specs: list[Param], overrides: dict | None, method: str) -> dict:
    """Defaults overridden by the user's values; an unknown name is an error that lists the known ones."""
    by_name = {p.name: p for p in specs}
    values = {p.name: p.default for p in specs}
    for name, value in (overrides or {}).items():
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise SpecvizError(f"Method '{method}' has no parameter '{name}' (it has: {known}).")
        values[name] = by_name[name].coerce(value)
    return values


def parse_assignments(pairs: list[str] | None) -> dict:
    """CLI --param NAME=VALUE pairs into a dict (values are checked later, against the method)."""
    parsed = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise SpecvizError(f"--param takes NAME=VALUE, got {quoted(pair, 80)}.")
        parsed[name.strip()] = value.strip()
    return parsed
