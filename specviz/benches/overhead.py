"""Per-step time outside the target's forward pass, by method and budget."""

from __future__ import annotations

import statistics

from specviz.runtime.native import logit_kernel
from specviz.runtime.loading import LoadedModel
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem
from specviz.tree.budget import Budget


def step_overhead(lm: LoadedModel, suite: list[SuiteItem], method: str, budget: Budget | int | str, max_new_tokens: int,
                  params: dict | None = None, draft=None) -> dict:
    """Median milliseconds per step spent outside the target's forward pass (drafting, union, mask,
    acceptance, cache compaction, drafter updates, the step record), over every step of every prompt. budget: a
    Budget, or its text form (the CLI's). draft: the model drafter of a method that takes one (None: the target's
    own weights)."""
    budget = Budget.parse(budget)
    parts: dict[str, list[float]] = {"outside_forward": [], "draft": [], "verify_minus_forward": [], "update": [],
                                     "forward": [], "tree_nodes": []}
    for item in suite:
        run = run_method(lm, method, item.messages, params=params, budget=budget, max_new_tokens=max_new_tokens,
                         draft=draft)
        for record in run.records:
            t = record.timings_ms
            parts["outside_forward"].append(t.total - t.forward)
            parts["draft"].append(t.draft)
            parts["verify_minus_forward"].append(t.verify - t.forward)
            parts["update"].append(t.update)
            parts["forward"].append(t.forward)
            parts["tree_nodes"].append(len(record.nodes) - 1)
    # the same figure over the steps whose tree (nearly) filled the budget: the cost of a full tree
    full = [o for o, n in zip(parts["outside_forward"], parts["tree_nodes"])
            if budget.nodes is not None and n >= 0.9 * budget.nodes]
    return {"method": method, "budget": budget.setting, "logits_kernel": logit_kernel.status(), "steps": len(parts["draft"]),
            **{f"median_{k}": round(statistics.median(v), 3) for k, v in parts.items()},
            "max_tree_nodes": max(parts["tree_nodes"]), "full_tree_steps": len(full),
            "median_outside_forward_full_tree": round(statistics.median(full), 3) if full else None}
