"""The app as its users reach it: through gradio_client, and in a real headless Chromium."""

import os
import shutil
import socket
from pathlib import Path

import pytest
from browser_waits import (WAIT_MS, PatientBrowser, assert_stays, patient_client, wait_for_tree_after, wait_until,
                           wait_until_quiet, wait_until_still)

from app_page import CONTEXT, counters_of, launched, named, page_for, sweep_answer  # noqa: E402

from specviz.lab.visitor_request import PARAMS  # noqa: E402
from specviz.panels.page_context import MODEL_CONCURRENCY  # noqa: E402

PROMPT = "Repeat twice: <b>bold</b> & more, <b>bold</b> & more."
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("SPECVIZ_SCREENSHOTS", "/tmp/specviz-screenshots"))
PLAY_PACE_S = 0.3  # the pace the timeline test plays at (s per step)
# a timer still running moves the caption once a pace: unchanged this many paces, a step counts as held (five,
# so that a tick answered late on a busy machine still shows)
QUIET_PACES = 5


def launch_chromium(playwright) -> PatientBrowser:
    """Debian's headless Chromium, as these tests drive it."""
    return PatientBrowser(playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]))


def open_settings(page) -> None:
    """Open the Settings side panel (closed on a first visit, so that the tree has the screen)."""
    panel = page.locator("#settings-panel")
    panel.wait_for(state="attached", timeout=WAIT_MS)
    if "open" not in (panel.get_attribute("class") or "").split():
        panel.locator(".toggle-button").click()
        page.wait_for_function("document.querySelector('#settings-panel').classList.contains('open')", timeout=WAIT_MS)
        wait_until_still(page, "#settings-panel")  # the panel slides in


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(lm):
    page = page_for()
    port = free_port()
    launched(page, port)
    yield f"http://127.0.0.1:{port}/"
    page.blocks.close()


def settings(prompt=PROMPT, method="pld", max_new_tokens=16, model="", budget=8, draft_model="", mode="",
             temperature=0.0, top_p=1.0, seed=0, **params):
    """The named parameters of /step, /run, /ab_step, ... (every method parameter at its default unless given)."""
    return {"max_new_tokens": max_new_tokens, "model": model, "draft_model": draft_model, "mode": mode,
            "prompt": prompt, "method": method, "auto_budget": False, "budget": budget, "temperature": temperature,
            "top_p": top_p, "seed": seed, **{p.name: params.get(p.name, p.default) for p in PARAMS}}


def test_step_run_and_bad_input_through_gradio_client(url):

    client = patient_client(url)
    out = named(client.predict(**settings(), api_name="/step"))
    assert counters_of(client)["figures"]["steps"] == 1 and out["message"] == ""
    assert "<b>" not in out["text_html"]  # tokens are escaped
    out = named(client.predict(**settings(), api_name="/run"))
    counters = counters_of(client)
    versus = counters["versus_ar"]  # the speedup over ar, measured, and the tokens compared with greedy ar's
    assert versus is not None and versus["speedup"] > 0 and versus["ar_tokens_per_s"] > 0, counters
    assert counters["temperature"] == 0 and versus["identical"], counters  # identical to greedy ar
    assert out["message"].startswith("Done")
    kept, shown = counters, out["counters"]
    # bad input: a clear message, and the session (with its output) survives, shown as it was
    for bad, expected in [(settings(prompt=""), "prompt is empty"),
                          (settings(model="/no/such/model"), "does not exist")]:
        out = named(client.predict(**bad, api_name="/step"))
        assert expected in out["message"] and out["counters"] == shown and counters_of(client) == kept
    out = named(client.predict(**settings(), api_name="/step"))
    assert "raise the limit" in out["message"] or "finished" in out["message"]
    out = named(client.predict(api_name="/reset"))
    assert "Nothing generated yet" in out["text_html"] and counters_of(client) is None


