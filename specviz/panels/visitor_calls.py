"""A handler's model call on behalf of its visitor: who they are (lab.fair_share.visitor_of), their share checked
(one call at a time, tokens per minute; refused with one sentence), and the call's budget (deadline, cancellation
when they leave) for the call loop. Every panel's model event opens one."""

from __future__ import annotations

from contextlib import contextmanager

from specviz.lab.fair_share import SHARE, visitor_of

STEP_TOKENS = 16  # what a Step is charged: more than most steps commit, far less than a Run


@contextmanager
def model_call(request, tokens: int, *labs):
    """The visitor's share for a call asking for up to `tokens` new tokens; labs (the sessions the call steps)
    are marked as theirs, so that the live-session limits count them per visitor."""
    visitor = visitor_of(request)
    for lab in labs:
        lab.visitor_address = visitor.address
    with SHARE.model_call(visitor, tokens) as budget:
        yield budget
