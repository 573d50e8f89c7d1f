"""budget=auto: keep the draft nodes whose expected acceptance pays for their verify cost.

Each node's chance of being accepted given that its parent was is learnt online, keyed by
(sources, depth, rank among the source's siblings). A node's unconditional chance is the product along
its path, and since at most one node per depth is accepted, the expected number of accepted drafts of a
tree is the sum of those chances. Taking nodes best-first, the planner keeps the prefix that maximises
(1 + expected accepted drafts) / cost(1 + nodes): tokens per unit of measured time (READER's Theorem 1
with the cost curve as T_V). Estimates decay towards the prior, so a source that stopped being drafted
is tried again after a while instead of being written off for good.
"""

from __future__ import annotations

from specviz.costmodel import CostModel
from specviz.tree import DraftTree

MAX_DEPTH_KEY = 12
MAX_RANK_KEY = 4


def node_key(tree: DraftTree, node: int) -> tuple:
    sources = "+".join(sorted(tree.sources[node]))
    rank = min((m.get("rank", 0) for m in tree.meta[node].values()), default=0)
    return sources, min(tree.depths[node], MAX_DEPTH_KEY), min(int(rank), MAX_RANK_KEY)


class AcceptanceModel:
    def __init__(self, prior: float = 0.5, prior_weight: float = 2.0, decay: float = 0.98):
        self.prior, self.prior_weight, self.decay = prior, prior_weight, decay
        self.accepted: dict[tuple, float] = {}
        self.compared: dict[tuple, float] = {}

    def conditional(self, key: tuple) -> float:
        return ((self.accepted.get(key, 0.0) + self.prior * self.prior_weight)
                / (self.compared.get(key, 0.0) + self.prior_weight))

    def node_chances(self, tree: DraftTree) -> list[float]:
        """Unconditional acceptance chance of every node (root: 1)."""
        chances = [1.0] * len(tree)
        for node in range(1, len(tree)):
            chances[node] = chances[tree.parents[node]] * self.conditional(node_key(tree, node))
        return chances

    def update(self, tree: DraftTree, statuses: list[str]) -> None:
        """Learn from the nodes the target compared (accepted / relaxed / rejected); forget a little."""
        for table in (self.accepted, self.compared):
            for key in table:
                table[key] *= self.decay
        for node in range(1, len(tree)):
            status = statuses[node]
            if status in ("accepted", "relaxed", "rejected"):
                key = node_key(tree, node)
                self.compared[key] = self.compared.get(key, 0.0) + 1.0
                if status != "rejected":
                    self.accepted[key] = self.accepted.get(key, 0.0) + 1.0


def plan(tree: DraftTree, acceptance: AcceptanceModel, cost: CostModel, max_nodes: int) -> tuple[list[int], dict]:
    """The best-first node order and how many of its nodes to keep; also the numbers behind the choice."""
    chances = acceptance.node_chances(tree)
    order = tree.expansion_order(key=lambda n: (-chances[n], n))[:max_nodes]
    best_keep, best_rate, expected = 0, 1.0 / cost.cost_ms(1), 0.0
    for kept, node in enumerate(order, start=1):
        expected += chances[node]
        rate = (1.0 + expected) / cost.cost_ms(1 + kept)
        if rate > best_rate:
            best_keep, best_rate = kept, rate
    expected_kept = sum(chances[n] for n in order[:best_keep])
    return order[:best_keep], {"offered": tree.num_drafted, "kept": best_keep,
                               "expected_accepted": round(expected_kept, 3),
                               "expected_tokens_per_s": round(1000 * best_rate, 2)}

