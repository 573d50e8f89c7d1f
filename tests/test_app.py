"""The app as its users reach it: through gradio_client, and in a real headless Chromium."""

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))
import app  # noqa: E402

PROMPT = "Repeat twice: <b>bold</b> & more, <b>bold</b> & more."
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("SPECVIZ_SCREENSHOTS", "/tmp/specviz-screenshots"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(lm):
    demo = app.build_app().queue()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, **app.LAUNCH_OPTIONS)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def settings(prompt=PROMPT, method="pld", max_new_tokens=16, model="", budget=8, draft_model="", mode="",
             temperature=0.0, top_p=1.0, seed=0, **params):
    values = [params.get(p.name, p.default) for p in app.PARAMS]
    return [max_new_tokens, model, draft_model, mode, prompt, method, False, budget, temperature, top_p, seed, *values]


def test_step_run_and_bad_input_through_gradio_client(url):
    from gradio_client import Client

    client = Client(url, verbose=False)
    figure, text, counters, split, _, _, _, message, *_ = client.predict(*settings(), api_name="/step")
    assert "steps** 1" in counters and message == ""
    assert "<b>" not in text  # tokens are escaped
    figure, text, counters, split, _, _, _, message, *_ = client.predict(*settings(), api_name="/run")
    assert "speedup vs ar" in counters and "x (ar" in counters
    assert "identical to greedy ar" in counters
    assert message.startswith("Done")
    kept = counters
    # bad input: a clear message, and the session (with its output) survives
    for bad, expected in [(settings(prompt=""), "prompt is empty"),
                          (settings(model="/no/such/model"), "does not exist")]:
        _, _, counters, _, _, _, _, message, *_ = client.predict(*bad, api_name="/step")
        assert expected in message and counters == kept
    _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(), api_name="/step")
    assert "raise the limit" in message or "finished" in message
    _, text, counters, _, _, _, _, message, *_ = client.predict(api_name="/reset")
    assert "Nothing generated yet" in text


def test_racer_split_panel_and_bad_settings(url):
    from gradio_client import Client

    client = Client(url, verbose=False)
    _, _, counters, split, _, _, _, message, *_ = client.predict(*settings(method="racer", budget=32), api_name="/step")
    assert message == "" and "steps** 1" in counters
    _, _, counters, split, _, _, _, message, *_ = client.predict(*settings(method="racer", budget=32), api_name="/step")
    assert "Budget split" in split and "| retrieval |" in split and "| logits |" in split
    kept = counters
    # values past a slider's range are refused by Gradio itself, with its own clear message
    from gradio_client.exceptions import AppError
    for bad, expected in [(dict(ngram_length=1000), "greater than maximum"),
                          (dict(ngram_length=0), "less than minimum"),
                          (dict(capacity=0), "less than minimum"),
                          (dict(max_breadth=99), "greater than maximum"),
                          (dict(budget=0), "less than minimum")]:
        with pytest.raises(AppError, match=expected):
            client.predict(*settings(method="racer", **bad), api_name="/step")
    # values each slider allows but that contradict each other get our message
    _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(method="racer", budget=32, min_match=6, ngram_length=4),
                                                api_name="/step")
    assert "must not exceed" in message and counters == kept
    _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(method="racer", budget=32), api_name="/step")
    assert "steps** 3" in counters, counters  # the session went on where it was


def test_stop_keeps_session(url):
    from gradio_client import Client

    client = Client(url, verbose=False)
    job = client.submit(*settings(max_new_tokens=200, prompt="Write a long story about a lighthouse keeper."),
                        api_name="/run")
    import time
    time.sleep(3)
    stop_message = client.predict(api_name="/stop")[7]
    assert stop_message.startswith("Stopped after")
    _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(max_new_tokens=200, prompt="Write a long story about a lighthouse keeper."),
                                             api_name="/step")
    job.cancel()
    steps = int(counters.split("**steps** ")[1].split(" ")[0])
    assert steps >= 2, counters  # the steps made before Stop are still there, and Step goes on from them


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_step_draws_tree(url):
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.goto(url)
        page.locator("#prompt textarea").fill(app.EXAMPLES["code-edit: code-rename"])
        page.locator("#auto-budget input").uncheck()  # fixed budget 16: racer fills it on copied code
        most_points = 0
        for step in range(1, 7):
            page.locator("#step-btn").click()
            page.wait_for_function(f"document.querySelector('#counters').innerText.includes('steps {step} ')",
                                   timeout=60_000)
            page.wait_for_timeout(300)
            most_points = max(most_points, page.locator("#tree-plot .scatterlayer .point").count())
        generated = page.locator("#generated").inner_text()
        split = page.locator("#budget-split").inner_text()
        page.screenshot(path=str(SCREENSHOTS / "step.png"), full_page=True)
        browser.close()
    assert most_points >= 3  # the root and drafted nodes were drawn
    assert "Budget split" in split and "retrieval" in split
    assert "Nothing generated yet" not in generated


