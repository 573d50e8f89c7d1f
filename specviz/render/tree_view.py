"""One step's tree as the views draw it: the verified nodes, the nodes the planner cut (the offered tree),
the bonus token as a node of its own, each with the status its marker shows, the words its hover says,
and when the step's animation brings it in (draft, verify, accept, commit). No geometry, no drawing:
tree_layout places these nodes and tree_svg draws them."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable

from specviz.records.offered import NOT_RANKED
from specviz.records.status import ACCEPTED_STATUSES, REFUSED_STATUSES, NodeStatus
from specviz.records.step import StepRecord

# what a marker shows: the verification's statuses, plus two the views add
CUT = "cut"        # offered by a source, left out by the planner: never verified
BONUS = "bonus"    # the target's own token after the accepted path: every step commits one
MAX_LABEL_CHARS = 12  # a longer token is cut with an ellipsis on its label (its hover has it whole)

# the step's animation, as fractions of one play interval: each source drafts in turn, the planner cuts,
# one forward verifies the kept tree, the accepted path lights up depth by depth, the text grows; the whole
# step then holds still for the last quarter of the interval
DRAFT_END, PLAN_AT, VERIFY_AT, ACCEPT_START, ACCEPT_END, COMMIT_AT, STILL_AT = 0.28, 0.31, 0.37, 0.46, 0.60, 0.64, 0.75


def display_token(text: str) -> str:
    """A token's text with its whitespace made visible (␣ ⏎ ⇥), not escaped: ∅ for the empty string."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def visible_token(text: str) -> str:
    """display_token, escaped for HTML (quotes stay as they are: harmless in text)."""
    return html.escape(display_token(text), quote=False)


def short_label(text: str) -> str:
    shown = display_token(text)
    return shown if len(shown) <= MAX_LABEL_CHARS else shown[:MAX_LABEL_CHARS - 1] + "…"


@dataclass(frozen=True)
class ShownNode:
    id: int
    parent: int                  # -1 for the root
    depth: int
    token_id: int
    label: str                   # the token as its label shows it (whitespace visible, cut when long), unescaped
    sources: tuple[str, ...]     # who proposed it (empty: the root, the bonus)
    status: str                  # a NodeStatus value, CUT or BONUS: the marker's shape
    chance: float | None         # the planner's calibrated chance of acceptance (None: not planned)
    tip: tuple[str, ...]         # hover lines, plain text
    faded: bool                  # cut, or inside a rejected / unreached subtree
    on_path: bool                # the root, the accepted nodes and the bonus: the dark path
    appear: float                # when the animation brings it in (fraction of a play interval)
    reveal: float                # when its marker turns from drafted to its status


@dataclass(frozen=True)
class ShownTree:
    step: int
    nodes: list[ShownNode]
    offered: bool                # whether the cut nodes are in it
    title: str
    stages: tuple[str, ...]      # the sources in drafting order (the animation's order)
    verified: int                # draft nodes verified
    cut: int                     # draft nodes the planner cut
    accepted: int                # accepted drafts
    silent: tuple[str, ...] = ()  # of the stages, those that proposed nothing this step (a skipped model stage)

    @property
    def has_cut(self) -> bool:
        return self.cut > 0


def shown_tree(record: StepRecord, token_text: Callable[[int], str], offered: bool = True) -> ShownTree:
    """The step's tree for the views; offered: with the nodes the planner cut (when the step recorded them)."""
    stages = tuple(record.split) if record.split else tuple(sorted({s for n in record.nodes for s in n.sources}))
    cut_nodes = record.cut_nodes if offered else None
    faded = _refused_subtrees(record)
    depth = {n.id: n.depth for n in record.nodes}
    verified = len(record.nodes) - 1
    max_depth = max([*depth.values(), *((depth[p] + 1) for p in (record.cut_nodes.parents if cut_nodes else ())
                                        if p in depth)], default=0)

    def appear(sources, d) -> float:
        stage = min((stages.index(s) for s in sources if s in stages), default=0)
        slot = DRAFT_END / max(1, len(stages))
        return round(stage * slot + slot * 0.85 * (d - 1) / max(1, max_depth), 3)

    def reveal(d) -> float:  # the target's verdicts come in depth by depth, all within the accept phase
        return round(ACCEPT_START + (ACCEPT_END - ACCEPT_START) * (d - 1) / max(1, max_depth - 1), 3)

    nodes: list[ShownNode] = []
    for n in record.nodes:
        if n.parent < 0:
            nodes.append(ShownNode(n.id, -1, 0, n.token_id, short_label(n.text), (), NodeStatus.ROOT, None,
                                   _root_tip(n.text, n.token_id), False, True, 0.0, 0.0))
            continue
        status = n.shown_status
        nodes.append(ShownNode(n.id, n.parent, n.depth, n.token_id, short_label(n.text), tuple(n.sources),
                               status, n.chance, _verified_tip(n), n.id in faded, status in ACCEPTED_STATUSES,
                               appear(n.sources, n.depth), reveal(n.depth)))
    if cut_nodes:
        for i in range(len(cut_nodes)):
            node_id, parent = len(record.nodes) + i, cut_nodes.parents[i]
            depth[node_id] = depth[parent] + 1
            text = token_text(cut_nodes.tokens[i])
            sources = tuple(cut_nodes.source_list(i))
            nodes.append(ShownNode(node_id, parent, depth[node_id], cut_nodes.tokens[i], short_label(text), sources,
                                   CUT, cut_nodes.chances[i], _cut_tip(record, i, text, parent >= len(record.nodes)),
                                   True, False, appear(sources, depth[node_id]), PLAN_AT))
    bonus = _bonus(record)
    if bonus is not None:
        token, parent = bonus
        text = token_text(token)
        nodes.append(ShownNode(len(nodes), parent, depth[parent] + 1, token, short_label(text), (), BONUS, 1.0,
                               _bonus_tip(text, token), False, True, COMMIT_AT, COMMIT_AT))
    accepted = record.num_accepted_drafts
    shown_cut = len(cut_nodes) if cut_nodes else 0
    title = (f"step {record.step}: {verified} draft nodes verified"
             + (f" of {verified + shown_cut} offered" if shown_cut else "")
             + f" · {accepted} accepted + 1 bonus")
    silent = tuple(s for s, share in record.split.items() if share.proposed == 0) if record.split else ()
    return ShownTree(record.step, nodes, bool(shown_cut), title, stages, verified, shown_cut, accepted, silent)


