"""What methods promise: lossless or not, for their parameters and the temperature."""

from specviz.methods import METHODS, get_method


def test_methods_declare_whether_they_are_lossless():
    respec = get_method("respec")
    assert respec.lossless(respec.resolve_params({}), 0.0)
    assert not respec.lossless(respec.resolve_params({"tau": 3}), 0.0)
    assert respec.lossless(respec.resolve_params({"tau": 3}), 0.8)  # relaxation is a greedy rule
    for name in ("ar", "pld", "racer", "reader", "unified"):
        method = get_method(name)
        assert method.lossless(method.resolve_params({}), 0.0)
    assert {"reader", "unified"} <= set(METHODS)