def test_racer_split_panel_and_bad_settings(url):

    client = patient_client(url)
    out = named(client.predict(**settings(method="racer", budget=32), api_name="/step"))
    assert out["message"] == "" and counters_of(client)["figures"]["steps"] == 1
    out = named(client.predict(**settings(method="racer", budget=32), api_name="/step"))
    split = out["budget_split"]
    assert "Budget split" in split and "| retrieval |" in split and "| logits |" in split
    kept, shown = counters_of(client), out["counters"]
    # values past a slider's range are refused by Gradio itself, with its own clear message
    from gradio_client.exceptions import AppError
    for bad, expected in [(dict(ngram_length=1000), "greater than maximum"),
                          (dict(ngram_length=0), "less than minimum"),
                          (dict(capacity=0), "less than minimum"),
                          (dict(max_breadth=99), "greater than maximum"),
                          (dict(budget=0), "less than minimum")]:
        with pytest.raises(AppError, match=expected):
            client.predict(**settings(method="racer", **bad), api_name="/step")
    # values each slider allows but that contradict each other get our message
    out = named(client.predict(**settings(method="racer", budget=32, min_match=6, ngram_length=4), api_name="/step"))
    assert "must not exceed" in out["message"] and out["counters"] == shown and counters_of(client) == kept
    client.predict(**settings(method="racer", budget=32), api_name="/step")
    counters = counters_of(client)
    assert counters["figures"]["steps"] == 3, counters  # the session went on where it was


def steps_of(client) -> int:
    """The live run's steps so far, from /counters (0 before there is one)."""
    counters = counters_of(client)
    return counters["figures"]["steps"] if counters is not None else 0


def test_stop_keeps_session(url):

    client = patient_client(url)
    job = client.submit(**settings(max_new_tokens=200, prompt="Write a long story about a lighthouse keeper."),
                        api_name="/run")
    # two steps of the run, however slow the machine (the model loads first in a fresh process)
    wait_until(lambda: steps_of(client) >= 2, 120, "two steps of the run")
    stop_message = named(client.predict(api_name="/stop"))["message"]
    assert stop_message.startswith("Stopped after")
    client.predict(**settings(max_new_tokens=200, prompt="Write a long story about a lighthouse keeper."),
                   api_name="/step")
    job.cancel()
    steps = steps_of(client)
    assert steps >= 2, counters_of(client)  # the steps made before Stop are still there, and Step goes on from them


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_step_draws_tree(url):
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.goto(url, wait_until="load")
        # Step as the page's first touch: no Pause goes with it (page_style.PAGE_JS); the step itself ends the first
        # visit's recording, and the recording's timer stops instead of stepping the live run on
        page.wait_for_selector(".autoplay-flag", state="attached", timeout=WAIT_MS)
        page.locator("#step-btn").click()
        wait_for_tree_after(page, 1, run="live", timeout=WAIT_MS)
        assert page.locator(".autoplay-flag").count() == 0
        from specviz.lab.first_visit import FIRST_PACE_S
        steps = lambda: page.locator("#tree-box .tv").first.get_attribute("data-steps")  # noqa: E731
        assert_stays(steps, "1", 2 * FIRST_PACE_S, "the live run's steps after a first Step")
        open_settings(page)
        page.locator("#prompt textarea").fill(CONTEXT.examples["code-edit: code-rename"])
        page.locator("#auto-budget input").uncheck()  # fixed budget 16: the default method (unified) fills it on copied code
        page.locator("#reset-btn").click()  # the steps below from the first
        page.wait_for_function("(document.querySelector('#message')?.innerText || '').includes('Reset')",
                               timeout=WAIT_MS)
        most_points = 0
        for step in range(1, 7):
            page.locator("#step-btn").click()
            wait_for_tree_after(page, step, run="live", timeout=WAIT_MS)
            most_points = max(most_points, page.locator("#tree-box svg.tv-svg:not(.tv-verified) g.n").count())
        generated = page.locator("#generated").inner_text()
        split = page.locator("#budget-split").inner_text()
        page.screenshot(path=str(SCREENSHOTS / "step.png"), full_page=True)
        browser.close()
    assert most_points >= 3  # the root, drafted nodes and the bonus were drawn
    assert "Budget split" in split and "retrieval" in split
    assert "Nothing generated yet" not in generated


