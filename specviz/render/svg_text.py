"""Text into SVG and HTML: escaped, and safe for XML 1.0 (which cannot hold control characters even escaped)."""

from __future__ import annotations

import html


def xml_safe(text: str) -> str:
    """Control characters become their Unicode control pictures; lone surrogates and U+FFFE/FFFF the
    replacement character."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 and ch not in "\t\n\r" or code == 0x7F:
            out.append(chr(0x2400 + code) if code < 0x20 else "␡")
        elif 0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF):
            out.append("\ufffd")
        elif ch == "\r":
            out.append("␍")
        else:
            out.append(ch)
    return "".join(out)


def escape(text: str) -> str:
    return xml_safe(html.escape(str(text), quote=False))


def attr(text: str) -> str:
    """An attribute value: quotes escaped, newlines kept as character references."""
    return xml_safe(html.escape(str(text), quote=True)).replace("\n", "&#10;")


def num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def points(pairs) -> str:
    return " ".join(f"{num(px)},{num(py)}" for px, py in pairs)
