"""Grammar lanes: a constraint the executor consults for every token of a lane.

`JsonObjectConstraint` keeps the lane's output a prefix of a JSON object (OpenAI's JSON mode),
`SchemaConstraint` a prefix of JSON valid under a compiled schema (a forced tool call); each
ends the lane when the value closes. Tokens are judged by their bytes, so one that splits a
UTF-8 character inside a string is still judged correctly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from superfluid.domain.json_grammar import JsonObjectPrefix
from superfluid.domain.json_schema import Node, SchemaPrefix


class TokenPieces:
    """Each token's bytes, computed once per model (a grammar checks thousands per step)."""

    def __init__(self, detokenize: Callable[[Sequence[int]], bytes]) -> None:
        self._detokenize = detokenize
        self._pieces: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._detokenize([token])
        return piece


class _Prefix(Protocol):
    @property
    def complete(self) -> bool: ...

    def advance(self, data: bytes) -> _Prefix | None: ...


class PrefixConstraint:
    """Allows a token when the output with its bytes is still a prefix the recogniser accepts."""

    def __init__(
        self, pieces: Callable[[int], bytes], stops: frozenset[int], start: _Prefix
    ) -> None:
        self._pieces = pieces
        self._stops = stops
        self._state = start

    def allowed(self, token: int) -> bool:
        if token in self._stops:
            return self._state.complete
        piece = self._pieces(token)
        # An empty piece (a control token) would let the lane stall without progress.
        return bool(piece) and self._state.advance(piece) is not None

    def commit(self, token: int) -> None:
        if token in self._stops:
            return
        advanced = self._state.advance(self._pieces(token))
        if advanced is None:
            raise ValueError(f"token {token} was committed but breaks the grammar")
        self._state = advanced

    @property
    def complete(self) -> bool:
        return self._state.complete


class JsonObjectConstraint(PrefixConstraint):
    def __init__(self, pieces: Callable[[int], bytes], stops: frozenset[int]) -> None:
        super().__init__(pieces, stops, JsonObjectPrefix())


class SchemaConstraint(PrefixConstraint):
    def __init__(self, pieces: Callable[[int], bytes], stops: frozenset[int], schema: Node) -> None:
        super().__init__(pieces, stops, SchemaPrefix(schema))
