"""What the agent bench's sessions say: generated source files, the turns that read and edit
them, the `read_file` tool, and the chat templates llama-server renders them with.

A session looks like a coding agent's traffic. Each of its cycles names a file; the model calls
`read_file` for it (the call turn), the tool answers with the file, and the user asks for the file
back with one small change, a renamed function or a changed constant (the edit turn): a reply
that copies the file, where prompt-lookup drafting pays. The next cycle continues the same
conversation, so a server can reuse its prefix.

Files are generated Python-like modules, seeded by the session's key: no two sessions of a run
share a file, and the bench numbers its rounds so that no key repeats (a server that saw a file
before, llama-server's cross-request n-gram pool for one, would be handed the answer). The
tool is the user's side of the conversation: every call of a cycle is answered with that
cycle's file, whatever path the model wrote, so that the edit turn always has the file to copy;
whether the path was the one asked for is counted apart.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: The one function a session's model may call, and its parameters' schema.
READ_FILE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository and return its contents.",
        "parameters": READ_FILE_PARAMETERS,
    },
}
TOOLS = [READ_FILE]
SCHEMAS = {"read_file": READ_FILE_PARAMETERS}

SYSTEM = (
    "You are a coding agent working in a Python repository. To see a file, call the read_file "
    "tool with its path. When asked to change a file, reply with the whole updated file in one "
    "python code block and nothing else."
)

# -- generated files ------------------------------------------------------------------------

PACKAGES = (
    "billing", "catalog", "ingest", "ledger", "mailer", "orders", "payroll", "reports",
    "routing", "search", "shipping", "storage", "telemetry", "tickets", "users", "warehouse",
)  # fmt: skip
NOUNS = (
    "account", "batch", "bucket", "invoice", "item", "job", "order", "parcel", "record",
    "report", "request", "route", "session", "shipment", "ticket", "token", "user", "window",
    "entry", "event", "metric", "policy", "quota", "slot",
)  # fmt: skip
VERBS = (
    "load", "parse", "merge", "count", "split", "filter", "collect", "render", "validate",
    "resolve", "schedule", "archive", "refresh", "group", "rank", "normalize",
)  # fmt: skip
ATTRS = ("size", "weight", "priority", "total", "age", "score", "limit", "count", "level")
MODULES = ("json", "logging", "math", "os", "re", "time", "itertools", "functools", "heapq")
CONSTANT_NAMES = (
    "MAX_RETRIES", "BATCH_SIZE", "TIMEOUT_SECONDS", "PAGE_LIMIT", "CACHE_TTL", "MIN_SCORE",
    "WINDOW_DAYS", "QUEUE_DEPTH", "MAX_ITEMS", "FLUSH_EVERY",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Edit:
    """One small change: `old` becomes `new` wherever it stands as a whole word (a function's
    name) or in its one assignment (a constant's value); `ask` says so to the model."""

    ask: str
    pattern: str  # a regular expression matching what changes
    replacement: str

    def apply(self, text: str) -> str:
        return re.sub(self.pattern, self.replacement, text)


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    text: str
    edit: Edit

    @property
    def edited(self) -> str:
        """The file as a correct edit turn returns it."""
        return self.edit.apply(self.text)


def plural(noun: str) -> str:
    if noun.endswith("y"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def _function(rng: random.Random, name: str, calls: str | None, default: str) -> list[str]:
    """A small function named `name`; it calls `calls` when given (so a rename has two sites).
    `default` is its threshold's default value (a number, or a module constant)."""
    noun, attr = rng.choice(NOUNS), rng.choice(ATTRS)
    items, limit = plural(noun), rng.choice(("limit", "threshold", "floor", "cap"))
    head = f"def {name}({items}, {limit}={default}):"
    doc = f'    """{name.split("_")[0].capitalize()} the {items} whose {attr} passes {limit}."""'
    shape = rng.randrange(3)
    if shape == 0:
        body = [
            "    kept = []",
            f"    for {noun} in {items}:",
            f"        if {noun}.{attr} >= {limit}:",
            f"            kept.append({noun})",
            "    return kept",
        ]
    elif shape == 1:
        body = [
            "    totals = {}",
            f"    for {noun} in {items}:",
            f"        key = {noun}.{rng.choice(ATTRS)}",
            f"        totals[key] = totals.get(key, 0) + {noun}.{attr}",
            f"    return {{k: v for k, v in totals.items() if v > {limit}}}",
        ]
    else:
        body = [
            f"    ordered = sorted({items}, key=lambda {noun}: {noun}.{attr})",
            f"    return [{noun} for {noun} in ordered if {noun}.{attr} < {limit}]",
        ]
    if calls is not None:
        body = [f"    {items} = {calls}({items})", *body]
    return [head, doc, *body]


def _class(rng: random.Random, constant: str) -> list[str]:
    noun = rng.choice(NOUNS)
    name = noun.capitalize() + rng.choice(("Store", "Queue", "Index", "Cache", "Tracker"))
    attr = rng.choice(ATTRS)
    return [
        f"class {name}:",
        f'    """Keeps {plural(noun)} by id, at most {constant} of them."""',
        "",
        "    def __init__(self):",
        f"        self.{plural(noun)} = {{}}",
        "",
        f"    def add(self, {noun}):",
        f"        if len(self.{plural(noun)}) >= {constant}:",
        f'            raise ValueError("too many {plural(noun)}")',
        f"        self.{plural(noun)}[{noun}.id] = {noun}",
        "",
        f"    def {attr}_of(self, key):",
        f"        return self.{plural(noun)}[key].{attr}",
    ]


def source_file(key: str, lines: int) -> SourceFile:
    """A module of about `lines` lines, and an edit to ask for: seeded by `key` alone."""
    rng = random.Random(f"agent-file {key}")
    subject = rng.choice(NOUNS)
    package, module = rng.choice(PACKAGES), f"{subject}_{rng.choice(VERBS)}"
    constants = rng.sample(CONSTANT_NAMES, 2)
    values = [rng.randint(2, 60), rng.randint(2, 60)]
    names: list[str] = []
    while len(names) < 6:
        name = f"{rng.choice(VERBS)}_{plural(rng.choice(NOUNS))}"
        if name not in names:
            names.append(name)
    text = [
        f'"""{rng.choice(VERBS).capitalize()} and {rng.choice(VERBS)} {plural(subject)} '
        f'for the {package} service."""',
        "",
        *sorted(f"import {m}" for m in rng.sample(MODULES, 2)),
        "",
        *(f"{c} = {v}" for c, v in zip(constants, values, strict=True)),
    ]
    defined: list[str] = []
    while len(text) < lines - 4:
        text.append("")
        text.append("")
        if len(defined) == 2 and rng.random() < 0.5:
            text += _class(rng, constants[1])
            continue
        name = names[len(defined)] if len(defined) < len(names) else f"step_{len(defined)}"
        default = constants[0] if rng.random() < 0.3 else str(rng.randint(1, 9) * 10)
        text += _function(rng, name, defined[-1] if defined else None, default)
        defined.append(name)
    source = "\n".join(text) + "\n"
    path = f"src/{package}/{module}.py"
    return SourceFile(path, source, _edit(rng, source, defined, constants, values))


def _edit(
    rng: random.Random, source: str, functions: list[str], constants: list[str], values: list[int]
) -> Edit:
    """Rename a function that another calls (two sites to change), or change a constant."""
    called = [f for f in functions if len(re.findall(rf"\b{f}\b", source)) >= 2]
    if called and rng.random() < 0.6:
        old = rng.choice(called)
        new = f"{rng.choice(VERBS)}_{old.split('_', 1)[1]}"
        if new == old or re.search(rf"\b{new}\b", source):
            new = f"{old}_v2"
        return Edit(
            f"rename the function `{old}` to `{new}` everywhere it appears",
            rf"\b{old}\b",
            new,
        )
    at = rng.randrange(len(constants))
    old_value, new_value = values[at], values[at] + rng.randint(1, 9) * 5
    return Edit(
        f"change the constant `{constants[at]}` from {old_value} to {new_value}",
        rf"(?m)^{constants[at]} = {old_value}$",
        f"{constants[at]} = {new_value}",
    )


# -- sessions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What one session reads and edits, cycle by cycle: the same for every system in a run."""

    key: str
    files: tuple[SourceFile, ...]


def session_plan(round_: int, client: int, cycles: int, lines: int) -> SessionPlan:
    """Session `client` of round `round_`: `cycles` fresh files (no two keys share one)."""
    key = f"{round_}.{client}"
    files = tuple(source_file(f"{key}.{cycle}", lines) for cycle in range(cycles))
    return SessionPlan(key, files)


#: The file of the example cycle every session opens with (the same in every session, as an
#: agent's instructions are).
EXAMPLE = "example"


def opening() -> list[dict[str, Any]]:
    """The conversation every session starts from: the instructions, then one worked cycle
    (a call, the tool's answer, an edit request and the edited file in a code block). Small
    models follow a pattern they have seen far better than one described: without it the base
    model answers an edit request by repeating the tool's output block, and the instruct model
    rewrites the file instead of copying it."""
    source = source_file(EXAMPLE, 12)
    call = {
        "id": "call_example",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": source.path})},
    }
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": call_line(source)},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": source.text},
        {"role": "user", "content": edit_line(source)},
        {"role": "assistant", "content": f"```python\n{source.edited}```"},
    ]


