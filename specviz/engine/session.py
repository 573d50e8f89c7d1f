"""Session: prefill, then one verified draft tree per step(), with the full history kept."""

from __future__ import annotations

import os
import platform
import statistics
import time
import weakref
from collections import deque
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch

from specviz.engine import costmodel, rebuilt_prefixes
from specviz.engine.checkpoints import between_layers, checkpoint, lend_turn
from specviz.engine.checked_run import CheckedRun
from specviz.engine.tree_forward import verify_tree
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.feature_tap import FeatureTap
from specviz.runtime import kv
from specviz.runtime.kv import cache_length, keep_accepted
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.loading import check_same_vocabulary
from specviz.engine.planner import AcceptanceModel, OnlineCost, TreePlan, best_first, plan_tree
from specviz.accept.sampling import SamplingSettings
from specviz.runtime.prompts import PromptText, encode
from specviz.runtime import state_pickle
from specviz.records.charts import SamplingCharts
from specviz.records.offered import NOT_RANKED, CutNodes
from specviz.records.plan import BudgetCut, PlanDecision, SourceSplit
from specviz.records.status import NodeStatus
from specviz.records.step import BONUS_ORIGIN, CommitOrigin, NodeRecord, StepRecord, StepTimings
from specviz.records.trace import Trace
from specviz.tree.draft_tree import DraftTree
from specviz.drafters.base import StepOutcome
from specviz.errors import SpecvizError
from specviz.methods import get_method
from specviz.tree.budget import AUTO_BUDGET, Budget

# prefill in chunks so a long prompt never materialises (len x vocab) logits at once, and so that between two chunks
# other visitors' work may run (runtime.compute_thread.lend): 256 tokens are about 1 s of a long prompt on the 2-core
# AMD EPYC; its 6,035-token prompt read in 25.4-26.7 s against 24.6-25.3 s in 512-token chunks, 28.2-29.8 in 128
PREFILL_CHUNK = 256
PREFILL_CHUNK_GPU = 512  # a GPU reads a chunk in about one forward's time (21-25 ms for the 135M on an H200)
# a committed token's origin says which rule bent p to accept it (CommitOrigin.mark: "logits~relaxed" in a trace)
BENT_MARKS = {NodeStatus.RELAXED: str(NodeStatus.RELAXED), NodeStatus.TRANSFERRED: str(NodeStatus.TRANSFERRED)}


def machine_label(lm: LoadedModel) -> str:
    """Where a run was recorded: processor, device, precision and threads (shown beside replayed traces)."""
    processor = platform.processor() or platform.machine()
    if lm.device.type == "cuda":
        processor = torch.cuda.get_device_name(lm.device)
    return (f"{processor} ({os.cpu_count()} cores), {lm.device.type}, mode {lm.mode}, "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}")


_vocabulary_texts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per tokenizer: every id's text


@dataclass(frozen=True)
class RunFigures:
    """A generation's headline figures as the counters and `generate --json` show them (rounded): a Session's
    (Session.stats) and a finished run's (RunResult.figures) alike."""
    new_tokens: int        # tokens generated
    steps: int             # verify steps (a peer's run: target forwards)
    mean_accepted: float   # tokens per step (MAT), to 4 places; 0 before the first step
    wall_s: float          # s: prefill and steps, what a user waits for, to 4 places
    tokens_per_s: float    # tok/s: new_tokens over wall_s, to 3 places; 0 before any time was spent

    @classmethod
    def of(cls, new_tokens: int, steps: int, wall_s: float) -> "RunFigures":
        return cls(new_tokens=new_tokens, steps=steps, mean_accepted=round(new_tokens / steps, 4) if steps else 0.0,
                   wall_s=round(wall_s, 4), tokens_per_s=round(new_tokens / wall_s, 3) if wall_s else 0.0)

    def to_dict(self) -> dict:
        """The JSON form (`generate --json`): the fields by name."""
        return asdict(self)


def _ms(seconds: float) -> float:
    """Seconds as the milliseconds a step record keeps (to the microsecond)."""
    return round(seconds * 1000, 3)


