"""One exception type for every mistake a user can make; the UI and CLI show its message as is."""


class SpecvizError(ValueError):
    """Bad input (prompt, parameter, model path): the message is meant for the user."""


def quoted(value, limit: int = 40) -> str:
    """A user's value inside a message: its repr cut to limit characters, as a Markdown code span. The page shows
    messages as Markdown, and a public Space's visitor may send anything: a value is shown, never read as a link,
    an image or markup, and a huge one never fills the message."""
    text = repr(value)
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return "`" + text.replace("`", "'") + "`"