def test_concurrent_steps_on_one_session_are_serialised(lm):
    """A Run that Stop cancelled can still be inside its last step when the next Step arrives."""
    import threading

    from specviz.lab.lab import Lab

    lab = Lab()
    lab.choose_values("", PROMPT, "racer", 16, {})
    errors = []

    def step():
        try:
            lab.step(64)
        except Exception as error:  # noqa: BLE001 - the test reports whatever a race raises
            errors.append(error)

    threads = [threading.Thread(target=step) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(lab.session.records) == 4


def test_respec_step_panel_diff_and_bad_input(url, tiny_models):
    from gradio_client.exceptions import AppError

    client = patient_client(url)
    prompt = CONTEXT.examples["summarise: sum-lighthouse"]
    respec = dict(prompt=prompt, method="respec", budget=32, max_new_tokens=48, fallback="logits", tau=5.0)
    for _ in range(3):
        out = named(client.predict(**settings(**respec), api_name="/step"))
    kept, shown = counters_of(client), out["counters"]
    assert out["message"] == "" and kept["figures"]["steps"] == 3, kept
    method_step = out["method_step"]
    assert "ReSpec, step 2" in method_step and "H_k" in method_step and "retrieval" in method_step
    assert "lossless output" in out["token_diff_html"]  # tau > 0: the text is compared with plain greedy decoding
    for bad, expected in [(dict(tau=-1.0), "less than minimum"), (dict(theta_score=1.5), "greater than maximum"),
                          (dict(lookback=0), "less than minimum")]:
        with pytest.raises(AppError, match=expected):
            client.predict(**settings(**(respec | bad)), api_name="/step")
    for draft, expected in [(tiny_models["other"], "another vocabulary"), ("/no/such/draft", "does not exist")]:
        out = named(client.predict(**settings(**respec, draft_model=draft), api_name="/step"))
        assert expected in out["message"] and out["counters"] == shown and counters_of(client) == kept
    out = named(client.predict(**settings(**respec), api_name="/step"))
    counters = counters_of(client)
    assert out["message"] == "" and counters["figures"]["steps"] == 4, counters  # the session went on where it was
    out = named(client.predict(**settings(**(respec | dict(tau=0.0))), api_name="/step"))
    # a changed setting restarts; tau 0 is lossless
    assert out["token_diff_html"] == "" and "ReSpec, step 0" in out["method_step"]


def test_bf16_mode_through_gradio_client_classifies_differences(url):
    """The faster inexact mode is offered, says which mode runs, and names any difference from ar."""
    import torch

    from specviz.runtime.modes import why_not_precision

    client = patient_client(url)
    message = named(client.predict(**settings(method="racer", budget=16, mode="bf16", max_new_tokens=24),
                                   api_name="/run"))["message"]
    counters = counters_of(client)
    versus = counters["versus_ar"]
    status = client.predict("", "bf16", api_name="/load_model")
    why_not = why_not_precision(torch.device("cpu"), torch.bfloat16)
    if why_not is not None:  # a CPU without bf16 instructions (this AMD EPYC): fp32, exact, and it says why
        assert counters["mode"] == "fp32" and versus["identical"], counters  # identical to greedy ar
        assert "mode **fp32**" in status and why_not in status, status
        return
    assert counters["mode"] == "bf16" and message.startswith("Done"), counters
    # identical to greedy ar, or a numeric tie (Divergence's verdict "yes" or "tie@k"): never a MISMATCH
    verdict = versus["divergence"]["verdict"]
    assert verdict == "yes" or verdict.startswith("tie@"), versus
    assert "mode **bf16**" in status


def rapid_prompt() -> str:
    """A short long-context prompt (the ferry document's first part and a question), as JSON."""
    import json

    document = (Path(__file__).parent.parent / "assets" / "documents" / "ferry-timetable-reform.md").read_text()
    return json.dumps({"document": document[:2500], "question": "How many people lived on the islands in 2021?"})


def test_rapid_with_sampling_and_eta_through_gradio_client(url):

    client = patient_client(url)
    rapid = dict(prompt=rapid_prompt(), method="rapid", budget=16, max_new_tokens=24, temperature=0.9, seed=4,
                 eta=10.0, gamma=4, chunk_tokens=128, retrieval_budget=256)
    out = named(client.predict(**settings(**rapid), api_name="/run"))
    counters = counters_of(client)
    # sampled at temperature 0.9, and compared with ar sampled with the same seed
    assert out["message"].startswith("Done") and counters["temperature"] == 0.9 and counters["versus_ar"] is not None, \
        (out["message"], counters)
    assert "Lossy (eta > 0)" in out["method_step"] and "total-variation" in out["method_step"]
    assert "chunk-chosen" in out["document_html"] and "RAG drafter reads" in out["document_html"]
    # bad sampling input: a clear message each, and the session keeps what it generated, shown as it was
    for bad, expected in [(dict(temperature=0.0), "eta has no effect at temperature 0"),
                          (dict(seed=1.5), "seed must be a whole number")]:
        failed = named(client.predict(**settings(**(rapid | bad)), api_name="/step"))
        assert expected in failed["message"], failed["message"]
        assert failed["counters"] == out["counters"] and counters_of(client) == counters
    # the same seed repeats the run token for token; eta 0 at temperature 0 is greedy and lossless
    again = named(client.predict(**settings(**rapid), api_name="/run"))
    assert again["text_html"] == out["text_html"]
    greedy = named(client.predict(**settings(**(rapid | dict(temperature=0.0, eta=0.0))), api_name="/run"))
    counters = counters_of(client)
    assert counters["temperature"] == 0 and counters["versus_ar"]["identical"], counters  # identical to greedy ar
    assert "Lossy" not in greedy["method_step"]


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_rapid_document_and_distribution(url):
    """rapid sampled with eta: the document with its retrieved chunk, the p / q / p_hat bars of a node,
    and the eta slider switched off at temperature 0."""
    from playwright.sync_api import expect, sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 2200})
        page.goto(url, wait_until="load")
        open_settings(page)
        page.locator("#prompt textarea").fill(rapid_prompt())
        page.get_by_label("Method").first.click()
        page.get_by_role("option", name="rapid", exact=True).click()
        page.get_by_text("Method parameters", exact=True).click()   # a closed accordion renders nothing
        eta = page.locator("#param-eta input[type=range]")
        expect(eta.plain).to_be_disabled(timeout=WAIT_MS)   # temperature 0: eta is off
        page.get_by_text("Sampling", exact=True).click()
        temperature = page.locator("#temperature input[type=number]")
        # the server's answer switches it on (a fixed 500 ms wait was too short on a busy machine). The number
        # box commits on Enter or on leaving it; a commit was sometimes lost (eta stayed off for 60 s), so the
        # value is typed again, and the box left, until the slider follows
        for attempt in range(3):
            temperature.fill("0.9")
            temperature.press("Enter")
            temperature.press("Tab")
            try:
                expect(eta.plain).to_be_enabled(timeout=WAIT_MS)
                break
            except AssertionError:
                if attempt == 2:
                    raise
        page.locator("#step-btn").click()
        wait_for_tree_after(page, 1, run="live", timeout=WAIT_MS)
        page.wait_for_function("document.querySelectorAll('#distribution-plot .barlayer .point').length >= 4",
                               timeout=WAIT_MS)
        document = page.locator("#document").inner_text()
        bars = page.locator("#distribution-plot .barlayer .point").count()
        page.screenshot(path=str(SCREENSHOTS / "rapid.png"), full_page=True)
        browser.close()
    assert "RAG drafter reads" in document
    assert bars >= 4   # p and q (and p_hat, emitted) over the top tokens


