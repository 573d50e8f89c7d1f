"""Waits on state for the app's tests (the page's, a server's, a thread's): a deadline to fail by, never a fixed
pause to assert after (a busy machine makes a fixed pause too short). What a test asserts does *not* happen (a
paused timeline stays) is a quiet period measured in the thing's own period (the play pace), not a guessed sleep."""

import os
import time
from pathlib import Path
from typing import Callable

# how long a test waits for what it waits for (a page, a click, a server's answer): a hang detector, never a speed
# target. A busy machine (a neighbour's load beside the other test process, tests/run.sh) slowed a first page load
# past Playwright's 30 s, and a queue join past gradio_client's 5 s
WAIT_MS = 120_000
POLL_S = 0.2


def patient_client(url: str, **options):
    """A gradio_client Client whose every request (the queue join, the event stream, the file upload) waits
    WAIT_MS before it calls the server hung: httpx's default of 5 s is a busy laptop's ordinary delay."""
    from gradio_client import Client

    httpx_kwargs = dict(options.pop("httpx_kwargs", None) or {})
    httpx_kwargs.setdefault("timeout", WAIT_MS / 1000)
    return Client(url, verbose=False, httpx_kwargs=httpx_kwargs, **options)


# what a timed-out page showed, read when the timeout strikes (its message line and step caption)
_SHOWN = """() => ['#message', '#step-caption', '#counters', '#live-status']
    .map(s => s + ': ' + JSON.stringify((document.querySelector(s)?.innerText || '').slice(0, 300))).join('\\n')"""
SHOTS = Path(os.environ.get("SPECVIZ_SCREENSHOTS", "/tmp/specviz-screenshots"))


class PatientBrowser:
    """A browser whose pages wait WAIT_MS by default (clicks, selectors, expectations without a timeout of their
    own), and whose timeouts say what the page showed then."""

    def __init__(self, browser):
        self._browser = browser

    def new_page(self, **options):
        page = self._browser.new_page(**options)
        page.set_default_timeout(WAIT_MS)
        return TellingPage(page, page)

    def __getattr__(self, name):
        return getattr(self._browser, name)


class TellingPage:
    """A Playwright page or locator (and the locators it hands out) whose timeout errors carry a note of the page's
    message line, step caption and counters at that moment, and a screenshot's path: a failure on a busy machine
    then says whether the page was slow, refused something, or stopped. `.plain` is the object itself (what
    Playwright's own `expect` takes)."""

    def __init__(self, target, page):
        self.plain, self._page = target, page

    def __getattr__(self, name):
        from playwright.sync_api import Locator

        value = getattr(self.plain, name)
        if isinstance(value, Locator):
            return TellingPage(value, self._page)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            from playwright.sync_api import TimeoutError as PlaywrightTimeout

            try:
                out = value(*args, **kwargs)
            except PlaywrightTimeout as error:
                error.add_note(self._shown())
                raise
            return TellingPage(out, self._page) if isinstance(out, Locator) else out
        return call

    def _shown(self) -> str:
        try:
            SHOTS.mkdir(parents=True, exist_ok=True)
            shot = SHOTS / f"timeout-{time.strftime('%H%M%S')}-{id(self._page) % 10_000}.png"
            self._page.screenshot(path=str(shot), timeout=10_000)
            return f"the page then showed:\n{self._page.evaluate(_SHOWN)}\nscreenshot: {shot}"
        except Exception as error:  # noqa: BLE001 (the page may be gone: the note says so, the timeout stays)
            return f"the page could not be read after the timeout: {error}"


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


def wait_until_still(page, selector: str = "#tree-box", timeout: int = WAIT_MS) -> None:
    """Wait until the element's animations (the step's draft, verify and commit) have reached their end."""
    page.wait_for_function(_STILL, arg=selector, timeout=timeout)


def wait_for_tree_after(page, steps: int, box: str = "#tree-box", timeout: int = WAIT_MS,
                        run: str | None = None) -> None:
    """Wait until the tree box's run has `steps` steps and draws the last (its data-steps and data-step, as
    render.tree_svg.tree_html writes them), and stands still. run: the box's data-run as well ("live",
    "replay:NAME"); None: any run."""
    selector = f"{box} .tv[data-steps='{steps}'][data-step='{steps - 1}']" + (f"[data-run='{run}']" if run else "")
    page.wait_for_selector(selector, state="attached", timeout=timeout)
    wait_until_still(page, box, timeout)
