"""llama.cpp's n-gram speculation as engine_configs.llamacpp reads its rules: ngram-simple's draft against a brute-force
reading of common_ngram_simple_draft, ngram-mod's table, the simulation along a greedy continuation, the setting
chosen by the largest simulated speedup, and the flags checked as llama.cpp's parser checks them."""

from specviz.engine_configs import llamacpp
from specviz.engine_configs.advice import Drafter


def brute_simple(tokens, size_n, size_m):
    """ngram-simple by its definition: the latest earlier occurrence of the last size_n tokens (not the current
    one, not at position 0), then up to size_m tokens after it, none when fewer than size_n are left."""
    history, cur = tokens[:-1], len(tokens) - 1
    if cur <= size_n + size_m + 1:
        return []
    pattern = tokens[-size_n:]
    starts = [j for j in range(1, cur - size_n) if history[j:j + size_n] == pattern]
    if not starts:
        return []
    j = max(starts)
    copy = min(size_m, cur - (j + size_n))
    return history[j + size_n:j + size_n + copy] if copy >= size_n else []


def test_ngram_simple_drafts_what_its_definition_says():
    text = [5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 8, 1, 2, 3, 4, 6, 6, 6, 1, 2, 3]
    for size_n in (1, 2, 3, 4):
        for size_m in (1, 2, 3, 5, 8):
            for end in range(2, len(text) + 1):
                assert llamacpp.simple_draft(text[:end], size_n, size_m) == brute_simple(text[:end], size_n, size_m)
    assert llamacpp.simple_draft(text, 3, 3) == [4, 6, 6]  # the latest match (at 12) wins over the earlier ones


def test_ngram_mod_follows_its_table_and_drops_short_drafts():
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    table = llamacpp.ModTable(2, 0, 3, prompt)
    assert table.draft(prompt + [1, 2]) == [3, 4, 5]  # (1, 2) -> 3, (2, 3) -> 4, (3, 4) -> 5: n_max stops it
    assert llamacpp.ModTable(2, 4, 8, [1, 2, 3]).draft([1, 2, 3, 1, 2]) == []  # (1, 2) -> 3, then (2, 3) unknown
    low = llamacpp.ModTable(2, 0, 4, prompt)
    for _ in range(llamacpp.LOW_RUN):
        assert low.draft(prompt + [1, 2])
        low.accepted(0)
    assert low.table == {}  # five drafts accepted under a quarter in a row reset it, as llama.cpp does


def test_the_simulation_counts_what_a_step_commits_and_verifies():
    prompt = [10, 11, 12, 13, 10, 11, 12]
    continuation = [13, 10, 11, 12, 13, 99]
    found = llamacpp.simulate([(prompt, continuation)], lambda p: llamacpp._Simple(2, 3))
    assert found.committed == len(continuation) - 1   # the first token comes from the prefill
    assert sum(found.verified) == found.steps + found.drafted
    assert 0 < found.accepted <= found.drafted
    flat = found.speedup(lambda n: 1.0)  # verifying more costs nothing: every accepted draft is a free token
    assert flat == found.committed / found.steps
    assert found.speedup(lambda n: float(n)) <= flat  # pricing each token verified costs the drafts


def test_the_advice_is_the_best_simulated_setting_and_passes_its_parser():
    prompt = list(range(40)) + list(range(40))
    greedy = [(prompt, list(range(40)))]  # the answer repeats the prompt: n-gram speculation pays
    advice = llamacpp.advise(Drafter("specviz-head", "head", None), None, lambda n: 10.0 + n, 0.5, greedy=greedy)
    assert advice.engine == "llama.cpp" and advice.problems == () and advice.predicted_speedup > 1.5
    flags = tuple(advice.config_text.split())
    assert flags[:2] in (("--spec-type", "ngram-simple"), ("--spec-type", "ngram-mod"))
    best = max(llamacpp.simulate(greedy, lambda p, n=n, m=m: llamacpp._Simple(n, m)).speedup(lambda n: 10.0 + n)
               for n, m in llamacpp.SIMPLE_SIZES)
    assert advice.predicted_speedup >= best - 1e-9
    assert llamacpp.validate(("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "2000")) == [
        "--spec-ngram-mod-n-max: ngram n-min/n-max must be between 0 and 1024 inclusive"]
    assert "unknown argument: --spec-ngram-size-n" in llamacpp.validate(("--spec-type", "ngram-simple",
                                                                          "--spec-ngram-size-n", "3"))
    assert llamacpp.advise(Drafter("self", "self", None), None, lambda n: 1.0, 0.1).refused