# ---- teaching features: replay, timeline, A/B, sweeps, presets, URL settings, load ----------------------
def test_replay_upload_download_and_bad_trace_files(url, tmp_path):
    import json

    from gradio_client import handle_file

    from specviz.records.trace import Trace

    def on_screen(out: dict) -> dict:
        """What the stage shows of a run: its tree, counters line, caption and timeline."""
        return {name: out[name] for name in ("tree", "counters", "caption", "timeline")}

    client = patient_client(url)
    out = named(client.predict("racer-code-rename", api_name="/replay"))
    steps = Trace.load(CONTEXT.traces["racer-code-rename"]).steps
    # the recording is on screen at its newest step (the timeline spans its steps), named by the message
    assert out["message"].startswith(f"Replaying `racer-code-rename` ({len(steps)} steps"), out["message"]
    assert out["timeline"]["maximum"] == out["timeline"]["value"] == len(steps) - 1, out["timeline"]
    out = named(client.predict(api_name="/previous"))
    assert out["timeline"]["value"] == len(steps) - 2
    assert out["caption"].startswith(f"Showing step **{len(steps) - 2}** of {len(steps) - 1}"), out["caption"]
    out = named(client.predict(3, api_name="/go_to"))
    assert "Showing step **3**" in out["caption"] and out["timeline"]["value"] == 3
    downloaded = client.predict(api_name="/download_trace")
    assert Trace.load(downloaded).steps == steps
    svg = Path(client.predict(api_name="/download_svg")).read_text()
    assert svg.startswith("<?xml") and "step 3" in svg
    shown = on_screen(out)
    bad = {"notes.json": ("just some notes", "not a specviz trace"),
           "newer.json": (json.dumps({**json.loads(CONTEXT.traces["pld-code-rename"].read_text()), "format_version": 99}),
                          "format version 99")}
    for name, (text, expected) in bad.items():
        (tmp_path / name).write_text(text)
        out = named(client.predict(handle_file(str(tmp_path / name)), api_name="/upload_trace"))
        # the message, and the replay on screen stays
        assert expected in out["message"] and on_screen(out) == shown, out["message"]
    out = named(client.predict(handle_file(str(CONTEXT.traces["pld-code-rename"])), api_name="/upload_trace"))
    uploaded = Trace.load(CONTEXT.traces["pld-code-rename"]).steps
    assert out["message"].startswith("Replaying `pld-code-rename"), out["message"]
    assert out["timeline"]["maximum"] == len(uploaded) - 1 and on_screen(out) != shown
    # Play twice: the second press says so; Pause stops
    client.predict(0.5, api_name="/play")
    out = named(client.predict(0.5, api_name="/play"), extra=("timer",))
    assert "Already playing" in out["message"]
    out = named(client.predict(api_name="/pause"), extra=("timer",))
    assert "Paused" in out["message"]


