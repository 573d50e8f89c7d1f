"""The page as a first-time visitor and a room see it, in headless Chromium, with no model loaded: the tree
inside the first screen and its largest element, a recording that plays by itself, a 64-node offered tree
whose labels never overlap, a step's animation, and presentation mode. Screenshots go to SPECVIZ_SHOTS."""

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from app_page import launched, page_for  # noqa: E402
from browser_waits import WAIT_MS, assert_stays, wait_until_quiet, wait_until_still  # noqa: E402
from test_app import CHROMIUM, free_port, launch_chromium  # noqa: E402

from specviz.lab.first_visit import FIRST_PACE_S
from specviz.records.offered import CutNodes
from specviz.records.plan import BudgetCut, PlanDecision, SourceShare
from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.records.trace import Trace

SHOTS = Path(os.environ.get("SPECVIZ_SHOTS", "/tmp/specviz-shots"))
CAPTION = "(document.querySelector('#step-caption')?.innerText || '')"
# a timer still running moves the caption once a pace: held this many paces, the step counts as stopped (two, so
# that a tick answered late on a busy machine still shows)
QUIET_PACES = 2
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")]


@pytest.fixture(scope="module")
def page_url():
    """The app with no model loaded (nothing here asks for one)."""
    page = page_for()
    port = free_port()
    launched(page, port)
    yield f"http://127.0.0.1:{port}/"
    page.blocks.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = launch_chromium(p)
        yield chromium
        chromium.close()


def step_in(caption: str) -> int:
    """The step a caption ('Showing step 3 of 19 ...') says is on screen."""
    return int(caption.split("Showing step ")[1].split(" ")[0])


def shown_step(page) -> int:
    """The step on screen, once the caption says it: while an event is on its way Gradio writes its queue status
    ('queue: 1/1 | 0.0/0.1s') over the caption."""
    caption = page.wait_for_function(f"(() => {{ const c = {CAPTION}; return c.includes('Showing step') && c; }})()",
                                     timeout=WAIT_MS)
    return step_in(caption.json_value())


def paused_page(browser, page_url):
    """A first visit at 1280x720, its autoplay stopped by the Pause button."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(page_url, wait_until="load")
    page.wait_for_function(f"{CAPTION}.includes('Showing step')", timeout=WAIT_MS)
    page.locator("#pause-btn").click()
    page.wait_for_function("!document.querySelector('.autoplay-flag')", timeout=WAIT_MS)
    return page


def visible_area(page, selector: str) -> float:
    """The part of an element's box inside the viewport, in px²."""
    return page.evaluate("""(selector) => {
        const element = document.querySelector(selector);
        if (!element) return 0;
        const r = element.getBoundingClientRect();
        const w = Math.max(0, Math.min(r.right, innerWidth) - Math.max(r.left, 0));
        const h = Math.max(0, Math.min(r.bottom, innerHeight) - Math.max(r.top, 0));
        return w * h;
    }""", selector)


# the offered tree's label boxes and node markers in one read: the box's script fits a tall tree to its height and
# scrolls it to the accepted path after Gradio patches it in, and two reads apart could mix two geometries (CI beside
# two busy loops once saw the root's marker over a label of the next band, 3 px, which five runs of the test alone
# beside the same loops did not repeat)
_LABELS_AND_MARKERS = """() => {
    const box = (r) => [r.left, r.top, r.right, r.bottom];
    const svg = '#tree-box svg.tv-offered';
    return [Array.from(document.querySelectorAll(svg + ' text.lbl')).map(t => [...box(t.getBoundingClientRect()), t.textContent]),
            Array.from(document.querySelectorAll(svg + ' g.n')).map(g => box(g.querySelector('.m-final').getBoundingClientRect()))];
}"""


