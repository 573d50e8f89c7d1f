"""Issue 73: no visitor text rendered as markup. Markdown (an image, a link), HTML and JavaScript URLs are fed
through every message path of the page in public mode: every text input of every event (one input at a time, so
that each input's own refusal is reached), a share link's keys and values, and an uploaded trace's free texts and
file name. Every Markdown output is rendered (markdown-it, CommonMark with links and images as the page's renderer
reads them) and every HTML output read as it is: none holds an image, a link or a script that came from the visitor
(errors.as_code shows such text as code; render.markdown_text.md_text escapes it in the step panels)."""

import json
import re
import urllib.parse
import uuid

import pytest

from test_every_route import completed, door, join, request  # noqa: F401 (door: the module's server)

HOST = "e.example"  # what every payload points at: no element of the page may
PAYLOADS = [f"![x](https://{HOST}/pixel.png)", f"[Log in again](https://{HOST}/login)",
            "<img src=x onerror=alert(1)>", "[a](javascript:alert(1))", f"<https://{HOST}/auto>",
            f"https://{HOST}/bare", "<script>alert(1)</script>"]
TEXT_INPUTS = {"textbox", "dropdown", "radio", "code"}
SHOWN = {"markdown", "html"}


def markup_in(kind: str, text: str) -> list[str]:
    """The images, links and scripts a shown text would put on the page that point where a payload points."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"linkify": False}).render(text) if kind == "markdown" else text
    found = re.findall(r"<(?:img|a|script|iframe)\b[^>]*>", html, flags=re.I)
    return [tag for tag in found if HOST in tag or "javascript:" in tag.lower() or "onerror" in tag.lower()
            or tag.lower().startswith("<script")] + \
        ([f"bare link {m}" for m in re.findall(rf"(?<![`\\/]){re.escape('https://' + HOST)}\S*", text)
          if kind == "markdown" and not _in_code(text, m)])


def _in_code(text: str, link: str) -> bool:
    """Whether every occurrence of link lies in a code span (a bare URL there is not made a link)."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"`[^`]*`", text)]
    return all(any(a <= m.start() < b for a, b in spans) for m in re.finditer(re.escape(link), text))


def refusal_sentences(body: bytes) -> list[str]:
    """The sentences of the door's refusal: its detail, or the messages of its validator answers (which
    gradio_client and the page show)."""
    detail = json.loads(body).get("detail")
    if isinstance(detail, str):
        return [detail]
    return [str(d.get("message", "")) for d in detail or () if isinstance(d, dict)]


def shown_outputs(door, fn: dict, message: dict) -> list[tuple[str, str]]:
    """(kind, text) of every Markdown and HTML output of an answer."""
    data = (message.get("output") or {}).get("data") or []
    out = []
    for component_id, value in zip(fn["outputs"], data):
        kind = door.components[component_id]["type"]
        if isinstance(value, dict):
            value = value.get("value")
        if kind in SHOWN and isinstance(value, str):
            out.append((kind, value))
    if not message.get("success"):  # Gradio's own error sentence, shown as a toast (text)
        out.append(("markdown", str((message.get("output") or {}).get("error") or "")))
    return out


@pytest.fixture(scope="module")
def components(door):
    door.components = {c["id"]: c for c in door.config["components"]}
    return door.components


def test_every_text_input_of_every_event(door, components, lm):
    found, fed = [], 0
    for index, fn in sorted(door.fns.items()):
        if not fn.get("backend_fn"):
            continue
        defaults = [None if components[i]["type"] == "state" else components[i].get("props", {}).get("value")
                    for i in fn["inputs"]]
        texts = [k for k, i in enumerate(fn["inputs"]) if components[i]["type"] in TEXT_INPUTS
                 and (components[i].get("props", {}).get("label") or "").lower() != "prompt"]
        for n, k in enumerate(texts):
            data = list(defaults)
            data[k] = PAYLOADS[(index + n) % len(PAYLOADS)]
            session = f"markup-{uuid.uuid4().hex[:12]}"
            answer = join(door, index, data, session=session)
            fed += 1
            if answer.status != 200:  # the door's refusal: a sentence that quotes the value as code at most
                for sentence in refusal_sentences(answer.body):
                    found += [(fn.get("api_name"), k, tag) for tag in markup_in("markdown", sentence)]
                continue
            for kind, text in shown_outputs(door, fn, completed(door, session)):
                found += [(fn.get("api_name"), k, tag) for tag in markup_in(kind, text)]
    assert fed > 50
    assert not found, found[:10]


def test_a_share_links_keys_and_values(door, components):
    from specviz.lab.share_link import RUN_KEYS

    url_settings = next(i for i, d in door.fns.items() if d.get("api_name") == "url_settings")
    fn = door.fns[url_settings]
    found = []
    for payload in PAYLOADS:
        for key in (*RUN_KEYS, "max_ngram", payload):
            session = f"link-{uuid.uuid4().hex[:12]}"
            query = "?" + urllib.parse.urlencode({key: payload})
            answer = join(door, url_settings, [None], session=session,
                          path="/gradio_api/queue/join" + query)
            assert answer.status == 200, answer.body
            for kind, text in shown_outputs(door, fn, completed(door, session)):
                found += [(key, tag) for tag in markup_in(kind, text)]
    assert not found, found[:10]


def test_an_uploaded_traces_texts_and_name(door, components, tmp_path):
    from test_cost_fuzz import TraceShape, build_trace

    shape = TraceShape(steps=2, nodes=3, committed=1, text_chars=1, sources=1, foreign_sources=False,
                       curve_points=0, curve_top=1, null_timing=False, param_items=1)
    upload_trace = next(i for i, d in door.fns.items() if d.get("api_name") == "upload_trace")
    fn = door.fns[upload_trace]
    found = []
    for payload in PAYLOADS:
        trace = build_trace(shape)
        trace.update(recorded_on=payload, model=payload, method="pld", prompt_text=payload)
        trace["token_texts"]["7"] = payload
        trace["steps"][0]["nodes"][1]["text"] = payload
        name = re.sub(r"[/\\:*?\"<>|]", "", payload)[:60] + ".json"  # what a file name may hold
        body = (b'--b\r\nContent-Disposition: form-data; name="files"; filename="' + name.encode() + b'"\r\n'
                b"Content-Type: application/json\r\n\r\n" + json.dumps(trace).encode() + b"\r\n--b--\r\n")
        uploaded = request(door.port, "POST", "/gradio_api/upload", body,
                           {"Content-Type": "multipart/form-data; boundary=b"})
        assert uploaded.status == 200, uploaded.body
        path = json.loads(uploaded.body)[0]
        session = f"upload-{uuid.uuid4().hex[:12]}"
        answer = join(door, upload_trace, [None, {"path": path, "orig_name": name,
                                                  "meta": {"_type": "gradio.FileData"}}], session=session)
        assert answer.status == 200, answer.body
        message = completed(door, session)
        shown = shown_outputs(door, fn, message)
        assert any("Replaying" in text for _, text in shown), shown[:3]
        for kind, text in shown:
            found += [(payload, tag) for tag in markup_in(kind, text)]
    assert not found, found[:10]
