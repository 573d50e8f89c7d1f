"""Each paper's configuration one click away (no model): the button sets what a table taken from the paper
says (section cited beside each value), each configuration is a valid setting of its method, our default
is every parameter's default, and the panel names what our default changes and what stays ours."""

import pytest

from specviz.errors import SpecvizError
from specviz.lab.paper_settings import PAPERS, paper_request, paper_settings, paper_settings_markdown
from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import PARAMS, VisitorRequest
from specviz.methods import METHODS



def page_request(method, **changes):
    """The page's settings as the door gets them: every parameter's widget sent, here moved off its default."""
    params = {p.name: p.default for p in PARAMS}
    moved = {p.name: p.high for p in PARAMS if p.choices is None and p.high != p.default}
    return VisitorRequest.of_loose({"model": "", "prompt": "Tell me about tides.", "method": method, "budget": 7,
                                    "params": {**params, **moved}, "temperature": 0.5, "top_p": 0.8, "seed": 3,
                                    **changes}, max_new_tokens=40)


def configured(method, which):
    """What the click shows: the request the paper's configuration makes of a page's settings, by name."""
    request = paper_request(page_request(method), which)
    s = request.settings
    return {**dict(s.params), "budget": s.budget.setting, "temperature": s.sampling.temperature,
            "top_p": s.sampling.top_p}

# read off the papers in ../shared/papers (the section beside each value), not off paper_settings.py
FROM_THE_PAPERS = {
    "racer": {  # *Loss & Training*: "maximum breadth of 8 ...; maximum 10,000 nodes, n-gram length of 10 ...;
                # draft capacity of 64 tokens per step. Greedy decoding"
        "budget": 64, "max_breadth": 8, "capacity": 10000, "ngram_length": 10, "temperature": 0.0,
        "warm_table": 0, "draft_ahead": 0, "min_path_prob": 0.0},
    "respec": {  # §4.1: greedy, draft size 60, lookback 3, EAGLE-2 with its defaults (top_k 10, depth 5 + 1,
                 # 60 tokens); §3.2.1: θ_entropy = 1.5; §4.3: τ ≤ 3, m ≤ 3
        "budget": 60, "temperature": 0.0, "lookback": 3, "entropy_threshold": 1.5, "fallback": "model",
        "head_breadth": 10, "head_expand": 10, "head_depth": 6, "head_nodes": 60, "tau": 3.0, "m": 3},
    "reader": {  # §4.1: EAGLE-3 tree of depth 8 and 60 tokens; Alg. 2 line 5: RankByFrequency(A ∪ B);
                 # §4.2: fixed shape; Table 2: temperature 0
        "budget": 60, "temperature": 0.0, "head_depth": 8, "head_nodes": 60, "head_breadth": 10,
        "merge": "frequency", "min_path_share": 0.0, "deepen": 1},
    "rapid": {  # §3.1: γ = 10, η ∈ {5, 10, 20}, 512-token chunks, cosine ≥ 0.3, retrieval length between
                # 4,096 and 1/24 of the input; Appendix C: temperature 1.0 (∞Bench); §2.4: speculative sampling
        "gamma": 10, "chunk_tokens": 512, "min_similarity": 0.3, "ranker": "minilm", "retrieval_budget": 4096,
        "compression": 24.0, "temperature": 1.0, "top_p": 1.0, "acceptance": "standard"},
}


@pytest.mark.parametrize("method", sorted(FROM_THE_PAPERS))
def test_the_button_sets_what_the_paper_says(method):
    values = configured(method, "paper")
    assert {k: values[k] for k in FROM_THE_PAPERS[method]} == FROM_THE_PAPERS[method]
    assert values["top_p"] == 1.0  # no paper here filters the nucleus: the button resets it
    if method == "rapid":
        assert values["eta"] in (5.0, 10.0, 20.0)
    assert paper_settings("racer-logits") is PAPERS["racer"]  # the ablations take RACER's
    assert paper_settings("unified") is None and paper_settings("ar") is None


@pytest.mark.parametrize("method", sorted(PAPERS))
def test_both_configurations_are_valid_settings_of_the_method(method):
    spec = METHODS[method]
    for which in ("paper", "ours"):
        values = configured(method, which)
        params = {p.name: values[p.name] for p in spec.params}
        spec.resolve_params(params)  # a SpecvizError if the combination is refused
        assert values["budget"] == "auto" or 1 <= values["budget"] <= 256
    ours = configured(method, "ours")
    assert ours["budget"] == "auto" and ours["temperature"] == 0.0 and ours["top_p"] == 1.0
    assert all(ours[p.name] == p.default for p in spec.params)  # our tuned default is the parameters' defaults
    panel = paper_settings_markdown(method)
    for change in PAPERS[method].changes:  # every change is real, cited, and the panel names it
        assert change.paper != change.ours and change.where
        assert f"`{change.name}` {change.ours} (paper {change.paper}, {change.where})" in panel
    for own in PAPERS[method].ours:  # what the button cannot set is listed with the paper's value beside ours
        assert f"- {own.what}: {own.ours} (paper: {own.paper})" in panel


def test_a_click_keeps_the_rest_of_the_page_and_goes_through_the_door():
    from app_page import page_for

    base = page_request("respec")
    paper = paper_request(base, "paper")
    assert paper.settings.prompt == base.settings.prompt and paper.max_new_tokens == 40
    assert paper.settings.sampling.seed == 3 and paper.settings.model == base.settings.model
    assert paper_request(page_request("unified"), "ours").settings.budget.auto  # no paper: ours either way
    # the page's button: the widgets' values through the door, then the request on the widgets
    panel = page_for(Policy.private()).settings
    widgets = {"model": "", "draft_model": "", "mode": "", "prompt": "Tell me about tides.", "method": "reader",
               "auto_budget": True, "budget": 16, "temperature": 0.7, "top_p": 0.5, "seed": 0,
               **{p.name: p.default for p in PARAMS}}
    shown = panel.on_paper_settings(None, 64, **widgets)
    assert shown[panel.auto_budget] is False and shown[panel.budget] == 60 and shown[panel.temperature] == 0.0
    assert shown[panel.top_p] == 1.0 and shown[panel.params["head_depth"]]["value"] == 8
    assert set(shown) <= set(panel.paper_outputs)
    # settings the door refuses are named in the message; no widget moves
    for bad in ({"prompt": "   "}, {"temperature": "nan"}, {"method": "warp"}):
        shown = panel.on_paper_settings(None, 64, **{**widgets, **bad})
        assert list(shown) == [panel.message] and "⚠️" in shown[panel.message]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_has_a_panel_note(method):
    """From the registry: a method with a paper names it, one without says its settings are ours (never blank)."""
    note = paper_settings_markdown(method)
    if METHODS[method].paper is None:
        assert "no paper of its own" in note
    else:
        assert note.startswith("**Paper**") and paper_settings(method) is PAPERS[METHODS[method].paper.method]
