"""What a verification decided about one node of the draft tree: the one vocabulary of node statuses that
the acceptance rules write, the planner learns from and every view draws.

A StrEnum, so a status is also its own text: it compares, hashes and formats as "accepted", and a trace
stores it as that string."""

from __future__ import annotations

from enum import StrEnum


class NodeStatus(StrEnum):
    ROOT = "root"                # the step's root: the last committed token, not a draft
    ACCEPTED = "accepted"        # on the accepted path by the target's own rule
    RELAXED = "relaxed"          # on the accepted path by ReSpec's relaxed rule (the target's argmax differed)
    # on the accepted path by RAPID's p_hat where p alone would have refused it (same coin). A verification
    # says TRANSFERRED; a NodeRecord says ACCEPTED with mark=TRANSFERRED, as traces always have
    TRANSFERRED = "transferred"
    REJECTED = "rejected"        # compared against the target and refused
    UNREACHED = "unreached"      # never compared: an ancestor or an earlier sibling decided first


# accepted by any rule (a record's transferred node is ACCEPTED, so this holds for records too)
ACCEPTED_STATUSES = (NodeStatus.ACCEPTED, NodeStatus.RELAXED, NodeStatus.TRANSFERRED)
# accepted by a rule that bends the target's p: the views give these their own colour
BENT_STATUSES = (NodeStatus.RELAXED, NodeStatus.TRANSFERRED)
# the target refused the node or never reached it: the views fade these subtrees
REFUSED_STATUSES = (NodeStatus.REJECTED, NodeStatus.UNREACHED)
