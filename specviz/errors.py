"""One exception type for every mistake a user can make; the UI and CLI show its message as is."""


class SpecvizError(ValueError):
    """Bad input (prompt, parameter, model path): the message is meant for the user."""


def as_code(text, limit: int | None = None) -> str:
    """Text from a visitor (a value they sent, a name or a note from their trace, a link's key) inside Markdown or
    HTML: a code span, the one way such text reaches the page. The page shows messages as Markdown, and a public
    Space's visitor may send anything: inside a code span a link, an image, HTML or a JavaScript URL is shown as
    the characters it is, never read as markup; a backtick cannot close the span (it becomes a prime), a line break
    becomes a space, and a huge text is cut to limit characters."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit - 3] + "..."
    return "`" + text.replace("`", "ʹ").replace("\r", " ").replace("\n", " ") + "`"


def quoted(value, limit: int = 40) -> str:
    """A visitor's value inside a message: its repr (so a text shows its quotes and a number does not) as a code
    span (as_code), cut to limit characters."""
    return as_code(repr(value), limit)
