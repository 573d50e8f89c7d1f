"""The measured choice (ReSpec's fallback): exploration priced by what it costs, steps during a burst of load,
rollback. unified's model stage is judged by what it adds instead (tests/test_stage_gain.py)."""

import pytest

from specviz.drafters import measured_choice
from specviz.drafters.measured_choice import EXPLORE_SHARE, FallbackChooser


def _chooser(setting: str) -> FallbackChooser:
    return FallbackChooser("auto", setting, kinds=("on", "off"), explore_every=30)


def test_a_costly_choice_is_explored_as_rarely_as_its_price_says():
    first = _chooser("test-costly")
    for _ in range(2):  # what the first tries measured: 'on' takes 200 ms for 3 tokens, 'off' 25 ms for 1.2
        first.observe("on", 3, 200.0)
        first.observe("off", 1.2, 25.0)
    lost_ms = 200.0 - 3 / (1.2 / 25.0)          # beyond what 'off' needs for the same 3 tokens
    interval = round(lost_ms / (EXPLORE_SHARE * 25.0))
    assert first.explore_interval("off", "on") == interval > 30
    picks = [first.choose() for _ in range(interval - 1)]
    assert set(picks) == {"off"}
    # the count is the process's, not the session's: a new session of the same setting explores next
    second = _chooser("test-costly")
    assert second.choose() == "on"
    assert second.report().explore_every == interval


def test_an_equal_choice_is_still_explored_every_explore_every_steps():
    chooser = _chooser("test-equal")
    for _ in range(2):
        chooser.observe("on", 2, 50.0)
        chooser.observe("off", 1, 25.0)
    picks = [chooser.choose() for _ in range(60)]
    assert picks.count("on") + picks.count("off") == 60 and min(picks.count("on"), picks.count("off")) == 2


def test_a_step_measured_during_a_burst_of_load_counts_at_the_calibrated_speed():
    """'off' gives 1.2 tokens in 25 ms, 'on' 3 in 200 ms; 'off''s first tries ran 4x slow (its forward
    measured 4x the curve): divided by that load it still wins, where raw times would pick 'on'."""
    aware, unaware = _chooser("test-burst"), _chooser("test-burst-raw")
    for _ in range(2):
        for chooser in (aware, unaware):
            chooser.observe("on", 3, 200.0)
        aware.observe("off", 1.2, 100.0, load=4.0)
        unaware.observe("off", 1.2, 100.0)
    assert aware.rate("off") == pytest.approx(1.2 / 25.0)
    assert aware.choose() == "off"
    assert unaware.choose() == "on"


def test_rollback_restores_the_shared_count():
    chooser = _chooser("test-rollback")
    for _ in range(2):
        chooser.observe("on", 3, 200.0)
        chooser.observe("off", 1.2, 25.0)
    saved = chooser.checkpoint()
    chooser.choose()
    chooser.rollback(saved)
    assert measured_choice._since_explore[chooser.key] == saved[0]
