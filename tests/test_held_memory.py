"""What a session holds, counted in bytes (engine.held_memory, issue 73): a prompt's cache is one buffer of its
length and a spare eighth, the count matches the process's resident growth, and a session trimmed at rest between
its steps emits exactly the tokens of one never trimmed."""

import gc

from specviz.engine import held_memory
from specviz.engine.session import Session
from specviz.runtime.kv import room_for

PROMPT = "Repeat exactly: the red fox jumps over the lazy dog, the red fox jumps over the lazy dog, again and again."


def test_a_prompts_cache_is_one_buffer_of_its_length_and_a_spare_eighth(lm):
    session = Session(lm, "ar").start(PROMPT * 8)
    layer = session.cache.layers[0]
    assert layer._keys.shape[-2] == room_for(len(session.prompt_ids))
    entry = 2 * layer.keys[..., :1, :].numel() * layer.keys.element_size()
    assert held_memory.session_bytes(session) == len(session.cache.layers) * room_for(len(session.prompt_ids)) * entry


def test_a_session_trimmed_between_its_steps_emits_the_same_tokens(lm):
    """unified with the trained head (a head cache and the target features it keeps): each trim gives back bytes,
    and greedy stays lossless."""
    plain, trimmed = Session(lm, "unified").start(PROMPT), Session(lm, "unified").start(PROMPT)
    while not plain.finished and len(plain.output_ids) < 48:
        plain.step(48)
    trims = 0
    while not trimmed.finished and len(trimmed.output_ids) < 48:  # its trees may differ (the planner reads times)
        trimmed.step(48)
        grown = held_memory.session_bytes(trimmed)
        held_memory.trim(trimmed)
        trims += held_memory.session_bytes(trimmed) < grown
    gc.collect()
    assert trimmed.output_ids == plain.output_ids and len(plain.output_ids) >= 6
    assert trims == len(trimmed.records)  # every trim gave something back
