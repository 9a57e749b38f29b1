"""A JSON value checked one character at a time, for arguments that stream as they are written."""

from __future__ import annotations

import enum

JSON_SPACE = frozenset(" \t\n\r")


class Scan(enum.Enum):
    MORE = enum.auto()  # the character belongs to the value, which goes on
    DONE = enum.auto()  # the character was the value's last
    BEFORE = enum.auto()  # the value (a number) ended before this character
    INVALID = enum.auto()  # no JSON value goes on with this character


_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_ESCAPED = frozenset('"\\/bfnrt')
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
#: A number's states, and those in which it may end.
_NUMBER = frozenset({"minus", "zero", "int", "dot", "frac", "exp", "exp_sign", "exp_digits"})
_NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp_digits"})


class JsonScan:
    """Checks one JSON value a character at a time, as Python's `json` reads it (less NaN and
    Infinity), and says where it ends: the stream sends only text that is JSON so far. It is
    fed "" when the text ends."""

    def __init__(self) -> None:
        self._stack: list[str] = []  # open containers: "{" or "["
        self._state = "value"
        self._key = False  # the string being read is an object's key
        self._left = ""  # a literal's characters still to come
        self._hex = 0  # a \u escape's hex digits still to come

    def feed(self, ch: str) -> Scan:
        state = self._state
        if state == "string":
            return self._string(ch)
        if state == "escape":
            if ch == "u":
                self._state, self._hex = "hex", 4
                return Scan.MORE
            self._state = "string"
            return Scan.MORE if ch in _ESCAPED else Scan.INVALID
        if state == "hex":
            if ch not in _HEX_DIGITS:
                return Scan.INVALID
            self._hex -= 1
            if not self._hex:
                self._state = "string"
            return Scan.MORE
        if state == "literal":
            if not ch or not self._left.startswith(ch):  # "": the text ended
                return Scan.INVALID
            self._left = self._left[1:]
            return Scan.MORE if self._left else self._value_done()
        if state in _NUMBER:
            return self._number(ch)
        if state == "done":
            return Scan.INVALID
        if ch in JSON_SPACE:  # between tokens, inside a container
            return Scan.MORE if self._stack else Scan.INVALID
        return self._structure(state, ch)

    def _structure(self, state: str, ch: str) -> Scan:
        if state == "array_first" and ch == "]":
            return self._close()
        if state in ("value", "array_first"):
            return self._begin(ch)
        if state in ("object_first", "key"):
            if ch == '"':
                self._state, self._key = "string", True
                return Scan.MORE
            return self._close() if state == "object_first" and ch == "}" else Scan.INVALID
        if state == "colon":
            if ch != ":":
                return Scan.INVALID
            self._state = "value"
            return Scan.MORE
        # "next": after a value inside a container
        top = self._stack[-1]
        if ch == ",":
            self._state = "key" if top == "{" else "value"
            return Scan.MORE
        return self._close() if ch == ("}" if top == "{" else "]") else Scan.INVALID

    def _begin(self, ch: str) -> Scan:
        if ch in ("{", "["):
            self._stack.append(ch)
            self._state = "object_first" if ch == "{" else "array_first"
        elif ch == '"':
            self._state, self._key = "string", False
        elif ch in _LITERALS:
            self._state, self._left = "literal", _LITERALS[ch]
        elif ch == "-":
            self._state = "minus"
        elif ch in _DIGITS:
            self._state = "zero" if ch == "0" else "int"
        else:
            return Scan.INVALID
        return Scan.MORE

    def _string(self, ch: str) -> Scan:
        if ch == '"':
            if self._key:
                self._state, self._key = "colon", False
                return Scan.MORE
            return self._value_done()
        if ch == "\\":
            self._state = "escape"
            return Scan.MORE
        return Scan.MORE if ch >= " " else Scan.INVALID  # control characters are not JSON

    def _number(self, ch: str) -> Scan:
        state = self._state
        following = None
        if ch in _DIGITS:
            following = {
                "minus": "zero" if ch == "0" else "int",
                "zero": None,  # no digit follows a leading zero
                "int": "int",
                "dot": "frac",
                "frac": "frac",
                "exp": "exp_digits",
                "exp_sign": "exp_digits",
                "exp_digits": "exp_digits",
            }[state]
        elif ch == "." and state in ("zero", "int"):
            following = "dot"
        elif ch in ("e", "E") and state in ("zero", "int", "frac"):
            following = "exp"
        elif ch in ("+", "-") and state == "exp":
            following = "exp_sign"
        if following is not None:
            self._state = following
            return Scan.MORE
        if state not in _NUMBER_ENDS:
            return Scan.INVALID
        if not self._stack:
            self._state = "done"
            return Scan.BEFORE
        self._state = "next"
        return self.feed(ch)

    def _close(self) -> Scan:
        self._stack.pop()
        return self._value_done()

    def _value_done(self) -> Scan:
        if self._stack:
            self._state = "next"
            return Scan.MORE
        self._state = "done"
        return Scan.DONE
