"""Waits on the page's own state for the browser tests: a deadline to fail by, never a fixed pause to
assert after (a busy machine makes a fixed pause too short)."""

DEADLINE_MS = 30_000

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


def wait_for_tree_after(page, steps: int, box: str = "#tree-box", timeout: int = DEADLINE_MS) -> None:
    """Wait until the tree box draws the last of `steps` steps (records count from 0: its title starts
    'step {steps - 1}:') and stands still."""
    page.wait_for_function(
        "([box, title]) => (document.querySelector(box + ' .tv-title')?.innerText || '').startsWith(title)",
        arg=[box, f"step {steps - 1}:"], timeout=timeout)
    wait_until_still(page, box, timeout)