def test_sweep_api_and_its_limit(url):
    import csv
    import io

    client = patient_client(url)
    sweep = dict(axis_1="budget=4,8", axis_2="max_breadth=2,8", scope="page prompt", category="summarise", sweep_tokens=8,
                 metric="speedup")
    answer = sweep_answer(client.predict(**sweep, **settings(method="racer"), api_name="/sweep"))
    assert answer["message"].startswith("Sweep done: 4 points x 1 prompts"), answer["message"]
    rows = list(csv.DictReader(io.StringIO(Path(answer["csv_file"]).read_text())))
    assert len(rows) == 4 and {r["budget"] for r in rows} == {"4", "8"}
    assert all(float(r["differing_fraction"]) == 0 for r in rows)  # racer at temperature 0 is lossless
    message = sweep_answer(client.predict(**(sweep | dict(axis_1="tau=" + ",".join(map(str, range(100))),
                                                          axis_2="m=" + ",".join(map(str, range(100))))),
                                          **settings(method="respec"), api_name="/sweep"))["message"]
    # refused by parse_axes, before the model is asked for: no grid point ran
    assert "64" in message and "10000" in message.replace(",", "") and "Sweep done" not in message, message


def test_eight_concurrent_visitors_get_their_own_answers(url, lm):
    """Eight sessions at once, each its own prompt: every request answered, each output identical to plain
    greedy decoding of its own prompt (no cross-talk); the time each waited is printed."""
    import time

    from specviz.benches.app_load import greedy_texts, text_of

    prompts = [f"Count from {n} to {n + 6} in words, then say which is largest." for n in range(1, 9)]
    expected = greedy_texts(lm, prompts, 16)
    clients = [patient_client(url) for _ in prompts]
    started = time.perf_counter()
    jobs = [c.submit(**settings(prompt=p, method="racer", max_new_tokens=16), api_name="/run")
            for c, p in zip(clients, prompts)]
    answers = []
    for job in jobs:  # every answer first, each timed as it comes: /counters after would count in the next one's
        out = named(job.result(timeout=600))
        answers.append((out, time.perf_counter() - started))
    waits = []
    for client, want, (out, answered) in zip(clients, expected, answers):
        counters = counters_of(client)  # this visitor's own session
        assert text_of(out["text_html"]) == want and counters["versus_ar"]["identical"], counters
        waits.append(answered - counters["figures"]["wall_s"])  # its wall time less its own run's
    print(f"8 visitors, model concurrency {MODEL_CONCURRENCY}: waited " +
          ", ".join(f"{w:.1f}" for w in waits) + " s")


def held_by_session(lab) -> list:
    """Weak references to everything of a Lab's live session that holds memory: the Session, its KV cache and
    each layer's key and value buffers, its drafters' caches, the greedy reference."""
    import weakref

    state = lab.state
    held = []
    for session in (state.session, state.reference):
        if session is None:
            continue
        held += [weakref.ref(session), weakref.ref(session.cache)]
        for layer in session.cache.layers:
            held += [weakref.ref(t) for t in (getattr(layer, "_keys", None), getattr(layer, "_values", None))
                     if t is not None]
        for drafter in session.method.stages:
            cache = getattr(getattr(drafter, "inner", drafter), "cache", None)
            if cache is not None:
                held.append(weakref.ref(cache))
    return held