class TokenTexts:
    """Decoded text of single tokens. The whole vocabulary is decoded once per tokenizer (49,152 tokens:
    about 0.1 s) and shared by every session: a step records up to a few hundred tokens, and decoding each
    new one as it came cost about 0.1 ms a step (the first prompts meet many new ones)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.texts = _vocabulary_texts.get(tokenizer)
        if self.texts is None:  # decoded when the first session is made, not inside its first step
            self.texts = _vocabulary_texts.setdefault(
                tokenizer, tokenizer.batch_decode([[token_id] for token_id in range(len(tokenizer))]))

    def __getstate__(self):  # the texts are the tokenizer's, shared: a state carries the tokenizer alone
        return {"tokenizer": self.tokenizer}

    def __setstate__(self, state):
        self.__init__(state["tokenizer"])

    def __call__(self, token: int) -> str:
        texts = self.texts
        return texts[token] if 0 <= token < len(texts) else self.tokenizer.decode([token])


@dataclass
class Drafted:
    """Session._draft's answer: the tree to verify and how it was chosen."""
    tree: DraftTree                         # the tree the target verifies
    budget: int                             # the draft nodes it was held to
    split: SourceSplit | None = None        # per source: offered, proposed, shared (None: no draft stage)
    curve: list[float] | None = None        # expected accepted drafts of keeping the best k nodes
    cut: BudgetCut | None = None            # budget=auto: the planner's cut
    chances: list[float] | None = None      # the tree's node_chances where the planner computed them for it
    offered: DraftTree | None = None        # budget=auto: the whole tree the sources offered ...
    plan: TreePlan | None = None            # ... and the planner's choice in it

    def cut_nodes(self) -> CutNodes | None:
        """The offered nodes the verified tree left out, in the record's id space (None: none cut)."""
        offered, plan = self.offered, self.plan
        if offered is None or plan is None or len(plan.kept) >= offered.num_drafted:
            return None
        # truncate() keeps the chosen nodes in their offered order: kept node j is the j-th of them
        new_id = {0: 0, **{node: j for j, node in enumerate(sorted(plan.kept), start=1)}}
        rank = {node: r for r, node in enumerate(plan.order)}
        cut = CutNodes()
        for node in range(1, len(offered)):
            if node in new_id:
                continue
            new_id[node] = len(plan.kept) + 1 + len(cut)
            cut.parents.append(new_id[offered.parents[node]])
            cut.tokens.append(offered.tokens[node])
            cut.sources.append("+".join(sorted(offered.sources[node])))
            cut.chances.append(round(plan.chances[node], 4))
            cut.ranks.append(rank.get(node, NOT_RANKED))
        return cut


