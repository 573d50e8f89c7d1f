"""RACER's n-gram automaton: exact counts, capacity, leaf-only LRU eviction, failure links."""

import random
from collections import Counter

import ahocorasick
import pytest

from specviz.errors import SpecvizError
from specviz.index.automaton import ROOT, NgramAutomaton


def brute_counts(stream: list[int], max_ngram: int) -> Counter:
    counts = Counter()
    for end in range(1, len(stream) + 1):
        for n in range(1, min(max_ngram, end) + 1):
            counts[tuple(stream[end - n:end])] += 1
    return counts


def assert_structure(automaton: NgramAutomaton) -> None:
    """Every live node hangs under a live parent, and the recency order has parents after children."""
    position = {node: i for i, node in enumerate(automaton.recency)}
    assert set(position) == set(automaton.token)
    for node, parent in automaton.parent.items():
        if node == ROOT:
            continue
        assert automaton.children[parent][automaton.token[node]] == node
        assert position[parent] > position[node], "a parent is older than its child"


@pytest.mark.parametrize("seed", range(5))
def test_counts_match_brute_force_on_random_streams(seed):
    rng = random.Random(seed)
    stream = [rng.randrange(6) for _ in range(400)]  # a small alphabet repeats n-grams often
    automaton = NgramAutomaton(max_ngram=5, capacity=100_000)
    for start in range(0, len(stream), 7):  # fed in uneven pieces, like accepted tokens per step
        automaton.feed(stream[start:start + 7])
    expected = brute_counts(stream, 5)
    assert len(automaton) - 1 == len(expected)
    for ngram, count in expected.items():
        assert automaton.count(ngram) == count
    assert automaton.freq[ROOT] == len(stream)
    assert_structure(automaton)


def test_counts_agree_with_pyahocorasick():
    """An independent counter: pyahocorasick over the same n-grams, run over the stream."""
    rng = random.Random(7)
    stream = [rng.randrange(4) for _ in range(300)]
    automaton = NgramAutomaton(max_ngram=4, capacity=100_000)
    automaton.feed(stream)
    reference = ahocorasick.Automaton(ahocorasick.STORE_ANY, ahocorasick.KEY_SEQUENCE)
    ngrams = {tuple(stream[i:i + n]) for n in range(1, 5) for i in range(len(stream) - n + 1)}
    for ngram in ngrams:
        reference.add_word(ngram, ngram)
    reference.make_automaton()
    seen = Counter(ngram for _, ngram in reference.iter(tuple(stream)))
    for ngram in ngrams:
        assert automaton.count(ngram) == seen[ngram]


@pytest.mark.parametrize("capacity", [2, 5, 37, 200])
def test_capacity_is_never_exceeded_and_only_leaves_go(capacity):
    rng = random.Random(capacity)
    automaton = NgramAutomaton(max_ngram=6, capacity=capacity)
    for step in range(300):
        automaton.feed([rng.randrange(50)])
        assert len(automaton) <= capacity
        if step % 10 == 0:
            assert_structure(automaton)  # an evicted internal node would leave an orphan here
    assert_structure(automaton)
    assert automaton.evicted > 0


def test_twenty_thousand_token_prompt_stays_within_capacity():
    rng = random.Random(3)
    automaton = NgramAutomaton(max_ngram=10, capacity=10_000)
    automaton.feed([rng.randrange(49152) for _ in range(20_000)])
    assert len(automaton) == 10_000
    assert_structure(automaton)


@pytest.mark.parametrize("seed", range(3))
def test_recency_order_is_every_ngrams_last_touch(seed):
    """Below capacity the recency order is a plain LRU over the n-grams: at each token, the n-grams ending
    there, shortest first, each touched with its prefixes after it (longest first, the root last)."""
    rng = random.Random(seed)
    stream = [rng.randrange(4) for _ in range(150)]
    automaton = NgramAutomaton(max_ngram=5, capacity=10_000)
    for start in range(0, len(stream), 37):  # fed in chunks, as steps do
        automaton.feed(stream[start:start + 37])
    order = [()]
    for end in range(1, len(stream) + 1):
        for n in range(1, min(5, end) + 1):
            for prefix in range(n, -1, -1):
                ngram = tuple(stream[end - n:end - n + prefix])
                if ngram in order:
                    order.remove(ngram)
                order.append(ngram)
    assert [automaton.ngram(node) for node in automaton.recency] == order


def test_recent_ngrams_survive_eviction():
    """LRU: after a long stream, the n-grams of its tail are still counted."""
    rng = random.Random(11)
    stream = [rng.randrange(1000) for _ in range(3000)]
    automaton = NgramAutomaton(max_ngram=4, capacity=500)
    automaton.feed(stream)
    tail = stream[-20:]
    for end in range(4, 21):
        assert automaton.count(tail[end - 4:end]) >= 1


def test_failure_chain_is_the_set_of_suffix_states():
    rng = random.Random(5)
    automaton = NgramAutomaton(max_ngram=6, capacity=100_000)
    automaton.feed([rng.randrange(5) for _ in range(100)])
    automaton.build_failure_links()
    for _ in range(50):  # links of nodes made after the build are filled in lazily
        automaton.feed([rng.randrange(5)])
        assert automaton.failure_chain() == list(reversed(automaton.suffix_states))
    for node in list(automaton.token)[1:200]:
        assert automaton.ngram(automaton.failure(node)) == automaton.ngram(node)[1:]


def test_continuations_follow_the_matched_suffix_by_frequency():
    automaton = NgramAutomaton(max_ngram=5, capacity=1000)
    # "1 2 3" was followed by 4 twice and by 9 once; the stream now ends in "1 2 3"
    automaton.feed([1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 6, 0, 1, 2, 3, 9, 0, 1, 2, 3])
    automaton.build_failure_links()
    found = automaton.continuations(limit=3, min_border_depth=2)
    assert found, "a border of depth >= 2 exists"
    first = found[0]
    assert first.tokens[0] == 4 and first.freqs[0] >= 2
    assert all(c.border_depth >= 2 for c in found)
    assert all(len(c.tokens) <= 3 for c in found)
    assert automaton.continuations(limit=3, min_border_depth=5) == []


@pytest.mark.parametrize("ngram, capacity", [(0, 100), (1000, 100), (10, 0), (10, -5)])
def test_bad_sizes_are_refused_clearly(ngram, capacity):
    with pytest.raises(SpecvizError):
        NgramAutomaton(ngram, capacity)


def test_draft_ahead_copies_past_the_ngram_length():
    rng = random.Random(9)
    passage = [rng.randrange(1000, 2000) for _ in range(40)]
    automaton = NgramAutomaton(max_ngram=5, capacity=10_000)
    automaton.feed(passage + [1, 2] + passage[:3])  # the stream starts copying the passage again
    automaton.build_failure_links()
    subtree_only = automaton.continuations(limit=20, min_border_depth=2)
    assert max(len(c.tokens) for c in subtree_only) <= 5 - 2  # capped by the n-gram length
    ahead = automaton.continuations(limit=20, min_border_depth=2, draft_ahead=True)
    best = max(ahead, key=lambda c: len(c.tokens))
    assert list(best.tokens) == passage[3:3 + len(best.tokens)] and len(best.tokens) > 5
    assert best.ahead_from < len(best.tokens)
