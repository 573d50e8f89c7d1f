"""specviz: an interactive lab for speculative decoding with draft trees."""

from specviz.errors import SpecvizError

__all__ = ["SpecvizError"]
