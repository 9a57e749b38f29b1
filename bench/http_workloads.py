"""The prompts of the HTTP benchmark: what a client sends, per workload.

Four workloads. Three are small sets of prompt variants: a run at N clients hands client i of run
r the variant (i + r) mod len(variants), so concurrent clients send different prompts (greedy
lanes on one prompt would decode the same tokens) and successive runs rotate through the set.
The fourth sends fresh prompts: no prompt twice in one server's life (see below).

- copy-heavy (chat completions): the reply copies its context — a code block to repeat, a file
  to return with one rename, paragraphs to quote. Each source is long enough that 128 reply
  tokens are all copying. Three variants, so three runs at one client cover each once.
- open-ended (text completions): openings of stories, letters and essays with nothing repeated,
  continued freely. These go to `/v1/completions`, not chat: the demo model is a small base model
  that answers every chat prompt by echoing the prompt back (measured: ~90% of prompt-lookup
  drafts accepted on "Why is the sky blue?"), so an open-ended chat workload would be a copy
  workload in disguise. Free continuation is the open-ended text this model writes.
- multi-turn (chat completions): sessions of four turns. The first asks to copy or edit a
  passage (copy-heavy); each later turn sends the whole conversation so far — the last prompt,
  the reply to it, and one new user line — and the new lines mix copying with free writing.
  Each session's first line carries a tag unique to the session (`Session <run>.<client>:`), so
  a server's prompt cache can reuse a session's own earlier turns but never an earlier session.
  The figures are the session's time and the TTFT of turns 2–4, where a prefix cache pays.
- long-prompt (chat completions, fresh): a task, then a document of 380–700 words (with the
  chat turn 660–1,730 tokens on the demo model, median 1,140; 94% within 700–1,500) the reply
  must quote from: a summary with its key sentences, a paragraph
  copied and explained, the rules it states. The documents are the Python reference manual's
  topics as every CPython ships them (`pydoc_data.topics`, text nobody here wrote), cut at
  paragraph breaks. Every (round, client) gets its own prompt, allocated in the order first
  asked, so each server measured in a round gets the same prompts and no server sees a prompt
  twice: a server's prompt cache or cross-request n-gram pool cannot be handed an answer. The
  task comes first, so two prompts on one document share no prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

GEMMA_TURN = "<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"

#: A user message -> the prompt text a server renders for it (a model's chat template).
ChatTurn = Callable[[str], str]


def gemma_turn(text: str) -> str:
    return GEMMA_TURN.format(content=text)


INTERVALS = '''def merge_intervals(intervals):
    """Merge overlapping closed intervals and return them sorted by start."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


def total_covered(intervals):
    """The length of the union of the intervals."""
    return sum(end - start for start, end in merge_intervals(intervals))


def gaps(intervals, lo, hi):
    """The parts of [lo, hi] that no interval covers."""
    result = []
    cursor = lo
    for start, end in merge_intervals(intervals):
        if start > cursor:
            result.append((cursor, min(start, hi)))
        cursor = max(cursor, end)
        if cursor >= hi:
            break
    if cursor < hi:
        result.append((cursor, hi))
    return result
'''

INVENTORY = '''class Inventory:
    """Items in a warehouse, counted by name."""

    def __init__(self):
        self.counts = {}
        self.history = []

    def add(self, name, quantity):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self.counts[name] = self.counts.get(name, 0) + quantity
        self.history.append(("add", name, quantity))

    def remove(self, name, quantity):
        held = self.counts.get(name, 0)
        if quantity > held:
            raise ValueError(f"only {held} of {name} in stock")
        self.counts[name] = held - quantity
        self.history.append(("remove", name, quantity))

    def total(self):
        return sum(self.counts.values())

    def report(self):
        lines = [f"{name}: {count}" for name, count in sorted(self.counts.items())]
        return "\\n".join(lines)
