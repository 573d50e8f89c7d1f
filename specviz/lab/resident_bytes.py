"""What a value takes in this process's memory, for the shares that bound what a visitor holds (lab.fair_share):
a trace read from a 4 MB file holds several times that in Python objects, so a budget counted in file bytes lets
the process grow past its own. The count is sys.getsizeof of every object reachable from the value through
containers, dataclass fields and instance attributes, each object once; classes, functions, modules and enum
members are shared with the whole process and not counted (nor what they reach)."""

from __future__ import annotations

import enum
import sys
import types

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, enum.Enum)
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None))


def resident_bytes(value) -> int:
    seen: set[int] = set()
    stack = [value]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SHARED):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, _LEAVES):
            continue
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            attributes = getattr(item, "__dict__", None)
            if attributes is not None:
                stack.append(attributes)
            for cls in type(item).__mro__:
                slots = getattr(cls, "__slots__", ())
                for slot in (slots,) if isinstance(slots, str) else slots:
                    if slot not in ("__dict__", "__weakref__") and hasattr(item, slot):
                        stack.append(getattr(item, slot))
    return total
