"""Each paper's configuration one click away (no model): the values are the papers', each is a valid setting
of its method, our default is every parameter's default, and the panel names what our default changes."""

import pytest

from specviz.methods import METHODS
from specviz.ui.paper_settings import PAPERS, paper_settings, paper_settings_markdown, widget_values

DEFAULTS = {p.name: p.default for m in METHODS.values() for p in m.params}


def test_the_papers_own_settings():
    racer = widget_values("racer", "paper", DEFAULTS)
    assert {k: racer[k] for k in ("budget", "warm_table", "draft_ahead", "min_path_prob", "max_breadth", "capacity",
                                  "ngram_length")} == {"budget": 64, "warm_table": 0, "draft_ahead": 0, "min_path_prob": 0.0,
                                                       "max_breadth": 8, "capacity": 10000, "ngram_length": 10}
    respec = widget_values("respec", "paper", DEFAULTS)
    assert respec["tau"] == 3.0 and respec["m"] == 3 and respec["budget"] == 60
    reader = widget_values("reader", "paper", DEFAULTS)
    assert isinstance(reader["budget"], int) and reader["min_path_share"] == 0.0   # fixed shape, unpruned
    rapid = widget_values("rapid", "paper", DEFAULTS)
    assert rapid["eta"] in (5.0, 10.0, 20.0) and rapid["temperature"] > 0 and rapid["gamma"] == 10
    assert paper_settings("racer-logits") is PAPERS["racer"]  # the ablations take RACER's
    assert paper_settings("unified") is None and paper_settings("ar") is None


@pytest.mark.parametrize("method", sorted(PAPERS))
def test_both_configurations_are_valid_settings_of_the_method(method):
    spec = METHODS[method]
    for which in ("paper", "ours"):
        values = widget_values(method, which, DEFAULTS)
        params = {p.name: values[p.name] for p in spec.params}
        spec.resolve_params(params)  # a SpecvizError if the combination is refused
        assert values["budget"] == "auto" or 1 <= values["budget"] <= 256
    ours = widget_values(method, "ours", DEFAULTS)
    assert ours["budget"] == "auto" and ours["temperature"] == 0.0
    assert all(ours[p.name] == p.default for p in spec.params)  # our tuned default is the parameters' defaults
    for change in PAPERS[method].changes:  # every change is real, and the panel names it
        assert change.paper != change.ours
        assert f"`{change.name}` {change.ours} (paper {change.paper})" in paper_settings_markdown(method)


def test_the_panel_for_methods_without_a_paper():
    assert "no paper of its own" in paper_settings_markdown("unified")
