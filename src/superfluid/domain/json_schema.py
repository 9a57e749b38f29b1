"""A byte-level recogniser for JSON that validates against a schema (forced tool calls).

`tool_choice: "required"` or a named function promises a call whose `arguments` validate
against the function's `parameters` schema, whatever the model. A grammar lane gets there:
every token is checked against `SchemaPrefix`, which accepts a prefix only if some continuation
of it is a JSON text valid under the schema. The schema is compiled first into a small tree of
`Node`s; what the tree cannot promise is refused when the request arrives (`SchemaUnsupported`,
a 400 naming the keyword), never discovered half-way through a reply.

Supported: `type` (one or a list), `properties`, `required`, `additionalProperties`, `items`,
`minItems`/`maxItems`, `enum`, `const`, `anyOf`/`oneOf` whose branches start with different
bytes, `$ref` into `$defs`/`definitions` (not recursive), and annotations (`description`,
`title`, `default`, `examples`, `format`, ...), which assert nothing. Keywords that constrain
lengths, ranges or patterns are refused.

Choices that keep the recogniser deterministic (one state per prefix):
- Declared properties are written in the schema's order, optional ones may be left out, and no
  undeclared property is written: the result validates whatever `additionalProperties` says.
- `enum` and `const` values are matched in compact JSON (`json.dumps(..., separators=(",", ":"))`).
- Whitespace between tokens is allowed in runs of at most `MAX_BLANK_RUN` bytes, never before the
  top-level value, so a model cannot stall a lane in blanks.
- Numbers have at most `MAX_INTEGER_DIGITS` digits before the point and `MAX_EXPONENT_DIGITS` in
  the exponent, so every number a client parses is finite (`1e999` is valid JSON but reads
  as infinity in most JSON libraries).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from superfluid.domain.json_grammar import DIGITS, ESCAPES, HEX, NUMBER_NEXT, WHITESPACE

MAX_BLANK_RUN = 16
#: Numbers stay finite and exact where clients read them: at most this many digits before the
#: point (an int64 holds 18), and exponents of at most two digits (|e| <= 99).
MAX_INTEGER_DIGITS = 18
MAX_EXPONENT_DIGITS = 2
_MAX_REF_DEPTH = 16
_NUMBER_START = DIGITS | {ord("-")}

#: Keywords that would constrain a value in ways the recogniser does not enforce.
UNSUPPORTED_KEYWORDS = (
    "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "uniqueItems", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "if", "then", "else", "not",
    "allOf", "minProperties", "maxProperties", "contains", "prefixItems",
    "unevaluatedProperties", "unevaluatedItems", "additionalItems", "minContains",
    "maxContains",
)  # fmt: skip


class SchemaUnsupported(ValueError):
    """A schema this recogniser cannot enforce; the message names the keyword and where."""


# -- the compiled schema --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnyValue:
    pass


@dataclass(frozen=True, slots=True)
class Literals:
    """One of these exact byte strings (enum, const, booleans, null)."""

    options: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class String:
    pass


@dataclass(frozen=True, slots=True)
class Number:
    integer: bool


@dataclass(frozen=True, slots=True)
class Property:
    key: str
    value: Node
    required: bool

    @property
    def key_tail(self) -> bytes:
        """The key as JSON after its opening quote (closing quote included)."""
        return json.dumps(self.key, ensure_ascii=False).encode()[1:]


@dataclass(frozen=True, slots=True)
class Object:
    """Declared properties in order; `properties=None` is a map of any keys to `values`."""

    properties: tuple[Property, ...] | None
    values: Node = AnyValue()


@dataclass(frozen=True, slots=True)
class Array:
    items: Node
    min_items: int = 0
    max_items: int | None = None


@dataclass(frozen=True, slots=True)
class Choice:
    """Branches told apart by their first byte."""

    options: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Tagged:
    """One of several values, each opened by its own literal prefix and closed by `suffix`.

    A forced call without a named function: `{"name":"<f>","arguments":` then f's arguments then
    `}`. The prefix picks the branch, so the arguments' schema can depend on the name.
    """

    branches: tuple[tuple[bytes, Node], ...]
    suffix: bytes = b"}"


Node = AnyValue | Literals | String | Number | Object | Array | Choice | Tagged


def first_bytes(node: Node) -> frozenset[int]:
    """The bytes a value of `node` may start with."""
    if isinstance(node, AnyValue):
        return frozenset(b'{["tfn') | _NUMBER_START
    if isinstance(node, Literals):
        return frozenset(option[0] for option in node.options)
    if isinstance(node, String):
        return frozenset(b'"')
    if isinstance(node, Number):
        return _NUMBER_START
    if isinstance(node, Object):
        return frozenset(b"{")
    if isinstance(node, Array):
        return frozenset(b"[")
    if isinstance(node, Tagged):
        return frozenset(prefix[0] for prefix, _ in node.branches)
    return frozenset().union(*(first_bytes(option) for option in node.options))


def _compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def compile_schema(schema: Any, *, where: str = "parameters") -> Node:
    """The tree for a JSON Schema; `where` names it in refusals (e.g. `tools[0]...parameters`)."""
    return _Compiler(schema if isinstance(schema, Mapping) else {}, where).node(schema, where, 0)


class _Compiler:
    def __init__(self, root: Mapping[str, Any], where: str) -> None:
        self._root = root
        self._where = where

    def node(self, schema: Any, where: str, depth: int) -> Node:
        if schema is True or schema == {}:
            return AnyValue()
        if schema is False:
            raise SchemaUnsupported(f"`{where}` is `false`: no value can satisfy it")
        if not isinstance(schema, Mapping):
            raise SchemaUnsupported(f"`{where}` is not a JSON Schema object")
        for keyword in UNSUPPORTED_KEYWORDS:
            if keyword in schema:
                raise SchemaUnsupported(
                    f"`{where}` uses `{keyword}`, which a forced tool call cannot enforce"
                )
        if "$ref" in schema:
            return self._ref(schema["$ref"], where, depth)
        if "const" in schema:
            return Literals((_compact(schema["const"]),))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaUnsupported(f"`{where}.enum` must be a non-empty list")
            return Literals(tuple(dict.fromkeys(_compact(v) for v in values)))
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                branches = schema[keyword]
                if not isinstance(branches, list) or not branches:
                    raise SchemaUnsupported(f"`{where}.{keyword}` must be a non-empty list")
                return self._choice(
                    [
                        self.node(branch, f"{where}.{keyword}[{i}]", depth)
                        for i, branch in enumerate(branches)
                    ],
                    f"{where}.{keyword}",
                )
        kind = schema.get("type")
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return AnyValue()
        if isinstance(kind, list):
            if not kind:
                raise SchemaUnsupported(f"`{where}.type` is an empty list")
            typed = [self._typed(schema, k, where, depth) for k in dict.fromkeys(kind)]
            return self._choice(typed, f"{where}.type")
        return self._typed(schema, kind, where, depth)

    def _ref(self, ref: Any, where: str, depth: int) -> Node:
        if depth >= _MAX_REF_DEPTH:
            raise SchemaUnsupported(
                f"`{where}.$ref` is recursive; forced calls need a finite schema"
            )
        for prefix in ("#/$defs/", "#/definitions/"):
            if isinstance(ref, str) and ref.startswith(prefix):
                table = self._root.get(prefix[2:-1], {})
                name = ref[len(prefix) :]
                if isinstance(table, Mapping) and name in table:
                    return self.node(table[name], f"{where}.$ref", depth + 1)
        raise SchemaUnsupported(f"`{where}.$ref` ({ref!r}) does not name a definition here")

    def _typed(self, schema: Mapping[str, Any], kind: Any, where: str, depth: int) -> Node:
        if kind == "string":
            return String()
        if kind in ("integer", "number"):
            return Number(integer=kind == "integer")
        if kind == "boolean":
            return Literals((b"true", b"false"))
        if kind == "null":
            return Literals((b"null",))
        if kind == "object":
            return self._object(schema, where, depth)
        if kind == "array":
            return self._array(schema, where, depth)
        raise SchemaUnsupported(f"`{where}.type` is {kind!r}, not a JSON Schema type")

    def _object(self, schema: Mapping[str, Any], where: str, depth: int) -> Object:
        properties = schema.get("properties")
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
            raise SchemaUnsupported(f"`{where}.required` must be a list of names")
        if properties is None and not required:
            if extra is False:
                return Object(properties=())
            values = (
                AnyValue()
                if extra is True
                else self.node(extra, f"{where}.additionalProperties", depth)
            )
            return Object(properties=None, values=values)
        if properties is None:
            properties = {}
        if not isinstance(properties, Mapping):
            raise SchemaUnsupported(f"`{where}.properties` must be an object")
        declared = [
            Property(
                key,
                self.node(value, f"{where}.properties.{key}", depth),
                key in required,
            )
            for key, value in properties.items()
        ]
        for key in dict.fromkeys(required):
            if key not in properties:
                if extra is False:
                    raise SchemaUnsupported(
                        f"`{where}.required` names `{key}`, which no property may be"
                    )
                value = (
                    AnyValue()
                    if extra is True
                    else self.node(extra, f"{where}.additionalProperties", depth)
                )
                declared.append(Property(key, value, True))
        return Object(properties=tuple(declared))

    def _array(self, schema: Mapping[str, Any], where: str, depth: int) -> Array:
        items = self.node(schema.get("items", True), f"{where}.items", depth)
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if (
            not isinstance(low, int)
            or low < 0
            or (high is not None and (not isinstance(high, int) or high < low))
        ):
            raise SchemaUnsupported(f"`{where}` has minItems/maxItems no array can meet")
        return Array(items, low, high)

    def _choice(self, options: Sequence[Node], where: str) -> Node:
        merged: list[Node] = []
        for option in options:
            if isinstance(option, Choice):
                merged.extend(option.options)
            else:
                merged.append(option)
        # integer ⊂ number: a branch list with both is the number branch.
        if any(isinstance(o, Number) and not o.integer for o in merged):
            merged = [o for o in merged if not (isinstance(o, Number) and o.integer)]
        if any(isinstance(o, AnyValue) for o in merged):
            return AnyValue()
        literal_options = [o for o in merged if isinstance(o, Literals)]
        if len(literal_options) > 1:
            joined = Literals(tuple(dict.fromkeys(b for o in literal_options for b in o.options)))
            merged = [o for o in merged if not isinstance(o, Literals)] + [joined]
        seen: set[int] = set()
        for option in merged:
            starts = first_bytes(option)
            if seen & starts:
                raise SchemaUnsupported(
                    f"`{where}` has branches that begin alike; a forced call needs branches "
                    "of different types"
                )
            seen |= starts
        return merged[0] if len(merged) == 1 else Choice(tuple(merged))


# -- the recogniser -------------------------------------------------------------------------------

# Frames of the parse stack (the top is last), as tuples for speed:
#   ("V", node, top)               a value of `node` must start (top: the whole output's value)
#   ("L", options, pos)            inside one of several literals, `pos` bytes matched
#   ("S", escape)                  inside a string: 0 plain, 1 after "\", 11..14 hex digits left + 10
#   ("N", integer, state, digits)  inside a number; `digits` of its integer part or exponent
#   ("O", node, index, phase)      inside an object; `index` is the next declared property
#   ("K", node, candidates, pos)   inside a declared key: (property index, key tail) candidates
#   ("A", node, count, phase)      inside an array of `count` items so far
#   ("T", branches, pos)           inside a tagged value's prefix
Frame = tuple[Any, ...]

_ANY_OBJECT = Object(properties=None)
_ANY_ARRAY = Array(AnyValue())
_ANY_LITERALS = Literals((b"true", b"false", b"null"))

#: A step's result: frames replacing the top one, and whether the byte was used up (else the
#: new top reads it again); None refuses the byte.
_Step = tuple[tuple[Frame, ...], bool] | None


class SchemaPrefix:
    """The state after some bytes of output; `advance` tries more without changing this one."""

    __slots__ = ("_blank_run", "_stack")

    def __init__(self, root: Node) -> None:
        self._stack: tuple[Frame, ...] = (("V", root, True),)
        self._blank_run = 0

    @property
    def complete(self) -> bool:
        """The value is whole: only whitespace may follow."""
        return not self._stack

    def advance(self, data: bytes) -> SchemaPrefix | None:
        """The state after `data`, or None if no valid value starts with prefix + data."""
        stack, blank = self._stack, self._blank_run
        for byte in data:
            while True:
                top = stack[-1] if stack else None
                if byte in WHITESPACE and (top is None or top[0] in "VOA"):
                    if top is not None and top[0] == "V" and top[2]:
                        return None  # nothing before the top-level value
                    blank += 1
                    if blank > MAX_BLANK_RUN:
                        return None
                    break
                if top is None:
                    return None  # only whitespace may follow a whole value
                result = _step(top, byte)
                if result is None:
                    return None
                frames, used = result
                stack = stack[:-1] + frames
                if used:
                    blank = 0
                    break
        other = SchemaPrefix.__new__(SchemaPrefix)
        other._stack, other._blank_run = stack, blank
        return other


def _step(frame: Frame, byte: int) -> _Step:
    kind = frame[0]
    if kind == "S":
        return _string(frame[1], byte)
    if kind == "L":
        return _literal(frame[1], frame[2], byte)
    if kind == "N":
        return _number(frame[1], frame[2], frame[3], byte)
    if kind == "V":
        return _value(frame[1], byte)
    if kind == "O":
        return _object(frame, byte)
    if kind == "K":
        return _key(frame, byte)
    if kind == "A":
        return _array(frame, byte)
    return _tagged(frame[1], frame[2], byte)


def _value(node: Node, byte: int) -> _Step:
    if isinstance(node, Choice):
        for option in node.options:
            if byte in first_bytes(option):
                return _value(option, byte)
        return None
    if isinstance(node, AnyValue):
        if byte == ord("{"):
            return _value(_ANY_OBJECT, byte)
        if byte == ord("["):
            return _value(_ANY_ARRAY, byte)
        if byte == ord('"'):
            return _value(String(), byte)
        if byte in _NUMBER_START:
            return _value(Number(integer=False), byte)
        return _literal(_ANY_LITERALS.options, 0, byte)
    if isinstance(node, Literals):
        return _literal(node.options, 0, byte)
    if isinstance(node, String):
        return ((("S", 0),), True) if byte == ord('"') else None
    if isinstance(node, Number):
        if byte == ord("-"):
            return ((("N", node.integer, "sign", 0),), True)
        if byte in DIGITS:
            return ((("N", node.integer, "zero" if byte == ord("0") else "int", 1),), True)
        return None
    if isinstance(node, Object):
        return ((("O", node, 0, "open"),), True) if byte == ord("{") else None
    if isinstance(node, Array):
        return ((("A", node, 0, "open"),), True) if byte == ord("[") else None
    return _tagged(node.branches, 0, byte)


def _literal(options: tuple[bytes, ...], pos: int, byte: int) -> _Step:
    going = tuple(o for o in options if len(o) > pos and o[pos] == byte)
    if going:
        if all(len(o) == pos + 1 for o in going):
            return ((), True)
        # Where an option ends here and a longer one goes on, the next byte decides.
        return ((("L", going, pos + 1),), True)
    if pos and any(len(o) == pos for o in options):
        return ((), False)  # an option ended on the previous byte; this byte is the parent's
    return None


def _string(escape: int, byte: int) -> _Step:
    if escape == 0:
        if byte == ord('"'):
            return ((), True)
        if byte == ord("\\"):
            return ((("S", 1),), True)
        return ((("S", 0),), True) if byte >= 0x20 else None
    if escape == 1:
        if byte == ord("u"):
            return ((("S", 14),), True)
        return ((("S", 0),), True) if byte in ESCAPES else None
    if byte not in HEX:
        return None
    return ((("S", 0 if escape == 11 else escape - 1),), True)


def _number(integer: bool, state: str, digits: int, byte: int) -> _Step:
    allowed, may_end = NUMBER_NEXT[state]
    if integer and byte in b".eE":
        allowed = frozenset()
    if byte in allowed:
        if byte in DIGITS:
            if state == "sign":
                following = "zero" if byte == ord("0") else "int"
            else:
                following = {"dot": "frac", "exp": "exp_int", "exp_sign": "exp_int"}.get(
                    state, state
                )
            counted = following in ("int", "exp_int")
            digits = digits + 1 if counted and following == state else (1 if counted else digits)
            limit = MAX_EXPONENT_DIGITS if following == "exp_int" else MAX_INTEGER_DIGITS
            if counted and digits > limit:
                return None
        elif byte == ord("."):
            following = "dot"
        elif byte in b"eE":
            following = "exp"
        else:
            following = "exp_sign"
        return ((("N", integer, following, digits),), True)
    return ((), False) if may_end else None


def _remaining_required(node: Object, index: int) -> bool:
    return node.properties is not None and any(p.required for p in node.properties[index:])


def _key_candidates(node: Object, index: int) -> tuple[tuple[int, bytes], ...]:
    """Declared keys that may come next: up to and including the next required one."""
    assert node.properties is not None
    candidates = []
    for at in range(index, len(node.properties)):
        candidates.append((at, node.properties[at].key_tail))
        if node.properties[at].required:
            break
    return tuple(candidates)


def _object(frame: Frame, byte: int) -> _Step:
    _, node, index, phase = frame
    if phase in ("open", "comma"):
        if byte == ord('"'):
            if node.properties is None:  # a free key, then its value
                return ((("O", node, index, "colon"), ("S", 0)), True)
            candidates = _key_candidates(node, index)
            return ((("K", node, candidates, 0),), True) if candidates else None
        if byte == ord("}") and phase == "open" and not _remaining_required(node, index):
            return ((), True)
        return None
    if phase == "colon":
        if byte != ord(":"):
            return None
        value = node.values if node.properties is None else node.properties[index - 1].value
        return ((("O", node, index, "after"), ("V", value, False)), True)
    # phase "after": a value has been read
    if byte == ord("}"):
        return ((), True) if not _remaining_required(node, index) else None
    if byte == ord(","):
        more = node.properties is None or index < len(node.properties)
        return ((("O", node, index, "comma"),), True) if more else None
    return None


def _key(frame: Frame, byte: int) -> _Step:
    _, node, candidates, pos = frame
    going = tuple((at, tail) for at, tail in candidates if tail[pos] == byte)
    if not going:
        return None
    done = [at for at, tail in going if len(tail) == pos + 1]
    if done:  # a key tail ends with its closing quote, so no other candidate goes on
        return ((("O", node, done[0] + 1, "colon"),), True)
    return ((("K", node, going, pos + 1),), True)


def _array(frame: Frame, byte: int) -> _Step:
    _, node, count, phase = frame
    if phase == "after":
        if byte == ord("]"):
            return ((), True) if count >= node.min_items else None
        if byte == ord(","):
            more = node.max_items is None or count < node.max_items
            return ((("A", node, count, "comma"),), True) if more else None
        return None
    if byte == ord("]") and phase == "open":
        return ((), True) if node.min_items == 0 else None
    if node.max_items is not None and count >= node.max_items:
        return None
    if byte not in first_bytes(node.items):
        return None
    return ((("A", node, count + 1, "after"), ("V", node.items, False)), False)


def _tagged(branches: tuple[tuple[bytes, Node], ...], pos: int, byte: int) -> _Step:
    going = tuple((prefix, value) for prefix, value in branches if prefix[pos] == byte)
    if not going:
        return None
    done = [value for prefix, value in going if len(prefix) == pos + 1]
    if done:  # prefixes end alike (`"arguments":`) and differ before, so one is done alone
        return ((("L", (b"}",), 0), ("V", done[0], False)), True)
    return ((("T", going, pos + 1),), True)


# -- forced tool calls ----------------------------------------------------------------------------


def call_arguments(parameters: Mapping[str, Any] | None, *, where: str) -> Node:
    """A function's arguments: an object under its `parameters` (no parameters: `{}`)."""
    if parameters is None:
        return Object(properties=())
    node = compile_schema(parameters, where=where)
    if isinstance(node, AnyValue):  # `{}`: arguments are an object, any object
        return Object(properties=None)
    if not isinstance(node, Object):
        raise SchemaUnsupported(f'`{where}` must describe an object (`"type": "object"`)')
    return node


def call_list(functions: Sequence[tuple[str, Node]], *, parallel: bool) -> Node:
    """`[{"name":"<f>","arguments":{...}}, ...]`: one call, or several when parallel."""
    branches = tuple(
        (b'{"name":' + _compact(name) + b',"arguments":', arguments)
        for name, arguments in functions
    )
    return Array(Tagged(branches), min_items=1, max_items=None if parallel else 1)
