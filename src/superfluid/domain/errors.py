"""Domain errors carry the user-facing message; the edges decide how to show it.

The CLI prints `superfluid: <message>` and exits 2; HTTP answers 4xx with an OpenAI error body.
No traceback ever reaches a user for bad input.
"""


class SuperfluidError(Exception):
    """Base of every error whose message is meant for a user, verbatim."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class DirectiveError(SuperfluidError):
    """A `--speculate` value that cannot be resolved (startup error, exit 2)."""


class HeaderError(SuperfluidError):
    """A `.base` header that does not read."""


class NotABundle(HeaderError):
    """A file that is not a `.base` bundle at all (too short, another magic, a GGUF)."""


class ModelFileError(SuperfluidError):
    """A model path that no runtime can serve, or names that cannot tell models apart (exit 2)."""


class SettingsError(SuperfluidError):
    """A speculation flag or environment value out of range (exit 2)."""


class SamplingParamsError(SuperfluidError, ValueError):
    """A sampling parameter out of range (a request's fault: HTTP 400)."""