@pytest.mark.parametrize("width,height", [(1280, 720), (1440, 900)])
def test_the_first_screen_shows_the_tree_first_and_it_plays_by_itself(page_url, browser, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    started = time.perf_counter()
    page.goto(page_url, wait_until="load")
    # the first caption the page shows, read as it appears: read after the checks below, a busy machine had moved
    # the recording on, and the test waited a whole loop of it to see step 0 again
    first_caption = page.wait_for_function(
        f"(() => {{ const c = {CAPTION}; return c.includes('Showing step') && c; }})()", timeout=WAIT_MS).json_value()
    page.wait_for_selector("#tree-box svg.tv-svg g.n", timeout=WAIT_MS)
    first_tree_s = time.perf_counter() - started
    print(f"\nfirst tree on screen {first_tree_s:.2f} s after navigation ({width}x{height})")
    box = page.locator("#tree-box .tv-scroll").bounding_box()
    assert box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height
    tree = visible_area(page, "#tree-box .tv-scroll")
    for other in ("#text-col", "#topbar", "#timeline-row", "#details-tabs", "#settings-panel", "#message"):
        assert tree > visible_area(page, other), other
    # the recording opened at its first step, its prompt shown and marked, and moves on by itself
    assert "Showing step 0 " in first_caption, first_caption
    assert "recorded run" in page.locator("#generated").inner_text().lower()
    assert "Rename the function" in page.locator("#generated").inner_text()
    font = page.evaluate("""() => {
        const svg = document.querySelector('#tree-box svg.tv-svg');
        const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
        return parseFloat(svg.querySelector('text.lbl').getAttribute('font-size')) * scale;
    }""")
    assert font >= 14
    page.wait_for_function(f"(c => c.includes('Showing step') && !c.includes('Showing step 0 '))({CAPTION})",
                           timeout=WAIT_MS)  # it moved on (a loaded machine may show step 2 before this looks)
    wait_until_still(page)  # the step's animation to its end
    page.screenshot(path=str(SHOTS / f"first-{width}x{height}.png"))
    status = page.locator("#live-status")  # the start-up line, where it says anything, is on the first screen
    if status.inner_text().strip():
        assert status.bounding_box()["y"] + status.bounding_box()["height"] <= height
    # the first touch stops the autoplay: the shown step stays
    page.locator("#brand").click()
    page.wait_for_function("!document.querySelector('.autoplay-flag')", timeout=WAIT_MS)
    touched = shown_step(page)
    caption = lambda: page.evaluate(CAPTION)  # noqa: E731
    settled = wait_until_quiet(caption, QUIET_PACES * FIRST_PACE_S, WAIT_MS / 1000,
                               "the caption after the first touch")
    assert step_in(settled) == touched, settled
    assert_stays(caption, settled, FIRST_PACE_S, "the caption after the first touch")
    page.close()


def offered_trace(path: Path, drafted: int = 64, kept: int = 9, seed: int = 3) -> Path:
    """A replayable trace of one step whose sources offered `drafted` nodes and the planner kept `kept`:
    tokens of every awkward kind (spaces, newlines, markup, long words)."""
    rng = random.Random(seed)
    words = [" the", " a", "\n", " return", "(", " total", " = ", " values", ":", " for", "<b>", " mean", "_", "\t",
             " describe", "average", " len", "))", " f\"min", " high", "verylongidentifier_name", " ", ".", ","]
    parents = [-1]
    for i in range(1, drafted + 1):
        parents.append(rng.choice(range(max(0, i - 5), i)) if rng.random() < 0.75 else rng.randrange(i))
    depth = [0]
    for i in range(1, drafted + 1):
        depth.append(depth[parents[i]] + 1)
    keep = set(range(kept + 1))
    keep |= {p for i in keep for p in [parents[i]] if p >= 0}
    keep = sorted(keep)
    new_id = {old: new for new, old in enumerate(keep)}
    nodes, texts = [], {}
    for old in keep:
        token = 1000 + old
        texts[str(token)] = rng.choice(words)
        on_path = old == 1 or old == 2 and parents[2] == 1
        status = NodeStatus.ROOT if old == 0 else NodeStatus.ACCEPTED if on_path else NodeStatus.REJECTED
        nodes.append(NodeRecord(id=new_id[old], parent=new_id.get(parents[old], -1), depth=depth[old], token_id=token,
                                text=texts[str(token)], sources=[] if old == 0 else [rng.choice(["retrieval", "logits"])],
                                status=status, target_prob=None if old == 0 else 0.3, target_rank=0,
                                chance=None if old == 0 else round(rng.random(), 3)))
    cut = CutNodes()
    for old in range(1, drafted + 1):
        if old in new_id:
            continue
        new_id[old] = len(nodes) + len(cut)
        token = 1000 + old
        texts[str(token)] = rng.choice(words)
        cut.parents.append(new_id[parents[old]])
        cut.tokens.append(token)
        cut.sources.append(rng.choice(["retrieval", "logits", "logits+retrieval"]))
        cut.chances.append(round(rng.random() * 0.1, 4))
        cut.ranks.append(len(nodes) - 1 + len(cut) - 1)
    texts["999"] = " end"
    accepted = [n for n in nodes if n.status is NodeStatus.ACCEPTED]
    expected = [round(0.3 * k ** 0.5, 3) for k in range(drafted + 1)]
    record = StepRecord(step=0, prefix_len=50, budget=kept, budget_mode="auto", nodes=nodes,
                        accepted_tokens=[n.token_id for n in accepted] + [999],
                        accepted_origins=[n.sources[0] for n in accepted] + ["bonus"],
                        allocation={"retrieval": 5, "logits": 4},
                        timings_ms={"draft": 2.0, "verify": 30.0, "forward": 28.0, "update": 1.0, "total": 33.0},
                        split={"retrieval": SourceShare(64, 30, 0), "logits": SourceShare(34, 40, 6)},
                        plan=PlanDecision(predicted_accepted=1.2, expected_curve=expected,
                                          cut=BudgetCut(offered=drafted, kept=len(nodes) - 1, expected_accepted=1.2,
                                                        draft_ms=2.0, expected_tokens_per_s=70.0),
                                          verify_ms=[15.0 + 0.4 * k for k in range(drafted + 1)]),
                        cut_nodes=cut)
    trace = Trace(model="synthetic", method="unified", params={"budget": "auto"}, prompt_ids=[1, 2, 3],
                  output_ids=record.accepted_tokens, steps=[record], token_texts=texts,
                  prompt_text="<|im_start|>user\nA 64-node offered tree<|im_end|>\n", recorded_on="a test")
    trace.save(path)
    return path


def test_a_64_node_offered_tree_has_no_two_labels_overlapping(page_url, browser, tmp_path):
    page = paused_page(browser, page_url)
    page.get_by_role("tab", name="Replay").click()
    page.locator("#upload-trace input[type=file]").set_input_files(str(offered_trace(tmp_path / "offered.json")))
    page.wait_for_function("(document.querySelector('#tree-box .tv-title')?.innerText || '').includes('of 64 offered')",
                           timeout=WAIT_MS)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.mouse.move(1270, 600)  # off the tree: no hover tip in the screenshots
    wait_until_still(page)  # the step's animation, to its end
    boxes, markers = wait_until_quiet(lambda: page.evaluate(_LABELS_AND_MARKERS), 0.3, WAIT_MS / 1000,
                                      "the offered tree's labels and markers")
    assert len(boxes) == 64 + 2  # the root, 64 offered nodes, the bonus
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
            assert not overlap, (a, b)
    heights = [b[3] - b[1] for b in boxes]
    assert min(heights) >= 14  # the labels' glyph boxes: at least 14 px text
    for i, m in enumerate(markers):  # no label over another node's marker
        for j, b in enumerate(boxes):
            assert i == j or not (m[0] < b[2] and b[0] < m[2] and m[1] < b[3] and b[1] < m[3]), (m, b)
    page.screenshot(path=str(SHOTS / "offered-64-1280x720.png"))
    # the tree is taller than its box: a hint says so; scrolled to the end, its last band ends inside the box,
    # above the legend
    scroll = page.locator("#tree-box .tv-scroll")
    if page.evaluate("() => { const b = document.querySelector('#tree-box .tv-scroll'); "
                     "return b.scrollHeight > b.clientHeight + 2; }"):
        scroll.evaluate("b => { b.scrollTop = 0; b.dispatchEvent(new Event('scroll')); }")
        assert page.locator("#tree-box .tv-more-down").is_visible()
        scroll.evaluate("b => { b.scrollTop = b.scrollHeight; b.dispatchEvent(new Event('scroll')); }")
        # the hints follow the scroll: waited for, each failing by the deadline if it never comes
        page.locator("#tree-box .tv-more-down").wait_for(state="hidden", timeout=WAIT_MS)
        page.locator("#tree-box .tv-more-up").wait_for(state="visible", timeout=WAIT_MS)
    lowest = max(page.evaluate("""() => Array.from(document.querySelectorAll('#tree-box svg.tv-offered text.lbl'))
        .map(t => t.getBoundingClientRect().bottom)"""))
    frame, legend = scroll.bounding_box(), page.locator("#tree-box .tv-legend").bounding_box()
    assert lowest <= frame["y"] + frame["height"] and lowest <= legend["y"]
    page.screenshot(path=str(SHOTS / "offered-64-scrolled-1280x720.png"))
    # greedy: the p / q / p_hat panel has nothing to show and is hidden; the planner's predictions are shown
    page.get_by_role("tab", name="Step details").click()
    page.locator("#prediction-plot").wait_for(state="visible", timeout=WAIT_MS)
    assert not page.locator("#distribution-plot").is_visible() and not page.locator("#node-pick").is_visible()
    assert page.locator("#prediction-plot").is_visible()
    # a cut node says why on hover; the switch shows the verified tree alone
    page.locator("#tree-box svg.tv-offered g.n-cut").first.hover()
    tip = page.locator("#tree-box .tv-tip")
    assert "cut by the planner" in tip.inner_text()
    page.locator("#tree-box .tv-sw-verified").click()
    assert page.locator("#tree-box svg.tv-verified").is_visible()
    assert not page.locator("#tree-box svg.tv-offered").is_visible()
    assert page.locator("#tree-box svg.tv-verified g.n-cut").count() == 0
    page.locator("#tree-box .tv-sw-offered").click()
    page.close()


def test_a_step_is_animated_at_the_play_pace(page_url, browser):
    page = paused_page(browser, page_url)
    # a tick answered late on a busy machine can still move the step after Pause (beside two busy loops the
    # step read here was passed by one, and the next step's tree was waited for in vain): read it once it holds
    wait_until_quiet(lambda: page.evaluate(CAPTION), QUIET_PACES * FIRST_PACE_S, WAIT_MS / 1000,
                     "the caption after Pause")
    shown = shown_step(page)
    caption = page.evaluate(f"() => {CAPTION}")
    if shown >= int(caption.split(" of ")[1].split(" ")[0]):  # a slow machine's autoplay reached the last step
        page.locator("#prev-btn").click()
        page.wait_for_selector(f"#tree-box .tv[data-step='{shown - 1}']", state="attached", timeout=WAIT_MS)
        shown -= 1
    # the animations that start are recorded by the page itself: on a busy machine a poll from here can come
    # after the step's phase chips have played out (they hold no end state)
    page.evaluate("() => { window.started = new Set();"
                  " document.addEventListener('animationstart', e => window.started.add(e.animationName)); }")
    page.locator("#next-btn").click()
    page.wait_for_selector(f"#tree-box .tv[data-step='{shown + 1}']", state="attached", timeout=WAIT_MS)
    # draft (nodes come in), the phase chips, verify (the pulse): all start within the step
    page.wait_for_function("['tv-in', 'tv-ph', 'tv-pulse'].every(name => window.started.has(name))", timeout=WAIT_MS)
    page.screenshot(path=str(SHOTS / "animation-frame-1280x720.png"))  # mid-step: verified, accepting
    bonus = "#tree-box svg:not([style*='display: none']) g.n-bonus .n-in"
    pulse = "#tree-box svg:not([style*='display: none']) .pulse"
    delays = page.evaluate(f"""() => [\"{bonus}\", \"{pulse}\"].map(
        s => parseFloat(getComputedStyle(document.querySelector(s)).animationDelay))""")
    assert delays[0] > delays[1] > 0  # the bonus comes in at the commit, after the verify forward
    # the pace is 2.5 s a step and the step is whole from 0.75 of it: the bonus's animation ends by then (read
    # from its timing, not from a clock on a busy machine), and it does end
    end = page.evaluate(f"""() => {{ const s = getComputedStyle(document.querySelector(\"{bonus}\"));
        return parseFloat(s.animationDelay) + parseFloat(s.animationDuration); }}""")
    assert 0 < end <= 0.75 * 2.5 + 1e-6, end
    wait_until_still(page)
    assert float(page.evaluate(f"() => getComputedStyle(document.querySelector(\"{bonus}\")).opacity")) == 1.0
    new_tokens = page.locator("#generated .tok-new").count()
    assert new_tokens >= 1  # the text grows by the step's tokens
    page.close()


def test_presentation_mode_hides_the_controls_and_enlarges_the_tree(page_url, browser):
    page = paused_page(browser, page_url)
    page.locator("#next-btn").click()
    page.wait_for_function(f"{CAPTION}.includes('Showing step 1 ') || {CAPTION}.includes('Showing step 2 ')",
                           timeout=WAIT_MS)
    wait_until_still(page)  # the step's animation to its end
    before = page.locator("#tree-box svg.tv-svg:not(.tv-verified)").bounding_box()
    page.locator("#present-btn").click()
    page.wait_for_function("document.body.classList.contains('presenting')")
    page.wait_for_function(f"document.querySelector('#tree-box svg.tv-svg:not(.tv-verified)').getBoundingClientRect().width"
                           f" > 1.15 * {before['width']}", timeout=WAIT_MS)  # the layout has settled
    for hidden in ("#step-btn", "#run-btn", "#details-tabs", "#timeline-row", "#settings-panel"):
        assert not page.locator(hidden).first.is_visible(), hidden
    after = page.locator("#tree-box svg.tv-svg:not(.tv-verified)").bounding_box()
    assert after["width"] > 1.15 * before["width"]  # the tree scales with its box: every label larger
    assert page.locator("#present-btn").is_visible() and page.locator("#generated").is_visible()
    page.screenshot(path=str(SHOTS / "presentation-1280x720.png"))
    page.keyboard.press("Escape")
    page.wait_for_function("!document.body.classList.contains('presenting')")
    assert page.locator("#step-btn").is_visible()
    page.close()