def call_line(source: SourceFile) -> str:
    return f"Open `{source.path}`."


def edit_line(source: SourceFile) -> str:
    return (
        f"In `{source.path}`, {source.edit.ask}. Reply with the whole updated file in one python "
        "code block. Change nothing else."
    )


def pasted_line(source: SourceFile) -> str:
    """What the user sends when the model did not call the tool: the file, pasted."""
    return f"Here is `{source.path}`:\n\n```python\n{source.text}```"


#: Tokens per character of these files, with a fifth to spare: Gemma 3's and SmolLM2's
#: tokenizers take 0.25-0.30 (measured on 20 files each).
TOKENS_PER_CHAR = 0.36


def edit_budget(source: SourceFile) -> int:
    """`max_tokens` for an edit turn: the whole file, its code fence, and a little more."""
    return int(len(source.edited) * TOKENS_PER_CHAR) + 32


#: `max_tokens` for a call turn: a call of read_file with a path is under 40 tokens on every
#: template measured; the rest bounds a model that writes text first.
CALL_BUDGET = 64


#: Edit turns stop where the code block closes. The base model never ends its turn: after the
#: block it runs on to `max_tokens` in made-up turns, which llama-server's parser reads as
#: tool calls (a dozen per reply, each answered with the file, until the context is full) and
#: superfluid's does not. An agent that asked for a code block stops reading there; so does
#: the bench, on every server alike.
EDIT_STOP = "\n```"


