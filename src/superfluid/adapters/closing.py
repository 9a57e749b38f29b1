"""`with resource:` for the adapters that hold native memory or maps: closed on the way out."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClosedOnExit:
    """A base for resources with `close()`: using one in a `with` block closes it after."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
