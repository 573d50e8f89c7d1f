"""Waits on state for the app's tests (the page's, a server's, a thread's): a deadline to fail by, never a fixed
pause to assert after (a busy machine makes a fixed pause too short). What a test asserts does *not* happen (a
paused timeline stays) is a quiet period measured in the thing's own period (the play pace), not a guessed sleep."""

import time
from typing import Callable

DEADLINE_MS = 30_000
POLL_S = 0.2


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, every_s: float = POLL_S):
    """Poll predicate until it answers something true, and return that; past timeout_s raise AssertionError
    naming what was awaited (and the last answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = predicate()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last: {answer!r})")
        time.sleep(every_s)


def wait_until_quiet(read: Callable[[], object], quiet_s: float, timeout_s: float, what: str,
                     every_s: float = POLL_S):
    """Poll read() until its value has not changed for quiet_s, and return that value; past timeout_s (a value
    that never settles) raise AssertionError naming what was awaited and the values seen."""
    deadline = time.monotonic() + timeout_s
    value, since, seen = read(), time.monotonic(), []
    seen.append(value)
    while time.monotonic() - since < quiet_s:
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not settle for {quiet_s:g} s within {timeout_s:g} s: "
                                 f"it went {seen[-6:]!r}")
        time.sleep(every_s)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
            seen.append(now)
    return value


def assert_stays(read: Callable[[], object], value, for_s: float, what: str, every_s: float = POLL_S) -> None:
    """Assert read() answers value at every poll for for_s (a change that comes and goes fails too)."""
    until = time.monotonic() + for_s
    while True:
        now = read()
        assert now == value, f"{what} moved: {value!r} became {now!r}"
        if time.monotonic() >= until:
            return
        time.sleep(every_s)

# every finite CSS animation under the element has played out (an infinite one, a pulse, never ends)
_STILL = """(selector) => {
    const box = document.querySelector(selector);
    if (!box) return false;
    return box.getAnimations({subtree: true}).every(a =>
        a.playState === 'finished' || a.playState === 'idle' || a.effect?.getComputedTiming().iterations === Infinity);
}"""


def wait_until_still(page, selector: str = "#tree-box", timeout: int = DEADLINE_MS) -> None:
    """Wait until the element's animations (the step's draft, verify and commit) have reached their end."""
    page.wait_for_function(_STILL, arg=selector, timeout=timeout)


def wait_for_tree_after(page, steps: int, box: str = "#tree-box", timeout: int = DEADLINE_MS,
                        run: str | None = None) -> None:
    """Wait until the tree box's run has `steps` steps and draws the last (its data-steps and data-step, as
    render.tree_svg.tree_html writes them), and stands still. run: the box's data-run as well ("live",
    "replay:NAME"); None: any run."""
    selector = f"{box} .tv[data-steps='{steps}'][data-step='{steps - 1}']" + (f"[data-run='{run}']" if run else "")
    page.wait_for_selector(selector, state="attached", timeout=timeout)
    wait_until_still(page, box, timeout)
