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

from dataclasses import dataclass, field
from functools import cache

GEMMA_TURN = "<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"

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


@dataclass(slots=True)
class FreshPrompts:
    """Prompts handed out once each: the n-th (round, client) asked for gets prompt n.

    Prompt n is task n // D on document n % D (D documents), so the first D prompts are D
    different documents and later ones put another task in front of them."""

    given: dict[tuple[int, int], Variant] = field(default_factory=dict)

    def variant(self, run: int, client: int) -> Variant:
        key = (run, client)
        if key not in self.given:
            documents = reference_documents()
            n = len(self.given)
            task = LONG_PROMPT_TASKS[(n // len(documents)) % len(LONG_PROMPT_TASKS)]
            text = f"{task}\n\nDocument:\n\n{documents[n % len(documents)]}"
            self.given[key] = Variant(f"document {n % len(documents)}", text)
        return self.given[key]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    chat: bool  # chat completions; False: text completions
    variants: tuple[Variant, ...]
    #: Fresh prompts instead of `variants`: none is sent twice for one (run, client).
    fresh: FreshPrompts | None = None

    @property
    def multi_turn(self) -> bool:
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

    def raw_prompt(self, variant: Variant) -> str:
        """The text a server feeds the model (Gemma's chat turn for chat workloads); the raw
        loop tokenizes this with the BOS token, as both servers do."""
        return GEMMA_TURN.format(content=variant.text) if self.chat else variant.text


COPY_HEAVY = Workload(
    "copy-heavy",
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

OPEN_ENDED = Workload(
    "open-ended",
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

MULTI_TURN = Workload(
    "multi-turn",
    chat=True,
    variants=(
        Variant(
            "code session",
            COPY_HEAVY.variants[0].text,
            (
                "Now rename `gaps` to `uncovered` and print the whole module again.",
                "Explain in a few sentences what `merge_intervals` does with touching intervals.",
                "Print the module once more, exactly as you last printed it.",
            ),
        ),
        Variant(
            "file session",
            COPY_HEAVY.variants[1].text,
            (
                "Also rename `total` to `count_all` and print the whole file again.",
                "Write a short paragraph on how you would test the `remove` method.",
                "Print the updated file one last time, with both renames.",
            ),
        ),
        Variant(
            "quote session",
            COPY_HEAVY.variants[2].text,
            (
                "Now quote the first paragraph word for word.",
                "Write a new paragraph in the same style about the harbour in winter.",
                "Quote the last paragraph of the passage word for word.",
            ),
        ),
    ),
)

LONG_PROMPT = Workload("long-prompt", chat=True, variants=(), fresh=FreshPrompts())

WORKLOADS = {w.name: w for w in (COPY_HEAVY, OPEN_ENDED, MULTI_TURN, LONG_PROMPT)}