def test_abandoned_sessions_are_freed(lm):
    """Sessions a client opens, stays connected to and abandons are released after their time to live
    (gr.State's delete_callback). Each abandoned session is followed by weak reference, from its own browser
    session's Lab down to its KV cache's buffers: any of them still alive is a leak."""
    import gc

    from specviz.lab import visitors

    # a time to live long enough that a session is seen (and followed) before it expires on a loaded 2-core machine
    page = page_for(session_ttl_s=8)
    demo = page.blocks
    port = free_port()
    launched(page, port)
    try:
        followed = []
        clients = [patient_client(f"http://127.0.0.1:{port}/") for _ in range(6)]  # kept connected
        for n, client in enumerate(clients):
            client.predict(**settings(prompt=f"Say {n}.", method="pld", max_new_tokens=4), api_name="/step")
            labs = [r() for r in visitors._open.get(client.session_hash, [])]
            held = [ref for lab in labs if lab is not None and lab.session is not None for ref in held_by_session(lab)]
            assert held, f"client {n}'s session was not found"
            followed.append(held)
            del labs
        assert len(followed) == 6

        def alive() -> int:
            gc.collect()
            return sum(ref() is not None for held in followed for ref in held)

        # time to live 8 s; Gradio sweeps expired state every second
        wait_until(lambda: alive() == 0, 40, "the abandoned sessions (and their KV caches) to be freed after their "
                   "time to live", every_s=0.5)
        for client in clients:
            client.close()
    finally:
        demo.close()


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_timeline_play_pause_and_token_link(url):
    from playwright.sync_api import sync_playwright

    from specviz.records.trace import Trace

    last = len(Trace.load(CONTEXT.traces[CONTEXT.first_trace]).steps) - 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    caption = "(document.querySelector('#step-caption')?.innerText || '')"
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(url, wait_until="load")
        # a visitor sees a recorded run at once, from its first step, with no model needed; a touch stops it
        page.wait_for_function(f"{caption}.includes('Showing step ') && {caption}.includes(' of {last}')",
                               timeout=WAIT_MS)
        page.locator("#pause-btn").click()
        page.wait_for_function("(document.querySelector('#message')?.innerText || '').includes('stopped playing')",
                               timeout=WAIT_MS)
        at = int(page.evaluate(caption).split("Showing step ")[1].split(" ")[0])
        for _ in range(max(0, 3 - at)):  # at least two steps to go back to
            page.locator("#next-btn").click()
            at += 1
            page.wait_for_function(f"{caption}.includes('Showing step {at} of')", timeout=WAIT_MS)
        page.locator("#prev-btn").click()
        page.wait_for_function(f"{caption}.includes('Showing step {at - 1} of')", timeout=WAIT_MS)
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(f"{caption}.includes('Showing step {at - 2} of')", timeout=WAIT_MS)
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"{caption}.includes('Showing step {at - 1} of')", timeout=WAIT_MS)
        page.locator("#generated [data-token='1']").click()   # a token: its step, its node ringed
        page.wait_for_function("document.querySelector('#message').innerText.includes('Token 1 was committed in step')",
                               timeout=WAIT_MS)
        page.screenshot(path=str(SCREENSHOTS / "timeline.png"), full_page=True)
        shown = int(page.evaluate(caption).split("Showing step ")[1].split(" ")[0])
        pace = page.locator("#pace input[type=number]")
        pace.fill(str(PLAY_PACE_S))
        pace.press("Enter")
        page.locator("#play-btn").click()
        page.wait_for_function(f"!{caption}.includes('Showing step {shown} ') && !{caption}.includes('Showing step {shown + 1} ')",
                               timeout=WAIT_MS)
        page.locator("#pause-btn").click()
        page.wait_for_function("(document.querySelector('#message')?.innerText || '').includes('Paused')",
                               timeout=WAIT_MS)  # the server has paused (Play had cleared the message)
        # a step already on its way when Pause came may land; then nothing moves: the caption settles, and stays
        read = lambda: page.evaluate(caption)  # noqa: E731
        paused_at = wait_until_quiet(read, QUIET_PACES * PLAY_PACE_S, 30, "the caption after Pause")
        assert_stays(read, paused_at, PLAY_PACE_S, "the caption after Pause")  # Pause holds the step
        assert int(paused_at.split("Showing step ")[1].split(" ")[0]) > shown + 1
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_url_settings_preset_ab_and_upload(url):
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        # settings in the URL come back, and nonsense in it is named
        page.goto(url + "?method=respec&tau=3&budget=24&example=sum-lighthouse&bogus=1", wait_until="load")
        # one predicate for the whole message: waiting for half of it and then reading it raced a re-render
        page.wait_for_function("(t => t.includes('Settings from the link') && t.includes('bogus'))"
                               "(document.querySelector('#message')?.innerText || '')", timeout=WAIT_MS)
        assert page.locator("#method input").input_value() == "respec"
        assert "Harwick Point lighthouse" in page.locator("#prompt textarea").input_value()
        assert page.locator("#budget input[type=number]").input_value() == "24"
        open_settings(page)
        page.get_by_text("Method parameters", exact=True).click()
        page.locator("#param-tau input[type=number]").wait_for(state="visible", timeout=WAIT_MS)
        assert page.locator("#param-tau input[type=number]").input_value() == "3"
        # the paper's settings of respec (§4.1: a 60-node tree, lookback 3), then ours (auto, the defaults)
        page.locator("#paper-btn").click()
        page.wait_for_function("document.querySelector('#budget input[type=number]')?.value === '60'", timeout=WAIT_MS)
        assert not page.locator("#auto-budget input").is_checked()
        page.locator("#tuned-btn").click()
        page.wait_for_function("document.querySelector('#auto-budget input')?.checked === true", timeout=WAIT_MS)
        assert page.locator("#param-tau input[type=number]").input_value() != "3"  # tau back at our default
        # a preset fills the page and the two sides, and says what to look at
        page.get_by_text("Presets: one click, one question", exact=True).click()
        page.locator("#preset input").click()
        page.get_by_role("option", name="ReSpec: tau 0 vs 3").click()
        page.wait_for_function("(document.querySelector('#preset-question')?.innerText || '').includes('relaxed')",
                               timeout=WAIT_MS)
        page.get_by_role("tab", name="A/B compare").click()
        assert page.locator("#side-b textarea, #side-b input").first.input_value() == "tau=3"
        page.locator("#side-b textarea, #side-b input").first.fill("method=pld")
        page.locator("#ab-step").click()
        wait_for_tree_after(page, 1, box="#tree-b", run="live", timeout=WAIT_MS)
        page.locator("#ab-step").click()
        for side in "ab":
            wait_for_tree_after(page, 2, box=f"#tree-{side}", run="live", timeout=WAIT_MS)
        trees = [page.locator(f"#tree-{side} svg.tv-svg:not(.tv-verified) g.n").count() for side in "ab"]
        page.screenshot(path=str(SCREENSHOTS / "ab.png"), full_page=True)
        # upload a shipped trace: it replays with no model
        page.get_by_role("tab", name="Replay").click()
        page.locator("#upload-trace input[type=file]").set_input_files(str(CONTEXT.traces["reader-code-rename"]))
        page.wait_for_selector("#tree-box .tv[data-run^='replay:reader-code-rename']", state="attached",
                               timeout=WAIT_MS)
        page.get_by_role("tab", name="Accounting").click()
        page.wait_for_function("document.querySelectorAll('#lanes-plot .point, #lanes-plot .bars path').length > 0",
                               timeout=WAIT_MS)
        wait_until_still(page, "#lanes-plot")
        page.screenshot(path=str(SCREENSHOTS / "replay-accounting.png"), full_page=True)
        browser.close()
    assert all(t >= 1 for t in trees), trees


def test_a_dropped_connection_frees_its_session(url, monkeypatch):
    """A visitor whose connection drops (a closed tab) is released at Gradio's next heartbeat, not an
    hour later when Gradio itself would drop the state."""
    from specviz.lab import visitors

    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "1")
    client = patient_client(url)
    client.predict(**settings(prompt="Say hello.", method="pld", max_new_tokens=4), api_name="/step")
    assert client.session_hash in visitors._open
    held = [r() for r in visitors._open[client.session_hash]]
    assert held and held[0].session is not None
    client.close()
    wait_until(lambda: client.session_hash not in visitors._open, 20, "the dropped visitor's release", every_s=0.5)
    assert held[0].session is None