class Session:
    def __init__(self, lm: LoadedModel, method: "str | type | CheckedRun" = "ar", params: dict | None = None,
                 budget: Budget | int | str = AUTO_BUDGET,
                 sampling: SamplingSettings = SamplingSettings(), cost_model: costmodel.CostModel | None = None,
                 draft: LoadedModel | None = None):
        self.lm = lm
        # a CheckedRun (its settings checked once, where it was made: taken as they are), a name of
        # methods.METHODS, or a Method class of one's own (studies.static_check's probe)
        if isinstance(method, str):
            method = CheckedRun.check(method, params, budget, sampling)
        if isinstance(method, CheckedRun):
            self.method_class, self.params = get_method(method.method), method.param_values
            self.budget, self.sampling = method.budget, method.sampling
        else:
            self.method_class = method
            self.params = self.method_class.resolve_params(params)
            self.budget = Budget.parse(budget)  # the old forms ("auto", a number of nodes) are read too
            self.sampling = SamplingSettings.checked(sampling.temperature, sampling.top_p, sampling.seed)
            self.method_class.check_sampling(self.params, self.sampling)
        self.method = None  # the method's drafters for one generation, built by start_ids
        if isinstance(draft, LoadedModel) and draft is not lm:
            check_same_vocabulary(lm, draft)  # a draft head was checked against its target when it was loaded
        self.draft = draft  # None: a model drafter drafts with the target's own weights; or the draft head
        self.generator = torch.Generator(device="cpu").manual_seed(self.sampling.seed)
        self._cost_model = cost_model
        self._online_cost: OnlineCost | None = None
        self.token_text = TokenTexts(lm.tokenizer)
        self.prompt_ids: list[int] = []
        self.context: list[int] = []
        self.records: list[StepRecord] = []
        self.finish_reason: str | None = None
        self.prefill_s = 0.0       # everything before the first step: the drafters' set-up and the prefill forward
        self.setup_s = 0.0         # the part of it the method's drafters took (built, and reading the prompt)
        self.step_s = 0.0
        self.cache = None
        self.cache_to_rebuild = 0  # context tokens whose cache entries were left out in transit (runtime.state_pickle)
        self.rebuild_s = 0.0       # time spent rebuilding it: a call's transport cost, in neither prefill nor steps
        self.rebuild_copied = 0    # entries of the last rebuild copied from another session's (engine.rebuilt_prefixes)
        self.features: FeatureTap | None = None  # the target's features that forwards also return (a stage drafts from them)
        self.prefill_from: str | None = None  # the run whose prompt entries this session copied (start_beside)

    # ---- set-up ---------------------------------------------------------------------------------
    @property
    def cost_model(self) -> costmodel.CostModel:
        if self._cost_model is None:
            self._cost_model = costmodel.for_session(self.lm)
        return self._cost_model

    @property
    def online_cost(self) -> OnlineCost:
        """The calibrated curve, corrected by the forward times this session measures."""
        if self._online_cost is None:
            self._online_cost = OnlineCost(self.cost_model)
        return self._online_cost

    def start(self, prompt) -> "Session":
        """Encode a text or chat prompt (one user message for plain text) and prefill."""
        return self.start_ids(encode(self.lm.tokenizer, prompt, self.lm.max_context), PromptText.of(prompt))

    @torch.inference_mode()
    def start_ids(self, prompt_ids: list[int], prompt: PromptText | None = None) -> "Session":
        """Prefill every prompt token but the last: that one is the first step's root. prompt: the text
        the ids encode, for a method that builds its own context from it."""
        if not prompt_ids:
            raise SpecvizError("The prompt is empty: write something for the model to answer.")
        if len(prompt_ids) >= self.lm.max_context:
            raise SpecvizError(f"The prompt is {len(prompt_ids)} tokens long; the context holds {self.lm.max_context}.")
        started = time.perf_counter()
        self._begin(prompt_ids, prompt)
        return self._read_prompt(started)

    def _read_prompt(self, started: float) -> "Session":
        """The prompt's prefill into a new cache, the drafters reading each chunk; prefill_s and setup_s count from
        started (before _begin built the drafters)."""
        setup_s = time.perf_counter() - started  # the method's drafters and their indexes, built
        self.cache = self._new_cache()
        kv.plan_length(self.cache, len(self.prompt_ids))  # one buffer for the prompt, not one per chunk
        self._lent_s = 0.0
        for start, logits, features in self._prefill(self.cache, len(self.prompt_ids) - 1):
            indexed = time.perf_counter()
            self.method.prefill_chunk(self.context, start, logits, features)
            setup_s += time.perf_counter() - indexed  # the drafters reading the prompt (its forward apart)
        self.prefill_s = time.perf_counter() - started - self._lent_s
        self.setup_s = setup_s
        return self

    @torch.inference_mode()
    def start_beside(self, run: "Session") -> "Session":
        """Start on run's prompt with the prompt's cache entries copied from run's cache, charged the time run's
        prefill forward took (prefill_s), where this method reads nothing of the prompt but its entries (ar): the
        same forward over the same tokens, whose entries are bitwise those of its own prefill (tests/test_offered_tree.py).
        What `ar` paired with a run (engine.paired_baseline) does: its own prefill came after the run's first step,
        under another moment's load (a browser drawing the Run's click took it from the run's prefill, which read 0.54
        to 1.34x ar's on the page where a quiet machine reads them equal), and it doubled a long prompt's wait. Where
        the entries cannot be copied (run's cache left behind in transit, another kind of cache, a method whose
        drafters read the prompt), it prefills as start_ids does."""
        entries, started = len(run.prompt_ids) - 1, time.perf_counter()
        self._begin(run.prompt_ids, None)
        cache = self._new_cache()
        if (run.cache is None or cache_length(run.cache) < entries or self.method.stages or self.features is not None
                or not kv.copy_prefix(run.cache, cache, entries)):
            return self._read_prompt(started)
        self.cache = cache
        self.prefill_s, self.setup_s = run.prefill_s - run.setup_s, 0.0  # run's prefill forward (lent time apart)
        self.prefill_from = run.name
        return self

    def _begin(self, prompt_ids: list[int], prompt: PromptText | None) -> None:
        """Everything of a start but the prompt's cache entries: the method's drafters built, the records empty."""
        self.prompt_ids = list(prompt_ids)
        self.context = list(prompt_ids)
        self.records, self.finish_reason, self._finish_reported = [], None, False
        self.margins: list[float] = []  # per output token: the target's top-2 logit margin where it was chosen
        self.generator.manual_seed(self.sampling.seed)  # a restart replays the same draws
        prompt = replace(prompt, ids=tuple(prompt_ids)) if prompt is not None else None
        self.method = self.method_class(self.lm, self.params, self.draft, self.sampling, self.generator, prompt)
        self.acceptance = AcceptanceModel(control=self.lm.control_ids)
        self.unlearnt = AcceptanceModel(control=self.lm.control_ids)  # never learns: the drafters' estimates alone
        # a stage drafts from the target's features: compute them, of the layers it taps (runtime.feature_tap)
        self.features = self.method.feature_tap if self.method.needs_features else None
        self.prefill_from = None
        self.step_s = 0.0
        self.cache_to_rebuild, self.rebuild_s, self.rebuild_copied = 0, 0.0, 0
        self._outside_ms: deque = deque(maxlen=9)  # recent steps' time besides drafting and the forward

    def _new_cache(self):
        return self.lm.new_cache(dynamic=self.features is not None and not self.features.final)

    def _prefill(self, cache, end: int, first: int = 0):
        """Causal forwards of context[first:end] into cache (which holds the entries before first), PREFILL_CHUNK
        tokens at a time (PREFILL_CHUNK_GPU on a GPU): (start, logits, the target's features or None) per chunk."""
        size = PREFILL_CHUNK_GPU if self.lm.device.type == "cuda" else PREFILL_CHUNK
        for start in range(first, end, size):
            if start > first:
                checkpoint(reading_prompt=True)  # a call past its budget stops between chunks (engine.checkpoints)
                # and other visitors' work waiting for the compute thread runs here (their seconds are not ours)
                self._lent_s += lend_turn()  # (start_ids and ensure_cache set it to 0 first)
            chunk = self.context[start:min(start + size, end)]
            # and between its layers, except in the only chunk of a short prompt, which every call reads whole (a
            # long prompt's first chunk under a crowd took 10-15 s of a turn, to be dropped at the next check): a
            # stop drops the cache (start_ids and ensure_cache keep it only once the prompt is read whole)
            with between_layers(self.lm.model) if end - first > size else nullcontext():
                if self.features:
                    logits, features = causal_forward(self.lm, cache, chunk, self.features)
                else:
                    logits, features = causal_forward(self.lm, cache, chunk), None
            yield start, logits, features

    # ---- carried to another process -----------------------------------------------------------------
    def __getstate__(self):
        """Pickled for a ZeroGPU call (runtime.state_pickle): the KV cache stays behind unless caches travel; what
        it held is the first cache_to_rebuild tokens of the context, and the next step rebuilds it from them."""
        state = dict(self.__dict__)
        if not state_pickle.caches_travel() and self.cache is not None:
            state["cache"], state["cache_to_rebuild"] = None, cache_length(self.cache)
        return state

    @torch.inference_mode()
    def ensure_cache(self) -> None:
        """The cache a carried state left behind (nothing if it has one), from its tokens in one prefill (chunked as
        the prompt's was); the stages that draft from the target's features get those again (Method.refill).
        Numerically a prefill's entries, not the incremental ones: within fp32 rounding, as the prompt's always were.
        The entries another session of this model rebuilt for the same tokens are copied instead of computed again
        (engine.rebuilt_prefixes)."""
        if self.cache is not None or not self.started:
            return
        started, self._lent_s = time.perf_counter(), 0.0
        cache, tokens = self._new_cache(), self.context[:self.cache_to_rebuild]
        kv.plan_length(cache, len(tokens) + 1)
        # a session whose stages read the target's features needs every position's: it runs the whole prefill
        copied = rebuilt_prefixes.copy_shared(self.lm, cache, tokens) if not self.features else 0
        for start, _, features in self._prefill(cache, len(tokens), copied):
            if features is not None:
                self.method.refill(self.context, start, features)
        rebuilt_prefixes.remember(self.lm, cache, tokens)
        self.cache, self.cache_to_rebuild, self.rebuild_copied = cache, 0, copied
        self.rebuild_s += time.perf_counter() - started - self._lent_s

    # ---- reading --------------------------------------------------------------------------------
    @property
    def output_ids(self) -> list[int]:
        return self.context[len(self.prompt_ids):]

    @property
    def text(self) -> str:
        return self.lm.tokenizer.decode(self.output_ids, skip_special_tokens=True)

    @property
    def name(self) -> str:
        return self.method_class.name

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    @property
    def lossless(self) -> bool:
        """What the method promises for its parameters at this temperature (the app's diff view reads it)."""
        return self.method_class.lossless(self.params, self.temperature)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def started(self) -> bool:
        return bool(self.prompt_ids)

    def stats(self) -> RunFigures:
        """The generation's figures so far (steps, tokens, MAT, wall time, tokens/s)."""
        return RunFigures.of(len(self.output_ids), len(self.records), self.prefill_s + self.step_s)

    @property
    def cost_curve(self) -> dict | None:
        """The verify cost curve this session prices trees with, as a trace stores it ({"sizes": [...], "ms":
        [...]}: ms per verified tree size); None while none is loaded (a fixed budget never loads one; reading
        cost_model loads it)."""
        curve = self._cost_model
        return {"sizes": list(curve.sizes), "ms": list(curve.ms)} if curve is not None else None

    def trace(self) -> Trace:
        return Trace(model=self.lm.name, method=self.name,
                     params={**self.params, "budget": self.budget.setting, "temperature": self.temperature,
                             "top_p": self.sampling.top_p, "seed": self.sampling.seed,
                             **({"draft_model": self.draft.name if self.draft else "self (target weights)"}
                                if self.method_class.uses_draft_model else {})},
                     prompt_ids=list(self.prompt_ids), output_ids=self.output_ids,
                     finish_reason=self.finish_reason or "length", steps=list(self.records),
                     token_texts={str(t): self.token_text(t) for t in dict.fromkeys(
                         [*self.output_ids, *(n.token_id for r in self.records for n in r.nodes),
                          *(t for r in self.records if r.cut_nodes for t in r.cut_nodes.tokens)])},
                     prompt_text=self.lm.tokenizer.decode(self.prompt_ids), recorded_on=machine_label(self.lm),
                     prefill_ms=round(self.prefill_s * 1000, 3), lossless=self.lossless,
                     cost_curve=self.cost_curve)

    # ---- one step -------------------------------------------------------------------------------
    def _draft(self, room: int) -> "Drafted":
        """The tree to verify and how it was chosen from what the sources offered."""
        started = time.perf_counter()
        if not self.method.stages:
            return Drafted(DraftTree(self.context[-1]), 0)
        limit = min(self.budget.offered_nodes, room)
        offered, split = self.method.draft(self.context, limit)
        if not self.method.verifies_by_seed and offered.has_draws():
            # under the session's coins a draw reaches the verifier whole (within the drafters' budget):
            # cutting it for its own probability would bias the sampled output (accept.sampling). Under the
            # seed's draws any cut is safe: the output is the seed's tokens whatever is verified.
            return Drafted(offered, limit, split)
        draft_ms = (time.perf_counter() - started) * 1000  # the drafters' time (the plan's own is not in it)
        chances = self.acceptance.node_chances(offered) if offered.num_drafted else None
        if self.budget.auto:
            chosen = plan_tree(offered, self.acceptance, self.online_cost, limit, draft_ms, self.overhead_ms,
                               chances=chances)
            kept = offered.truncate(len(chosen.kept), chosen.kept)
            return Drafted(kept, len(chosen.kept), split, chosen.expected, chosen.cut,
                           chances if kept is offered else None, offered, chosen)
        # a fixed budget keeps the drafters' own order; the curve still shows what a smaller tree would expect
        curve = [round(float(e), 3) for e in best_first(offered, self.acceptance, limit, chances)[1]]
        kept = offered.truncate(limit)
        return Drafted(kept, limit, split, curve, None, chances if kept is offered else None)

    @torch.inference_mode()
    def step(self, max_new_tokens: int | None = None) -> StepRecord:
        """One verified draft tree. All or nothing: if anything inside fails, the KV cache, the context,
        the planner's estimates and every drafter are left as they were before the step."""
        if not self.started:
            raise SpecvizError("No prompt yet: start a session with a prompt first.")
        if self.finished:
            raise SpecvizError(f"Generation has finished ({self.finish_reason}); reset to start again.")
        checkpoint()  # a call past its budget stops here, before anything of this step (engine.checkpoints)
        self.ensure_cache()
        past_len = len(self.context) - 1
        saved = (self.method.checkpoint(), self.acceptance.checkpoint(),
                 self._online_cost.checkpoint() if self._online_cost else None, self.generator.get_state())
        try:
            return self._step(past_len, max_new_tokens)
        except BaseException:
            del self.context[past_len + 1:]
            del self.margins[len(self.output_ids):]
            surplus = cache_length(self.cache) - past_len
            if surplus > 0:  # entries the verify forward appended (compaction only moves entries after past_len)
                self.cache.crop(-surplus)
            self.finish_reason = None
            self.method.rollback(saved[0])
            self.acceptance.rollback(saved[1])
            if saved[2] is not None:
                self._online_cost.rollback(saved[2])
            self.generator.set_state(saved[3])
            raise

    def _step(self, past_len: int, max_new_tokens: int | None) -> StepRecord:
        t0 = time.perf_counter()
        room = self.lm.max_context - len(self.context)  # positions left for draft nodes
        drafted = self._draft(room)
        tree, chances = drafted.tree, drafted.chances
        if chances is None:
            chances = self.acceptance.node_chances(tree)
        calibrated = self.acceptance.calibrated(tree, chances)
        predicted = sum(calibrated[1:])
        t1 = time.perf_counter()
        verified = verify_tree(self.lm, self.cache, tree, past_len, features=self.features or False)
        logits, features = verified.logits, verified.features
        if self.lm.device.type == "cuda":
            torch.cuda.synchronize()
        t_forward = time.perf_counter()
        verification = self.method.accept(tree, logits, self.sampling, self.generator, past_len, verified.summary)
        t2 = time.perf_counter()

        committed = verification.accepted_tokens
        if max_new_tokens is not None:
            committed = committed[:max(1, max_new_tokens - len(self.output_ids))]
        eos_at = next((i for i, t in enumerate(committed) if t in self.lm.eos_ids), None)
        if eos_at is not None:
            committed = committed[:eos_at + 1]
        # the cache keeps the root and the accepted nodes whose successors were committed too
        keep_accepted(self.cache, past_len, [0] + verification.path[:len(committed) - 1])
        self.context.extend(committed)
        # the target's top-2 logit margin where each committed token was chosen (the step's shared top-k)
        rows = [0] + verification.path[:len(committed) - 1]
        best = verification.top.values_np[rows]
        self.margins.extend((best[:, 0] - best[:, 1]).tolist())
        forward_ms = (t_forward - t1) * 1000
        # how loaded the machine was in this step, where a curve is at hand (budget=auto loads one)
        load = forward_ms / self._cost_model.cost_ms(len(tree)) if self._cost_model is not None else 1.0
        outcome = StepOutcome(tree=tree, verification=verification, logits=logits, context=self.context,
                              forward_ms=forward_ms, draft_ms=(t1 - t0) * 1000, load=load, features=features,
                              cost_ms=self._cost_model.cost_ms if self._cost_model is not None else None)
        self.method.observe(outcome)
        drafter_notes = self.method.step_notes()
        # sampling: p (q, p_hat) at the visited nodes, for the app's chart
        sampling = (SamplingCharts(charts=verification.charts, empty_residuals=verification.empty_residuals)
                    if verification.charts is not None else None)
        self.acceptance.update(tree, verification.statuses)
        self.acceptance.observe_step(tree, chances, verification.statuses)
        decision = PlanDecision(predicted_accepted=round(predicted, 3), expected_curve=drafted.curve, cut=drafted.cut,
                                verify_ms=drafted.plan.verify_ms if drafted.plan is not None else None,
                                **self._hindsight(tree))
        if self.budget.auto:
            self.online_cost.observe(len(tree), forward_ms)
        # reaching max_new_tokens is no finish: a later run with a higher limit carries on
        if eos_at is not None:
            self.finish_reason = "eos"
        elif len(self.context) >= self.lm.max_context:
            self.finish_reason = "context"
        record = self._record(drafted, verification, committed, past_len, decision, sampling, drafter_notes,
                              calibrated)
        t3 = time.perf_counter()  # the step record is part of the step's cost (update includes it)
        record.timings_ms = timings = StepTimings(
            draft=_ms(t1 - t0), verify=_ms(t2 - t1), forward=_ms(t_forward - t1), update=_ms(t3 - t2),
            total=_ms(t3 - t0))
        self.records.append(record)
        self.step_s += t3 - t0
        self._outside_ms.append(timings.total - timings.draft - timings.forward)
        return record

    def _hindsight(self, tree: DraftTree) -> dict[str, float]:
        """PlanDecision's learnt_accepted and unlearnt_accepted of the verified tree (call after the step's learning):
        whether the planner learns from a step, and whether what it learnt helps (the prediction chart shows both)."""
        if not tree.num_drafted:
            return {"learnt_accepted": 0.0, "unlearnt_accepted": 0.0}
        learnt, unlearnt = self.acceptance, self.unlearnt
        return {"learnt_accepted": round(sum(learnt.calibrated(tree, learnt.node_chances(tree))[1:]), 3),
                "unlearnt_accepted": round(sum(unlearnt.calibrated(tree, unlearnt.node_chances(tree))[1:]), 3)}

    @property
    def overhead_ms(self) -> float:
        """A step's time besides drafting and the verify forward (acceptance, cache and drafter updates, the
        record): the median of the recent steps, which the planner prices with the draft time."""
        return statistics.median(self._outside_ms) if self._outside_ms else 0.0

    def _record(self, drafted: "Drafted", verification, committed, past_len, decision, sampling, drafter_notes,
                chances: list[float]) -> StepRecord:
        """The step's record, its timings still to come (the record is part of the step's update time)."""
        tree = drafted.tree
        # per-node numbers as Python lists first: one conversion per array, not per node
        probs = [round(p, 6) for p in verification.target_probs.tolist()]
        ranks = verification.target_ranks.tolist()
        token_text, statuses = self.token_text, verification.statuses
        accepted, transferred = NodeStatus.ACCEPTED, NodeStatus.TRANSFERRED
        nodes = [NodeRecord(id=0, parent=tree.parents[0], depth=tree.depths[0], token_id=tree.tokens[0],
                            text=token_text(tree.tokens[0]), sources=sorted(tree.sources[0]), status=statuses[0],
                            meta=tree.meta[0])]  # the root: no target statistics, no score
        for n in range(1, len(tree)):
            node_meta, status = tree.meta[n], statuses[n]
            nodes.append(NodeRecord(
                id=n, parent=tree.parents[n], depth=tree.depths[n], token_id=tree.tokens[n],
                text=token_text(tree.tokens[n]), sources=sorted(tree.sources[n]),
                # the trace's statuses stay the contract's; a transfer is an accepted node with a mark
                status=accepted if status is transferred else status,
                mark=transferred if status is transferred else None,
                target_prob=probs[n], target_rank=ranks[n],
                draft_prob=node_meta["model"].get("draft_prob") if "model" in node_meta else None,
                score=round(tree.score(n), 6), meta=node_meta, chance=round(chances[n], 4)))
        origins = [CommitOrigin(tuple(sorted(tree.sources[n])), BENT_MARKS.get(statuses[n]))
                   for n in verification.path[:len(committed) - 1]]
        origins += [BONUS_ORIGIN] * (len(committed) - len(origins))
        return StepRecord(
            step=len(self.records), prefix_len=past_len + 1, budget=drafted.budget,
            budget_mode=self.budget.mode, nodes=nodes,
            accepted_tokens=list(committed), accepted_origins=origins, allocation=tree.allocation(),
            timings_ms=StepTimings(), split=drafted.split, plan=decision, sampling=sampling,
            drafter_notes=drafter_notes, cut_nodes=drafted.cut_nodes())

    # ---- many steps -----------------------------------------------------------------------------
    def run(self, max_new_tokens: int, should_stop: Callable[[], bool] | None = None,
            on_step: Callable[[StepRecord], None] | None = None) -> list[StepRecord]:
        """Step until max_new_tokens output tokens, EOS, the context limit or should_stop()."""
        new_records = []
        while not self.finished and len(self.output_ids) < max_new_tokens:
            if should_stop is not None and should_stop():
                break
            record = self.step(max_new_tokens)
            new_records.append(record)
            if on_step is not None:
                on_step(record)
        if self.finished or len(self.output_ids) >= max_new_tokens:
            self.report_finish()
        return new_records

    def report_finish(self) -> None:
        """Tell the method (once per generation) that its answer is complete, e.g. to grow a datastore."""
        if self.method is not None and not self._finish_reported and self.output_ids:
            self._finish_reported = True
            self.method.finish(self.output_ids)
