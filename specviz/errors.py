"""One exception type for every mistake a user can make; the UI and CLI show its message as is."""


class SpecvizError(ValueError):
    """Bad input (prompt, parameter, model path): the message is meant for the user."""
