"""What a basert drafter may ask of the target it drafts for: a narrow port.

The runtime builds its drafters (through the registry in `drafters/`) and hands itself over as
their target; the drafters know the target only through this Protocol, so no drafter module
imports the runtime and the package has no import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from superfluid.adapters.basert.hidden_store import F32
from superfluid.adapters.basert.model import DenseModel
from superfluid.adapters.basert.tokenizer import BundleTokenizer
from superfluid.application.ports import Capabilities
from superfluid.domain.bundle_header import BundleHeader


class DraftTarget(Protocol):
    """The loaded target model, as its drafters see it."""

    @property
    def path(self) -> Path: ...

    @property
    def header(self) -> BundleHeader: ...

    @property
    def model(self) -> DenseModel: ...

    @property
    def tokenizer(self) -> BundleTokenizer: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def length(self, seq: int) -> int:
        """Positions `seq` holds."""
        ...

    def require_taps(self, layer_ids: Sequence[int]) -> None:
        """Keep the hidden states at `layer_ids` for every fed token from now on."""
        ...

    def hidden(self, seq: int, taps: Sequence[int] | None = None, *, start: int = 0) -> F32:
        """The target's hidden states for `seq` from `start` at the given taps."""
        ...
