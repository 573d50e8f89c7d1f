"""Presets are valid configurations; a link's settings round-trip, and nonsense in it is named."""

from urllib.parse import parse_qsl

from specviz.methods import METHODS
from specviz.lab.compare import side_request
from specviz.lab.visitor_request import VisitorRequest
from specviz.lab.presets import PRESETS
from specviz.lab.share_link import query_from_settings, settings_from_query

PROMPT = "Repeat exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta."


# ---- A/B compare -----------------------------------------------------------------------------------------------
def base_settings(**changes):
    return {"model": "", "prompt": PROMPT, "method": "racer", "budget": 8, "params": {}, "draft_model": "", "mode": "",
            "temperature": 0.0, "top_p": 1.0, "seed": 0, **changes}


# ---- presets and URL settings --------------------------------------------------------------------------------
def test_presets_are_valid_configurations():
    from app_page import CONTEXT

    assert len(PRESETS) >= 4
    for preset in PRESETS:
        assert preset.example in CONTEXT.examples and preset.question.endswith((".", "?", ")"))
        base = preset.request(CONTEXT.examples)  # through the door: a bad preset raises here
        assert base.settings.prompt == CONTEXT.examples[preset.example] and base.settings.method == preset.method
        assert base.max_new_tokens == preset.max_new_tokens
        for overrides in (preset.side_a, preset.side_b):
            side = side_request(base, overrides).settings  # checked as any request is
            spec = METHODS[side.method]
            spec.check_sampling(dict(side.params), side.sampling)


def test_url_settings_round_trip_and_nonsense_is_named():
    from app_page import CONTEXT

    query = query_from_settings("respec", 32, 64, 0.7, 0.9, 5, {"tau": 3.0, "m": 2}, "summarise: sum-lighthouse")

    settings, notes = settings_from_query(dict(parse_qsl(query[1:])), CONTEXT.examples)
    assert not notes
    assert settings == {"method": "respec", "budget": 32, "max_new_tokens": 64, "temperature": 0.7, "top_p": 0.9,
                        "seed": 5, "tau": 3.0, "example": "summarise: sum-lighthouse"}
    settings, notes = settings_from_query({"method": "warp-drive", "budget": "lots", "tau": "-1", "temperature": "nan",
                                           "example": "nope", "zzz": "1", "max_new_tokens": "1e9"}, CONTEXT.examples)
    assert settings == {} and len(notes) == 7
    assert any("warp-drive" in n for n in notes) and any("zzz" in n for n in notes)


def test_a_link_is_made_from_the_checked_request_and_names_only_an_example_prompt():
    from app_page import CONTEXT
    from specviz.lab.share_link import link_for

    label = "summarise: sum-lighthouse"
    request = VisitorRequest.of_loose(base_settings(method="respec", prompt=CONTEXT.examples[label], budget=32),
                                      max_new_tokens=64)
    query, names_example = link_for(request, CONTEXT.examples)
    settings, notes = settings_from_query(dict(parse_qsl(query[1:])), CONTEXT.examples)
    assert names_example and not notes
    assert settings["example"] == label and settings["budget"] == 32 and settings["max_new_tokens"] == 64
    query, names_example = link_for(VisitorRequest.of_loose(base_settings(prompt="Not an example.")), CONTEXT.examples)
    assert not names_example and "example" not in query and "prompt" not in query
