"""The page's HTML, drawn by Gradio once per origin and query, then answered from memory (public mode, the door:
panels.visitor_gate). Gradio's index route deep-copies the page's whole config and writes every endpoint's code
snippets again for each GET, holding the GIL: in issue 73's soak one address loading the page in a loop took 13% of
the interpreter's time while honest visitors' events waited for it. The page a GET draws depends only on the
blocks (fixed once the server runs) and on the origin the request names (Gradio's root URL: the Host and the
proxy's X-Forwarded-Host / -Proto headers, the scheme and the root path), which the key holds with the query."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

PAGE_PATHS = ("", "/")
ORIGIN_HEADERS = (b"host", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-port", b"forwarded")
CAPACITY = 16  # origins and queries kept (a visitor varying them evicts the oldest, never grows the cache)


@dataclass(frozen=True)
class CachedPage:
    start: dict        # the ASGI response start (status 200 and its headers)
    body: bytes


class PageCache:
    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._pages: OrderedDict[tuple, CachedPage] = OrderedDict()
        self._lock = threading.Lock()
        self.drawn = 0   # pages Gradio drew (the rest came from here)

    @staticmethod
    def key(scope) -> tuple | None:
        """The cache key of a GET of the page, or None for any other request."""
        if scope.get("method") != "GET" or scope.get("path", "") not in PAGE_PATHS:
            return None
        headers = tuple(sorted((k.lower(), v) for k, v in scope.get("headers", []) if k.lower() in ORIGIN_HEADERS))
        return (scope.get("path", ""), scope.get("query_string", b""), scope.get("scheme"),
                scope.get("root_path", ""), headers)

    async def answer(self, key: tuple, scope, receive, send, app) -> None:
        """The page for key, from memory or drawn by app (and kept when it is a plain 200 answer: no cookie)."""
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
        if page is not None:
            await send(page.start)
            await send({"type": "http.response.body", "body": page.body})
            return
        sent: list[dict] = []

        async def keeping(message):
            sent.append(message)
            await send(message)

        await app(scope, receive, keeping)
        self.drawn += 1
        starts = [m for m in sent if m["type"] == "http.response.start"]
        if len(starts) != 1 or starts[0].get("status") != 200 or any(
                k.lower() == b"set-cookie" for k, _ in starts[0].get("headers", [])):
            return
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        with self._lock:
            self._pages[key] = CachedPage(starts[0], body)
            self._pages.move_to_end(key)
            while len(self._pages) > self.capacity:
                self._pages.popitem(last=False)
