"""A byte-level JSON recogniser for grammar lanes (`response_format: json_object`).

It reads a prefix byte by byte and answers two questions: can this prefix still become a JSON
object (else the token that produced it is not allowed), and is the object complete (then the
lane ends). It works on bytes, not characters, because tokens can split a UTF-8 character: JSON's
structure is ASCII, and bytes of 0x80 and above are only ever allowed inside strings.

The top level must be an object (OpenAI's JSON mode), starting at the first byte; whitespace
between tokens is allowed in runs of at most `MAX_BLANK_RUN` bytes (enough for any indentation),
so a model cannot stall a grammar lane in whitespace.
"""

from __future__ import annotations

import enum

WHITESPACE = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrt')
MAX_BLANK_RUN = 16
_LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}


class _Mode(enum.Enum):
    TOP = enum.auto()  # before the top-level object
    VALUE = enum.auto()  # a value must start
    KEY_OR_CLOSE = enum.auto()  # just after "{"
    KEY = enum.auto()  # after "," in an object
    COLON = enum.auto()
    VALUE_OR_CLOSE = enum.auto()  # just after "["
    COMMA_OR_CLOSE = enum.auto()  # after a value inside a container
    STRING = enum.auto()
    ESCAPE = enum.auto()
    UNICODE = enum.auto()  # inside \uXXXX
    NUMBER = enum.auto()
    LITERAL = enum.auto()
    DONE = enum.auto()


# Number sub-states: which bytes may come next, and whether the number may end here.
NUMBER_NEXT = {
    "sign": (DIGITS, False),
    "zero": (frozenset(b".eE"), True),
    "int": (DIGITS | frozenset(b".eE"), True),
    "dot": (DIGITS, False),
    "frac": (DIGITS | frozenset(b"eE"), True),
    "exp": (DIGITS | frozenset(b"+-"), False),
    "exp_sign": (DIGITS, False),
    "exp_int": (DIGITS, True),
}


class JsonObjectPrefix:
    """The state after some bytes of output; `advance` tries more without changing this one."""

    __slots__ = ("_blank_run", "_is_key", "_literal", "_mode", "_number", "_stack", "_unicode_left")

    def __init__(self) -> None:
        self._mode = _Mode.TOP
        self._stack: list[str] = []  # "{" or "[" per open container
        self._is_key = False
        self._literal = b""
        self._number = ""
        self._unicode_left = 0
        self._blank_run = 0

    @property
    def complete(self) -> bool:
        """The top-level object is closed: only whitespace may follow."""
        return self._mode is _Mode.DONE

    def advance(self, data: bytes) -> JsonObjectPrefix | None:
        """The state after `data`, or None if no JSON object starts with prefix + data."""
        state = self._copy()
        for byte in data:
            if not state._step(byte):
                return None
        return state

    def _copy(self) -> JsonObjectPrefix:
        other = JsonObjectPrefix.__new__(JsonObjectPrefix)
        other._mode = self._mode
        other._stack = self._stack.copy()
        other._is_key = self._is_key
        other._literal = self._literal
        other._number = self._number
        other._unicode_left = self._unicode_left
        other._blank_run = self._blank_run
        return other

    def _step(self, byte: int) -> bool:
        mode = self._mode
        if mode is _Mode.STRING:
            if byte == ord('"'):
                self._mode = _Mode.COLON if self._is_key else self._after_value()
                return True
            if byte == ord("\\"):
                self._mode = _Mode.ESCAPE
                return True
            return byte >= 0x20  # control characters must be escaped
        if mode is _Mode.ESCAPE:
            if byte == ord("u"):
                self._mode, self._unicode_left = _Mode.UNICODE, 4
                return True
            self._mode = _Mode.STRING
            return byte in ESCAPES
        if mode is _Mode.UNICODE:
            self._unicode_left -= 1
            if self._unicode_left == 0:
                self._mode = _Mode.STRING
            return byte in HEX
        if mode is _Mode.LITERAL:
            if byte != self._literal[0]:
                return False
            self._literal = self._literal[1:]
            if not self._literal:
                self._mode = self._after_value()
            return True
        if mode is _Mode.NUMBER:
            allowed, may_end = NUMBER_NEXT[self._number]
            if byte in allowed:
                self._number = _next_number_state(self._number, byte)
                return True
            if not may_end:
                return False
            self._mode = self._after_value()
            return self._step(byte)  # the byte that ended the number belongs to what follows
        if byte in WHITESPACE:
            # Allowed between any two tokens of JSON and after the object, not before it.
            self._blank_run += 1
            return mode is not _Mode.TOP and self._blank_run <= MAX_BLANK_RUN
        self._blank_run = 0
        return self._structural(mode, byte)

    def _structural(self, mode: _Mode, byte: int) -> bool:
        if mode is _Mode.TOP:
            return byte == ord("{") and self._open("{")
        if mode is _Mode.DONE:
            return False
        if mode in (_Mode.KEY_OR_CLOSE, _Mode.KEY):
            if byte == ord('"'):
                self._mode, self._is_key = _Mode.STRING, True
                return True
            return mode is _Mode.KEY_OR_CLOSE and byte == ord("}") and self._close("{")
        if mode is _Mode.COLON:
            if byte == ord(":"):
                self._mode = _Mode.VALUE
                return True
            return False
        if mode is _Mode.COMMA_OR_CLOSE:
            top = self._stack[-1]
            if byte == ord(","):
                self._mode = _Mode.KEY if top == "{" else _Mode.VALUE
                return True
            return byte == ord("}" if top == "{" else "]") and self._close(top)
        if mode is _Mode.VALUE_OR_CLOSE and byte == ord("]"):
            return self._close("[")
        return self._value_start(byte)

    def _value_start(self, byte: int) -> bool:
        if byte == ord("{"):
            return self._open("{")
        if byte == ord("["):
            return self._open("[")
        if byte == ord('"'):
            self._mode, self._is_key = _Mode.STRING, False
            return True
        if byte in _LITERALS:
            self._mode, self._literal = _Mode.LITERAL, _LITERALS[byte]
            return True
        if byte == ord("-") or byte in DIGITS:
            self._mode = _Mode.NUMBER
            self._number = "sign" if byte == ord("-") else ("zero" if byte == ord("0") else "int")
            return True
        return False

    def _open(self, bracket: str) -> bool:
        self._stack.append(bracket)
        self._mode = _Mode.KEY_OR_CLOSE if bracket == "{" else _Mode.VALUE_OR_CLOSE
        return True

    def _close(self, bracket: str) -> bool:
        if not self._stack or self._stack[-1] != bracket:
            return False
        self._stack.pop()
        self._mode = self._after_value()
        return True

    def _after_value(self) -> _Mode:
        return _Mode.COMMA_OR_CLOSE if self._stack else _Mode.DONE


def _next_number_state(state: str, byte: int) -> str:
    if byte in DIGITS:
        if state == "sign":
            return "zero" if byte == ord("0") else "int"
        return {"dot": "frac", "exp": "exp_int", "exp_sign": "exp_int"}.get(state, state)
    if byte == ord("."):
        return "dot"
    if byte in b"eE":
        return "exp"
    return "exp_sign"  # + or - after e
