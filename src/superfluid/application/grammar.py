"""Grammar lanes: a constraint the executor consults for every token of a lane.

`JsonObjectConstraint` keeps the lane's output a prefix of a JSON object (OpenAI's JSON mode)
and ends the lane when the object closes. Tokens are judged by their bytes, so one that splits
a UTF-8 character inside a string is still judged correctly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from superfluid.domain.json_grammar import JsonObjectPrefix


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


class JsonObjectConstraint:
    def __init__(self, pieces: Callable[[int], bytes], stops: frozenset[int]) -> None:
        self._pieces = pieces
        self._stops = stops
        self._state = JsonObjectPrefix()

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
            raise ValueError(f"token {token} was committed but breaks the JSON object")
        self._state = advanced

    @property
    def complete(self) -> bool:
        return self._state.complete
