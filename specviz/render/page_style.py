"""The page's look and its small scripts: the tree first (the settings in a side panel, the tree the largest
thing on the first screen), presentation mode, the keys, and a first visit that plays until it is touched."""

from __future__ import annotations

from specviz.render.tree_svg import TREE_CSS
from specviz.render.step_panels import TOKEN_CSS

TITLE_HTML = ('<div class="brand"><strong>specviz</strong> <span>speculative decoding with draft trees: each step '
              'drafts a tree, verifies it in one forward pass, keeps what the model agrees with</span></div>')

LAYOUT_CSS = """
.gradio-container { max-width: 100% !important; padding-top: 4px !important; }
#topbar { align-items: center; gap: 6px; flex-wrap: nowrap; }
#topbar button { padding-left: 8px; padding-right: 8px; }
#brand { flex: 1 1 auto; min-width: 0; }
.brand { font-size: 14px; line-height: 1.3; color: #444; }
.brand strong { font-size: 20px; color: #111; margin-right: 6px; }
#stage { gap: 12px; }
#text-col { min-width: 300px; }
#generated .generated { max-height: calc(100vh - 390px); overflow-y: auto; }
#counters, #step-caption { font-size: 14px; }
#paper-note { font-size: 13px; }
/* panels with nothing to show, from the tree box's flags (lab/lab.py: view) */
body:has(#tree-box .tv[data-has-sampling="0"]) #distribution-plot,
body:has(#tree-box .tv[data-has-sampling="0"]) #node-pick,
body:has(#tree-box .tv[data-has-plan="0"]) #prediction-plot,
body:has(#tree-box .tv[data-has-document="0"]) #document,
body:has(#tree-box .tv[data-has-diff="0"]) #token-diff { display: none !important; }
/* tables: a word is never broken across lines; a wide table scrolls instead */
.prose table, table { word-break: normal !important; overflow-wrap: normal !important; }
.prose th, .prose td { white-space: nowrap; }
.prose table { display: block; overflow-x: auto; max-width: 100%; }
/* the Run's breakdown sits in the narrow right column: its cells wrap, small, so that both sides' figures show */
#counters table { font-size: 12px; }
#counters th, #counters td { white-space: normal; padding: 3px 6px; }
#counters td:first-child { min-width: 9em; }
/* the budget split's six columns in half the page's width (at 1440x900 its last column was cut off) */
#budget-split table { font-size: 13px; }
#budget-split th, #budget-split td { padding: 3px 8px; }
/* presentation mode: no controls, everything larger (Gradio prefixes each rule with its container's
   classes, so rules keyed on <body> need !important to win) */
body.presenting #settings-panel, body.presenting .sidebar, body.presenting #topbar > :not(#present-btn),
body.presenting #details-tabs, body.presenting #timeline-row, body.presenting #message, body.presenting footer,
body.presenting #counters, body.presenting #live-status { display: none !important; }
body.presenting #topbar { position: fixed !important; top: auto !important; bottom: 8px; right: 10px; z-index: 50; width: auto !important; }
/* the tree box fills the screen's height: its bar and legend take what they need, the drawing the rest */
body.presenting #tree-box .tv { display: flex; flex-direction: column; height: calc(100vh - 24px); }
body.presenting #tree-box .tv-frame { flex: 1 1 auto; min-height: 0; }
body.presenting #tree-box .tv-scroll { --tree-max-height: 100%; height: 100%; }
body.presenting #tree-col { flex: 1 1 0 !important; min-width: 0 !important; }
body.presenting #text-col { flex: 0 0 20% !important; min-width: 0 !important; }
body.presenting .gradio-container { padding-left: 8px !important; padding-right: 8px !important; }
body.presenting .tv-bar, body.presenting .tv-legend { font-size: 19px !important; }
body.presenting .ph, body.presenting .tv-sw { font-size: 18px !important; }
body.presenting #generated .generated { font-size: 18px !important; max-height: calc(100vh - 260px) !important; }
body.presenting #step-caption, body.presenting .prompt { font-size: 18px !important; }
"""

PAGE_CSS = "\n".join([TOKEN_CSS, TREE_CSS, LAYOUT_CSS])

# once per page: the ← / → keys move the timeline (not while typing in a field), Escape leaves presentation
# mode, the play pace feeds the step animation, and the first touch of a first visit stops its autoplay
# (Play and the pace slider excepted: they take it over; Step and Run stop it on the server)
PAGE_JS = """
() => {
  document.addEventListener('keydown', (event) => {
    const typing = ['INPUT', 'TEXTAREA', 'SELECT'].includes(event.target.tagName) || event.target.isContentEditable;
    if (event.key === 'Escape' && document.body.classList.contains('presenting')) {
      document.getElementById('present-btn')?.click();
      return;
    }
    if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
    const id = {ArrowRight: 'next-btn', ArrowLeft: 'prev-btn'}[event.key];
    if (id) { document.getElementById(id)?.click(); event.preventDefault(); }
  });
  document.addEventListener('input', (event) => {
    if (event.target.closest && event.target.closest('#pace')) {
      document.documentElement.style.setProperty('--pace', String(parseFloat(event.target.value) || 2));
    }
  });
  const stopAutoplay = (event) => {
    if (!document.querySelector('.autoplay-flag')) return;
    // Step and Run end it themselves (lab.Lab.step, run): a Pause beside them would draw the page on the server
    // while the first Run reads its prompt
    if (event.target.closest && event.target.closest('#play-btn, #pace, #present-btn, #step-btn, #run-btn')) return;
    document.getElementById('pause-btn')?.click();
  };
  document.addEventListener('pointerdown', stopAutoplay, true);
  document.addEventListener('keydown', stopAutoplay, true);
  // a Step or Run clicked while the freshly loaded page is still drawing itself (its first view: the tree, the
  // figures) is sent once that view is in and the browser idle, a few seconds after load at most: where the server shares the
  // cores with the browser (a laptop), the page's own start-up took them from the first Run's prefill, and the first
  // Run read slower than every later one (docs/benchmarks.md, "The page's own Run against bench"). Later clicks go
  // at once.
  const loadedAt = performance.now();
  const whenIdle = (fn) => window.requestIdleCallback ? requestIdleCallback(fn, {timeout: 2000}) : setTimeout(fn, 300);
  const settled = new Promise((resolve) => {
    // the first visit's session is in once its autoplay flag is (a page opened otherwise waits 4 s at most); then
    // two idle periods, as one may fall between two bursts of drawing
    const firstView = () => (document.querySelector('.autoplay-flag') || performance.now() - loadedAt > 4000)
      ? whenIdle(() => whenIdle(resolve)) : setTimeout(firstView, 100);
    firstView();
  });
  let isSettled = false;
  settled.then(() => { isSettled = true; });
  document.addEventListener('click', (event) => {
    const button = event.target.closest && event.target.closest('#run-btn, #step-btn');
    if (!button || isSettled || event.specvizHeld) return;
    event.stopImmediatePropagation();
    event.preventDefault();
    settled.then(() => {
      const again = new MouseEvent('click', {bubbles: true, cancelable: true});
      again.specvizHeld = true;
      button.dispatchEvent(again);
    });
  }, true);
}
"""

# the Present button: presentation mode on and off (the page only: nothing goes to the server)
PRESENT_JS = """
() => {
  const on = document.body.classList.toggle('presenting');
  const button = document.getElementById('present-btn');
  if (button) button.textContent = on ? 'Exit presentation' : 'Present';
}
"""
