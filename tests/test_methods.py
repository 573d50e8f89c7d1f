"""What methods promise: lossless or not, for their parameters and the temperature; and the registry's
parameters, one widget per name, so that no two methods may declare one name differently."""

import pytest

from specviz.methods import METHODS, get_method
from specviz.params import Param


def test_methods_declare_whether_they_are_lossless():
    respec = get_method("respec")
    assert respec.lossless(respec.resolve_params({}), 0.0)
    assert not respec.lossless(respec.resolve_params({"tau": 3}), 0.0)
    assert respec.lossless(respec.resolve_params({"tau": 3}), 0.8)  # relaxation is a greedy rule
    assert {"reader", "unified"} <= set(METHODS)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_registered_method_is_lossless_at_its_defaults(method):
    spec = get_method(method)
    assert spec.name == method and spec.summary
    for temperature in (0.0, 0.8):
        assert spec.lossless(spec.resolve_params({}), temperature), (method, temperature)
    assert {p.name for p in spec.params} >= set(spec.state_only)  # a test's fixed choices are its own parameters


def declared_differently(methods) -> list[str]:
    """Each parameter name two methods declare with different defaults, ranges, kinds or choices."""
    first: dict[str, tuple[str, Param]] = {}
    clashes = []
    for method in methods:
        for p in method.params:
            owner, seen = first.setdefault(p.name, (method.name, p))
            if (seen.default, seen.low, seen.high, seen.kind, seen.choices) != (p.default, p.low, p.high, p.kind,
                                                                                 p.choices):
                clashes.append(f"{p.name}: {owner} and {method.name}")
    return clashes


def test_a_parameter_name_means_one_thing_across_methods():
    """The page makes one widget per name (lab.visitor_request.PARAMS): a name is declared once, shared on purpose."""
    assert declared_differently(METHODS.values()) == []


def test_the_clash_check_can_fail():
    class A:
        name, params = "a", [Param("depth", 4, 1, 8)]

    class B:
        name, params = "b", [Param("depth", 6, 1, 8)]

    assert declared_differently([A, B]) == ["depth: a and b"]