def _bonus(record: StepRecord) -> tuple[int, int] | None:
    """(bonus token, the node it follows) when the step committed a bonus token."""
    if not record.accepted_origins or not record.accepted_origins[-1].bonus:
        return None
    path = [n for n in record.nodes if n.status in ACCEPTED_STATUSES]
    deepest = max(path, key=lambda n: n.depth, default=None)
    return record.accepted_tokens[-1], deepest.id if deepest is not None else 0


def _refused_subtrees(record: StepRecord) -> set[int]:
    """Nodes that are rejected or unreached, or below one (parents come before their children)."""
    faded: set[int] = set()
    for n in record.nodes:
        if n.status in REFUSED_STATUSES or n.parent in faded:
            faded.add(n.id)
    return faded


# ---- hover text --------------------------------------------------------------------------------------------
_STATUS_WORDS = {NodeStatus.ACCEPTED: "accepted: the target agreed", NodeStatus.RELAXED:
                 "accepted by ReSpec's relaxed rule (the target's top token differed)",
                 NodeStatus.TRANSFERRED: "accepted by RAPID's p_hat (p alone would have refused it)",
                 NodeStatus.REJECTED: "rejected: the target chose another token here",
                 NodeStatus.UNREACHED: "not reached: an ancestor or an earlier sibling decided first"}


def _quoted(text: str, token_id: int) -> str:
    return f"“{display_token(text)}” (token {token_id})"


def _root_tip(text: str, token_id: int) -> tuple[str, ...]:
    return (f"root {_quoted(text, token_id)}", "the last committed token: its row of the verify forward decides "
            "the first drafted level")


def _verified_tip(n) -> tuple[str, ...]:
    lines = [_quoted(n.text, n.token_id), f"proposed by {', '.join(n.sources)}",
             _STATUS_WORDS.get(n.shown_status, str(n.shown_status))]
    if n.target_prob is not None:
        lines.append(f"target p = {n.target_prob:.3f} (rank {n.target_rank})")
    if n.draft_prob is not None:
        lines.append(f"draft p = {n.draft_prob:.3f}")
    if n.chance is not None:
        lines.append(f"planner's chance of acceptance {n.chance:.3f}: kept")
    return tuple(lines)


def _cut_tip(record: StepRecord, i: int, text: str, under_cut: bool) -> tuple[str, ...]:
    """Why the planner cut the node: its chance, its place in the best-first order, what keeping the tree down
    to it would have cost and promised against what the kept tree promised."""
    cut_nodes, plan = record.cut_nodes, record.plan
    chance, rank = cut_nodes.chances[i], cut_nodes.ranks[i]
    lines = [_quoted(text, cut_nodes.tokens[i]), f"proposed by {', '.join(cut_nodes.source_list(i))}",
             f"cut by the planner: chance of acceptance {chance:.3f}" + (" (its parent was cut too)" if under_cut else "")]
    if rank == NOT_RANKED:
        lines.append("beyond the planner's node limit")
        return tuple(lines)
    kept = plan.cut.kept if plan and plan.cut else None
    lines.append(f"#{rank + 1} best-first" + (f"; the planner kept the best {kept}" if kept is not None else ""))
    with_it, kept_rate = (plan.promised_tokens_per_s(rank + 1), plan.promised_tokens_per_s(kept)) if plan and kept is not None \
        else (None, None)
    if with_it is not None and kept_rate is not None and plan.verify_ms:
        extra = plan.verify_ms[rank + 1] - plan.verify_ms[kept]
        lines.append(f"verifying down to it: {rank + 2} tokens, +{extra:.1f} ms, ~{with_it:.0f} tok/s expected "
                     f"against ~{kept_rate:.0f} tok/s for the kept tree")
    return tuple(lines)


def _bonus_tip(text: str, token_id: int) -> tuple[str, ...]:
    return (f"bonus {_quoted(text, token_id)}", "the target's own next token after the accepted path: every step "
            "commits one, drafted or not")