def closed(text: str) -> str:
    """An edit reply with the fence the stop cut off put back, so the conversation carries the
    block whole (as the model wrote it, whatever the server's stop handling)."""
    return text + EDIT_STOP if text.count("```") % 2 else text


def code_block(text: str) -> str | None:
    """The first fenced code block of a reply, without its fences (None: there is none)."""
    match = re.search(r"```[a-zA-Z]*\n(.*?)```", text, re.DOTALL)
    return match.group(1) if match else None


def edit_exact(source: SourceFile, reply: str) -> bool:
    """Whether the reply's code block is the correctly edited file (trailing space aside)."""
    block = code_block(reply)
    return block is not None and block.rstrip() == source.edited.rstrip()


# -- tool calls -----------------------------------------------------------------------------


@cache
def _validator(name: str) -> Any:
    import jsonschema_rs  # an independent validator, as the tool-calling tests use

    return jsonschema_rs.validator_for(SCHEMAS[name])


def call_valid(name: str, arguments: str) -> bool:
    """Whether a call names a known function and its arguments are a JSON object that matches
    the function's schema."""
    if name not in SCHEMAS:
        return False
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return False
    return isinstance(parsed, dict) and _validator(name).is_valid(parsed)


def called_path(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    path = parsed.get("path") if isinstance(parsed, dict) else None
    return path if isinstance(path, str) else None


# -- llama-server's templates ---------------------------------------------------------------

#: Gemma's turns with Hermes-style tool blocks. superfluid's built-in Gemma template writes
#: calls as Python lists (`[read_file(path='…')]`); llama-server renders that too, but its
#: template analysis builds no grammar for it (a forced call fails with "failed to parse
#: grammar"), so llama-server gets the `<tool_call>` JSON blocks it does parse.
GEMMA_HERMES = """\
{%- if tools -%}
<start_of_turn>user
You can call these tools. Each line is one tool's JSON signature:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call a tool, write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.<end_of_turn>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == "assistant" -%}
<start_of_turn>model
{% if message.content %}{{ message.content }}{% endif %}\
{% for call in message.tool_calls or [] %}<tool_call>{"name": "{{ call.function.name }}", \
"arguments": {{ call.function.arguments | tojson }}}</tool_call>{% endfor %}<end_of_turn>
{% elif message.role == "tool" -%}
<start_of_turn>user
<tool_response>{{ message.content }}</tool_response><end_of_turn>
{% else -%}
<start_of_turn>user
{{ message.content }}<end_of_turn>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<start_of_turn>model
{% endif -%}
"""

#: ChatML with Hermes-style tools, rendering what superfluid's built-in ChatML template
#: (`chatml_turns`) renders, which superfluid uses for tool requests on a ChatML model whose own
#: template shows no tools (SmolLM2's).
CHATML_HERMES = """\
{%- set ns = namespace(system='', rest=messages) -%}
{%- if messages and messages[0].role == 'system' -%}\
{%- set ns.system = messages[0].content or '' -%}{%- set ns.rest = messages[1:] -%}{%- endif -%}
{%- if tools -%}
{%- set lines = namespace(text='') -%}
{%- for tool in tools -%}\
{%- set lines.text = lines.text ~ ('\\n' if not loop.first else '') ~ (tool | tojson) -%}\
{%- endfor -%}
{%- set instructions = 'You may call functions to answer. Their signatures, one per line:\\n\
<tools>\\n' ~ lines.text ~ '\\n</tools>\\nTo call one, write a JSON object with its name and \
arguments in a block:\\n<tool_call>\\n{"name": "<name>", "arguments": {<arguments>}}\\n</tool_call>' -%}
{%- set ns.system = (ns.system ~ '\\n\\n' ~ instructions) if ns.system else instructions -%}
{%- endif -%}
{%- if ns.system -%}<|im_start|>system
{{ ns.system }}<|im_end|>
{% endif -%}
{%- for message in ns.rest -%}
{%- if message.role == 'tool' -%}<|im_start|>user
<tool_response>
{{ message.content or '' }}
</tool_response><|im_end|>
{% else -%}
{%- set body = namespace(text=message.content or '') -%}
{%- for call in message.tool_calls or [] -%}
{%- set body.text = body.text ~ '\\n<tool_call>\\n{"name": ' ~ (call.function.name | tojson) \
~ ', "arguments": ' ~ ((call.function.arguments or {}) | tojson) ~ '}\\n</tool_call>' -%}
{%- endfor -%}
<|im_start|>{{ message.role }}
{{ body.text }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}
"""

TEMPLATES = {"gemma-hermes": GEMMA_HERMES, "chatml-hermes": CHATML_HERMES}


def write_template(name: str, folder: Path) -> Path:
    """Template `name` written to `folder` (llama-server reads it from a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jinja"
    path.write_text(TEMPLATES[name])
    return path