def test_concurrent_steps_on_one_session_are_serialised(lm):
    """A Run that Stop cancelled can still be inside its last step when the next Step arrives."""
    import threading

    from specviz.ui.lab import Lab

    lab = Lab()
    lab.apply("", PROMPT, "racer", 16, {})
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
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    client = Client(url, verbose=False)
    prompt = app.EXAMPLES["summarise: sum-lighthouse"]
    respec = dict(prompt=prompt, method="respec", budget=32, max_new_tokens=48, fallback="logits", tau=5.0)
    for _ in range(3):
        _, text, counters, _, method_step, diff, _, message, *_ = client.predict(*settings(**respec), api_name="/step")
    assert message == "" and "steps** 3" in counters
    assert "ReSpec, step 2" in method_step and "H_k" in method_step and "retrieval" in method_step
    assert "lossless output" in diff  # tau > 0: the text is compared with plain greedy decoding
    kept = counters
    for bad, expected in [(dict(tau=-1.0), "less than minimum"), (dict(theta_score=1.5), "greater than maximum"),
                          (dict(lookback=0), "less than minimum")]:
        with pytest.raises(AppError, match=expected):
            client.predict(*settings(**(respec | bad)), api_name="/step")
    for draft, expected in [(tiny_models["other"], "another vocabulary"), ("/no/such/draft", "does not exist")]:
        _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(**respec, draft_model=draft), api_name="/step")
        assert expected in message and counters == kept
    _, _, counters, _, _, diff, _, message, *_ = client.predict(*settings(**respec), api_name="/step")
    assert message == "" and "steps** 4" in counters  # the session went on where it was
    _, _, _, _, method_step, diff, _, _, *_ = client.predict(*settings(**(respec | dict(tau=0.0))), api_name="/step")
    assert diff == "" and "ReSpec, step 0" in method_step  # a changed setting restarts; tau 0 is lossless


def test_bf16_mode_through_gradio_client_classifies_differences(url):
    """The faster inexact mode is offered, says which mode runs, and names any difference from ar."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    _, _, counters, _, _, _, _, message, *_ = client.predict(*settings(method="racer", budget=16, mode="bf16",
                                                                   max_new_tokens=24), api_name="/run")
    assert "**mode** bf16" in counters and message.startswith("Done")
    assert "identical to greedy ar" in counters or "numeric tie" in counters, counters
    assert "MISMATCH" not in counters
    status = client.predict("", "bf16", api_name="/load_model")
    assert "mode **bf16**" in status


def rapid_prompt() -> str:
    """A short long-context prompt (the ferry document's first part and a question), as JSON."""
    import json

    document = (Path(__file__).parent.parent / "assets" / "documents" / "ferry-timetable-reform.md").read_text()
    return json.dumps({"document": document[:2500], "question": "How many people lived on the islands in 2021?"})


def test_rapid_with_sampling_and_eta_through_gradio_client(url):
    from gradio_client import Client

    client = Client(url, verbose=False)
    rapid = dict(prompt=rapid_prompt(), method="rapid", budget=16, max_new_tokens=24, temperature=0.9, seed=4,
                 eta=10.0, gamma=4, chunk_tokens=128, retrieval_budget=256)
    out = client.predict(*settings(**rapid), api_name="/run")
    _, text, counters, _, method_step, diff, _, message, document, node, chart, *_ = out
    assert message.startswith("Done") and "sampled at temperature 0.9" in counters, (message, counters)
    assert "Lossy (eta > 0)" in method_step and "total-variation" in method_step
    assert "chunk-chosen" in document and "RAG drafter reads" in document
    # bad sampling input: a clear message each, and the session keeps what it generated
    for bad, expected in [(dict(temperature=0.0), "eta has no effect at temperature 0"),
                          (dict(seed=1.5), "seed must be a whole number")]:
        _, _, kept, _, _, _, _, message, *_ = client.predict(*settings(**(rapid | bad)), api_name="/step")
        assert expected in message and kept == counters, message
    # the same seed repeats the run token for token; eta 0 at temperature 0 is greedy and lossless
    again = client.predict(*settings(**rapid), api_name="/run")
    assert again[1] == text
    _, _, counters, _, method_step, diff, *_ = client.predict(
        *settings(**(rapid | dict(temperature=0.0, eta=0.0))), api_name="/run")
    assert "identical to greedy ar" in counters and "Lossy" not in method_step


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Debian chromium is not installed")
def test_browser_rapid_document_and_distribution(url):
    """rapid sampled with eta: the document with its retrieved chunk, the p / q / p_hat bars of a node,
    and the eta slider switched off at temperature 0."""
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 2200})
        page.goto(url, wait_until="load")
        page.locator("#prompt textarea").fill(rapid_prompt())
        page.get_by_label("Method").first.click()
        page.get_by_role("option", name="rapid", exact=True).click()
        page.get_by_text("Method parameters", exact=True).click()   # a closed accordion renders nothing
        eta = page.locator("#param-eta input[type=range]")
        page.wait_for_timeout(500)
        assert eta.is_disabled()   # temperature 0: eta is off
        page.get_by_text("Sampling", exact=True).click()
        temperature = page.locator("#temperature input[type=number]")
        temperature.fill("0.9")
        temperature.press("Enter")
        page.wait_for_timeout(500)
        assert not eta.is_disabled()
        page.locator("#step-btn").click()
        page.wait_for_function("document.querySelector('#counters').innerText.includes('steps 1 ')", timeout=120_000)
        page.wait_for_timeout(800)
        document = page.locator("#document").inner_text()
        bars = page.locator("#distribution-plot .barlayer .point").count()
        page.screenshot(path=str(SCREENSHOTS / "rapid.png"), full_page=True)
        browser.close()
    assert "RAG drafter reads" in document
    assert bars >= 4   # p and q (and p_hat, emitted) over the top tokens
