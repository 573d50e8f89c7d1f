"""Issue 73: the page's HTML drawn once per origin and query (panels.page_cache): a loop of page loads no longer
makes Gradio deep-copy the config for each (13% of the interpreter in the soak). What the cache keeps apart and what
it never keeps."""

import asyncio

from specviz.panels.page_cache import CAPACITY, PageCache


class DrawingApp:
    """An ASGI app standing for Gradio's index route: it counts its draws and names the Host it drew for."""

    def __init__(self, status: int = 200, cookie: bool = False):
        self.status, self.cookie, self.draws = status, cookie, 0

    async def __call__(self, scope, receive, send):
        self.draws += 1
        host = dict(scope["headers"]).get(b"host", b"")
        headers = [(b"content-type", b"text/html")] + ([(b"set-cookie", b"a=b")] if self.cookie else [])
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"<html>" + host, "more_body": True})
        await send({"type": "http.response.body", "body": b" draw %d</html>" % self.draws})


def get(cache: PageCache, app, path: str = "/", host: bytes = b"a.example", query: bytes = b"",
        method: str = "GET") -> tuple[int, bytes]:
    scope = {"type": "http", "method": method, "path": path, "query_string": query, "scheme": "http",
             "headers": [(b"host", host), (b"user-agent", b"x")]}
    sent = []

    async def send(message):
        sent.append(message)

    async def run():
        key = PageCache.key(scope)
        if key is None:
            await app(scope, None, send)
        else:
            await cache.answer(key, scope, None, send, app)
    asyncio.run(run())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_page_is_drawn_once_per_origin_and_query():
    cache, app = PageCache(), DrawingApp()
    first = get(cache, app)
    assert get(cache, app) == first == (200, b"<html>a.example draw 1</html>") and app.draws == 1
    assert get(cache, app, host=b"b.example") == (200, b"<html>b.example draw 2</html>")  # another origin
    assert get(cache, app, query=b"__theme=dark")[1].endswith(b"draw 3</html>")            # another query
    assert get(cache, app) == first and app.draws == 3 == cache.drawn
    assert PageCache.key({"method": "GET", "path": "/gradio_api/info"}) is None
    assert PageCache.key({"method": "POST", "path": "/"}) is None


def test_a_failed_answer_or_one_with_a_cookie_is_never_kept_and_the_cache_stays_bounded():
    for app in (DrawingApp(status=500), DrawingApp(cookie=True)):
        cache = PageCache()
        get(cache, app), get(cache, app)
        assert app.draws == 2
    cache, app = PageCache(), DrawingApp()
    for n in range(CAPACITY * 3):
        get(cache, app, host=b"h%d.example" % n)
    assert len(cache._pages) == CAPACITY
    assert get(cache, app, host=b"h0.example")[1].endswith(b"draw %d</html>" % (CAPACITY * 3 + 1))  # evicted, drawn