'''

HARBOUR = """The harbour at Port Ellen wakes before the town does. Long before the first bus rattles down the hill, the fishing boats are already nosing out past the breakwater, their lamps swinging, their engines coughing in the cold. The gulls follow them out and come back an hour later, complaining, to wait on the roofs of the sheds.

By seven the market hall is open. Crates of mackerel and crab are stacked on trestle tables, and the auctioneer, a small man in a yellow coat, calls the lots so quickly that visitors cannot follow him. The buyers can: they nod, or lift a pencil, and the crate is gone to a restaurant in the city or a lorry bound for the coast road.

In the afternoon the harbour goes quiet again. The boats are tied up, the nets are spread to dry on the wall, and the children of the town sit on the slipway with lines and buckets, catching nothing and not minding. When the tide turns, the water slaps against the stones, and the whole place seems to hold its breath until morning."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One prompt: `text` is the user message (chat) or the prompt itself (completion)."""

    name: str
    text: str
    follow_ups: tuple[str, ...] = ()  # multi-turn: the user lines of turns 2, 3, …


#: What a long-prompt request asks of its document; each reply quotes the document.
LONG_PROMPT_TASKS = (
    "Summarize the document below in one paragraph, then quote its two most important "
    "sentences word for word.",
    "Copy the first paragraph of the document below exactly, then explain it in two sentences.",
    "List every rule the document below states, each copied word for word from the document.",
    "Quote the last paragraph of the document below word for word, then say in one sentence "
    "what the whole document is about.",
)
LONG_PROMPT_WORDS = (380, 700)


@cache
def reference_documents() -> tuple[str, ...]:
    """The Python reference manual's topics, cut at paragraph breaks into documents of 380 to
    700 words (shorter topics are dropped, longer ones split): 86 documents on CPython 3.11."""
    from pydoc_data.topics import topics  # shipped with CPython; text nobody here wrote

    low, high = LONG_PROMPT_WORDS
    documents = []
    for name in sorted(topics):
        piece: list[str] = []
        words = 0
        for paragraph in topics[name].split("\n\n"):
            count = len(paragraph.split())
            if piece and words + count > high:
                if low <= words <= high:
                    documents.append("\n\n".join(piece).strip())
                piece, words = [], 0
            piece.append(paragraph)
            words += count
        if low <= words <= high:
            documents.append("\n\n".join(piece).strip())
    return tuple(documents)


def long_prompt(n: int) -> Variant:
    """Long prompt n: task n // D on document n % D (D documents), so the first D prompts are D
    different documents and later ones put another task in front of them."""
    documents = reference_documents()
    task = LONG_PROMPT_TASKS[(n // len(documents)) % len(LONG_PROMPT_TASKS)]
    text = f"{task}\n\nDocument:\n\n{documents[n % len(documents)]}"
    return Variant(f"document {n % len(documents)}", text)


#: Standard-library modules whose functions the copy-heavy prompts edit: pure Python, shipped
#: with every CPython, code nobody here wrote. Their order fixes which prompt is which.
SOURCE_MODULES = (
    "textwrap", "difflib", "argparse", "csv", "shutil", "tarfile", "zipfile", "calendar",
    "fractions", "statistics", "heapq", "configparser", "string", "html/parser", "email/utils",
    "urllib/parse", "ipaddress", "pathlib", "tempfile", "glob", "fnmatch", "pprint",
    "dataclasses", "functools", "inspect", "tokenize", "gettext", "locale", "mailbox",
    "plistlib", "sched", "queue", "selectors", "socketserver", "uuid", "wave", "shlex", "netrc",
    "mimetypes", "base64", "quopri", "getopt", "optparse", "trace", "doctest", "unittest/case",
    "logging/__init__", "logging/handlers", "http/cookiejar", "http/cookies",
    "xml/dom/minidom", "imaplib", "smtplib", "ftplib", "pickletools", "codecs", "ast", "enum",
)  # fmt: skip
#: Functions of this many lines: 128 reply tokens are all copying, and the prompt stays short.
SOURCE_LINES = (12, 40)


@dataclass(frozen=True, slots=True)
class SourceFunction:
    """A function cut from the standard library, and the parameter an edit may rename."""

    where: str  # module:name
    name: str
    code: str
    parameter: str | None  # a parameter the body uses, other than self/cls


@cache
def source_functions() -> tuple[SourceFunction, ...]:
    """Functions and methods of `SOURCE_MODULES` of 12–40 lines, the modules taken in turn
    (1,000 on CPython 3.11)."""
    import ast
    import sysconfig
    import textwrap

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for module in SOURCE_MODULES:
        path = stdlib / f"{module}.py"
        if not path.is_file():
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef) or node.end_lineno is None:
                continue
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if not SOURCE_LINES[0] <= node.end_lineno - start + 1 <= SOURCE_LINES[1]:
                continue
            code = textwrap.dedent("\n".join(lines[start - 1 : node.end_lineno]))
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            parameters = [
                a.arg
                for a in node.args.args
                if a.arg not in ("self", "cls") and len(a.arg) > 2 and a.arg in used
            ]
            found.append(
                SourceFunction(
                    f"{module}:{node.name}", node.name, code, parameters[0] if parameters else None
                )
            )
    # Round-robin over the modules, so that neighbouring prompts (a round's clients) come
    # from different files.
    by_module: dict[str, list[SourceFunction]] = {}
    for function in sorted(set(found), key=lambda f: f.where + f.code):
        by_module.setdefault(function.where.split(":")[0], []).append(function)
    queues = [by_module[m] for m in SOURCE_MODULES if m in by_module]
    depth = max(len(queue) for queue in queues)
    return tuple(queue[i] for i in range(depth) for queue in queues if i < len(queue))


def _edit(function: SourceFunction, n: int) -> str:
    """The edit prompt n asks for: a rename the reply must make while copying the rest."""
    if function.parameter is not None and n % 2:
        return (
            f"Rename the parameter `{function.parameter}` to `{function.parameter}_value` "
            "everywhere in the function above and print the whole updated function in a python "
            "code block. Change nothing else."
        )
    return (
        f"Rename the function `{function.name}` to `{function.name}_v2` and print the whole "
        "updated function in a python code block. Change nothing else."
    )


def copy_heavy_prompt(n: int) -> Variant:
    """Copy-heavy prompt n: a standard-library function and an edit to make while copying it."""
    functions = source_functions()
    function = functions[n % len(functions)]
    text = f"Here is a Python function:\n\n```python\n{function.code}\n```\n\n{_edit(function, n)}"
    return Variant(function.where, text)


def code_session(n: int) -> Variant:
    """Multi-turn session n: the copy-heavy prompt n, then a second edit, a question, a copy."""
    first = copy_heavy_prompt(n)
    function = source_functions()[n % len(source_functions())]
    return Variant(
        first.name,
        first.text,
        (
            "Now also add a one-line comment above the `def` line saying what the function "
            "does, and print the whole function again.",
            "Explain in a few sentences when this function would raise an exception.",
            f"Print the function once more, exactly as you last printed it, but named "
            f"`{function.name}_final`.",
        ),
    )


#: Open-ended openings are built from these parts, one of each, in an order no two prompts
#: share: 14 × 12 × 12 = 2,016 openings, continued freely by the model.
OPENING_PEOPLE = (
    "The old lighthouse keeper", "A young engineer named Clara", "The village baker",
    "My grandmother", "The ship's cook", "A retired schoolteacher", "The night-shift nurse",
    "A travelling musician", "The mayor's youngest son", "An astronomer from Lyon",
    "The woman who ran the ferry", "A boy with a broken bicycle", "The last tailor on Elm Street",
    "A botanist on her first expedition",
)  # fmt: skip
OPENING_PLACES = (
    "in a town at the edge of the moor", "on the morning the river froze",
    "during the long dry summer of 1921", "in a city that never finished its cathedral",
    "on an island with one road", "the winter the mines closed", "at the top of a mountain pass",
    "in the week before the harvest fair", "on a train crossing the steppe",
    "in a house full of clocks", "the year the circus stayed", "beside a canal that led nowhere",
)  # fmt: skip
OPENING_TURNS = (
    "had kept a secret for eleven years, and", "found a letter that was not meant for anyone, and",
    "decided one evening to leave without a word, because", "was the only one who noticed that",
    "had never once been late, until", "kept a notebook of everything strangers said, and",
    "heard the bells ring at the wrong hour, and", "made a promise that would be hard to keep:",
    "was asked a question nobody had dared to ask:", "planted a garden where nothing grew, and",
    "opened the door to a visitor who", "began to write down the history of",
)  # fmt: skip


def open_ended_prompt(n: int) -> Variant:
    """Opening n: person n mod 14, place and turn walked so that no two of the first 2,016
    openings share all three parts."""
    people, places, turns = OPENING_PEOPLE, OPENING_PLACES, OPENING_TURNS
    person = people[n % len(people)]
    place = places[(n // len(people)) % len(places)]
    turn = turns[(n // (len(people) * len(places)) + n) % len(turns)]
    return Variant(f"opening {n}", f"{person}, {place}, {turn}")


@dataclass(slots=True)
class FreshPrompts:
    """Prompts handed out once each: the n-th (round, client) asked for gets `make(n)`."""

    make: Callable[[int], Variant] = long_prompt
    given: dict[tuple[int, int], Variant] = field(default_factory=dict)

    def variant(self, run: int, client: int) -> Variant:
        key = (run, client)
        if key not in self.given:
            self.given[key] = self.make(len(self.given))
        return self.given[key]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    chat: bool  # chat completions; False: text completions
    variants: tuple[Variant, ...]
    #: Fresh prompts instead of `variants`: none is sent twice for one (run, client).
    fresh: FreshPrompts | None = None

    @property
    def repeats_prompts(self) -> bool:
        """Whether the same prompts go out run after run (a named repeated single-turn cell):
        only a bench does that, so a server's prompt cache would be handed what no user hands
        it. A session's first line carries its (round, client) tag, so sessions never repeat."""
        return self.fresh is None and not self.multi_turn

    @property
    def multi_turn(self) -> bool:
        if self.fresh is not None:
            return bool(self.fresh.make(0).follow_ups)
        return any(v.follow_ups for v in self.variants)

    def first_line(self, variant: Variant, run: int, client: int) -> str:
        """The first user line a client sends: a multi-turn session's carries its tag."""
        if not self.multi_turn:
            return variant.text
        return f"Session {run}.{client}: {variant.text}"

    def variant(self, client: int, run: int) -> Variant:
        if self.fresh is not None:
            return self.fresh.variant(run, client)
        return self.variants[(client + run) % len(self.variants)]

    def raw_prompt(self, variant: Variant, chat_turn: ChatTurn | None = None) -> str:
        """The text a server feeds the model: for chat workloads the user turn as `chat_turn`
        renders it (the model's own template; Gemma's turn, the demo model's, by default). The
        raw loop tokenizes this with the BOS token, as both servers do."""
        if not self.chat:
            return variant.text
        return (chat_turn or gemma_turn)(variant.text)


COPY_HEAVY_REPEATED = Workload(
    "copy-heavy repeated",
    chat=True,
    variants=(
        Variant(
            "repeat code",
            "Here is a Python module:\n\n```python\n"
            + INTERVALS
            + "```\n\nRepeat the module above exactly, character for character, in a python code block.",
        ),
        Variant(
            "edit file",
            "Here is the file inventory.py:\n\n```python\n"
            + INVENTORY
            + "```\n\nRename the method `report` to `summary` and print the whole updated file. Change nothing else.",
        ),
        Variant(
            "quote",
            "Read this passage:\n\n"
            + HARBOUR
            + "\n\nQuote the second and third paragraphs word for word.",
        ),
    ),
)

OPEN_ENDED_REPEATED = Workload(
    "open-ended repeated",
    chat=False,
    variants=(
        Variant(
            "lighthouse",
            "The old lighthouse keeper had not spoken to anyone in eleven years, and",
        ),
        Variant(
            "engineer",
            "In the spring of 1887, a young engineer named Clara arrived in the city with nothing but a suitcase full of drawings.",
        ),
        Variant(
            "letter",
            "Dear Margaret,\n\nI hope this letter finds you well. Since you left the valley, so much has happened here that I hardly know where to begin.",
        ),
        Variant(
            "bicycle",
            "The history of the bicycle begins in the early nineteenth century, when",
        ),
        Variant(
            "glacier",
            "When the expedition reached the edge of the glacier, the guide stopped and pointed at",
        ),
        Variant(
            "council",
            "The city council met on Tuesday evening to discuss",
        ),
        Variant(
            "train",
            "It was the last train of the night, and the only other passenger was",
        ),
        Variant(
            "sleep",
            "A good night's sleep matters more than most people think, because",
        ),
    ),
)

MULTI_TURN_REPEATED = Workload(
    "multi-turn repeated",
    chat=True,
    variants=(
        Variant(
            "code session",
            COPY_HEAVY_REPEATED.variants[0].text,
            (
                "Now rename `gaps` to `uncovered` and print the whole module again.",
                "Explain in a few sentences what `merge_intervals` does with touching intervals.",
                "Print the module once more, exactly as you last printed it.",
            ),
        ),
        Variant(
            "file session",
            COPY_HEAVY_REPEATED.variants[1].text,
            (
                "Also rename `total` to `count_all` and print the whole file again.",
                "Write a short paragraph on how you would test the `remove` method.",
                "Print the updated file one last time, with both renames.",
            ),
        ),
        Variant(
            "quote session",
            COPY_HEAVY_REPEATED.variants[2].text,
            (
                "Now quote the first paragraph word for word.",
                "Write a new paragraph in the same style about the harbour in winter.",
                "Quote the last paragraph of the passage word for word.",
            ),
        ),
    ),
)

COPY_HEAVY = Workload("copy-heavy", chat=True, variants=(), fresh=FreshPrompts(copy_heavy_prompt))
OPEN_ENDED = Workload("open-ended", chat=False, variants=(), fresh=FreshPrompts(open_ended_prompt))
MULTI_TURN = Workload("multi-turn", chat=True, variants=(), fresh=FreshPrompts(code_session))
LONG_PROMPT = Workload("long-prompt", chat=True, variants=(), fresh=FreshPrompts())

#: The measured workloads send fresh prompts; `copy-heavy repeated` is the named cell that sends
#: three prompts over and over (what a cross-request n-gram pool is handed); the other repeated
#: sets stay for comparison with earlier reports.
WORKLOADS = {
    w.name: w
    for w in (
        COPY_HEAVY,
        OPEN_ENDED,
        MULTI_TURN,
        LONG_PROMPT,
        COPY_HEAVY_REPEATED,
        OPEN_ENDED_REPEATED,
        MULTI_TURN_REPEATED,
    )
}
#: What a run measures unless `--workloads` says otherwise.
DEFAULT_WORKLOADS = ("copy-heavy", "long-prompt", "open-ended", "multi-turn", "copy-heavy repeated")
