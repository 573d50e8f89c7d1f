"""A/B compare: overrides parsed and checked, both sides stepped, a bad side named while neither changes."""

import pytest

from specviz.errors import SpecvizError
from specviz.render.compare_view import compare_view
from specviz.lab.compare import Compare, parse_overrides, side_request
from specviz.lab.visitor_request import VisitorRequest

PROMPT = "Repeat exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta."


# ---- A/B compare -----------------------------------------------------------------------------------------------
def base_settings(**changes):
    return {"model": "", "prompt": PROMPT, "method": "racer", "budget": 8, "params": {}, "draft_model": "", "mode": "",
            "temperature": 0.0, "top_p": 1.0, "seed": 0, **changes}


def test_overrides_are_parsed_and_checked():
    assert parse_overrides("method=respec tau=3, temperature=0.8") == {"method": "respec", "tau": "3",
                                                                     "temperature": "0.8"}
    for bad, expected in [("tau", "NAME=VALUE"), ("tau=1 tau=2", "twice"), ("=3", "NAME=VALUE")]:
        with pytest.raises(SpecvizError, match=expected):
            parse_overrides(bad)
    side = side_request(VisitorRequest.of_loose(base_settings()), "method=respec tau=3")
    assert side.settings.method == "respec" and dict(side.settings.params)["tau"] == 3.0
    with pytest.raises(SpecvizError, match="has no parameter 'tau'"):
        side_request(VisitorRequest.of_loose(base_settings()), "tau=3")


def test_ab_steps_both_and_names_the_bad_side(lm):
    compare = Compare()
    compare.choose(base_settings(), "", "method=pld")
    compare.step(24)
    compare.step(24)
    a, b = compare.a.session, compare.b.session
    assert a.name == "racer" and b.name == "pld" and len(a.records) == len(b.records) == 2
    kept = (list(a.output_ids), list(b.output_ids))
    for side_a, side_b, side in [("", "budget=0", "Side B"), ("tau=3", "", "Side A"), ("", "method=nope", "Side B"),
                                 ("", "method=rapid eta=10", "Side B")]:
        with pytest.raises(SpecvizError, match=side):
            compare.choose(base_settings(), side_a, side_b)
    assert (compare.a.session.output_ids, compare.b.session.output_ids) == kept  # neither side was touched
    for _ in compare.run(24):
        pass
    view = compare_view(compare.a.session, compare.b.session, compare.message)
    assert "A: racer" in view.summary_a and "B: pld" in view.summary_b
    assert "Identical to side A" in view.diff_html  # both lossless at temperature 0
