"""Test doubles: a deterministic, batch-invariant runtime (the FakeRepository of this project).

The fake model's next-token logits are a pure function of the last few tokens of the sequence,
so a row never depends on how many rows or lanes share a step: exactly the property under which
speculative output must equal plain output token for token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from superfluid.application.ports import Capabilities, Feed, Logits, RuntimeFault
from superfluid.domain.gates.policy import TickPlan
from superfluid.domain.tool_calls.families import ToolFamily

EOS = 0


class FakeModel:
    """Logits from a hash of the last `order` tokens; `peak` sharpens the favourite token."""

    def __init__(
        self, vocab: int = 48, order: int = 2, peak: float = 3.0, salt: int = 0, eos: bool = True
    ) -> None:
        self.vocab, self.order, self.peak, self.salt, self.eos = vocab, order, peak, salt, eos
        self._cache: dict[tuple[int, ...], Logits] = {}

    def logits(self, context: Sequence[int]) -> Logits:
        key = tuple(context[-self.order :])
        row = self._cache.get(key)
        if row is None:
            digest = hashlib.blake2b(repr((self.salt, key)).encode(), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            row = rng.normal(size=self.vocab).astype(np.float32)
            row[rng.integers(self.vocab)] += self.peak
            if not self.eos:
                row[EOS] = -1e9  # a model that never ends by itself
            self._cache[key] = row
        return row


class FakeRuntime:
    """A Runtime over FakeModel that checks every promise the executor makes to a runtime."""

    name = "fake"

    def __init__(
        self,
        model: FakeModel | None = None,
        *,
        context_size: int = 256,
        max_sequences: int = 8,
        max_verify_rows: int = 16,
        verify_batches: bool = True,
        cut_refusal: str | None = None,
        reuse_refusal: str | None = None,
        exactness_refusal: str | None = None,
    ) -> None:
        self.model = model or FakeModel()
        self.capabilities = Capabilities(
            runtime="fake",
            verify_rows=True,
            verify_batches=verify_batches,
            cut_refusal=cut_refusal,
            strategies=("prompt-lookup",) if cut_refusal is exactness_refusal is None else (),
            max_verify_rows=max_verify_rows,
            context_size=context_size,
            eos_tokens=frozenset({EOS}),
            max_sequences=max_sequences,
            reuse_refusal=reuse_refusal or exactness_refusal,
            exactness_refusal=exactness_refusal,
        )
        self.kv: dict[int, list[int]] = {}
        self.steps: list[list[Feed]] = []
        self.cuts = 0
        self.fail_next_step = False

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return [1 + (ord(ch) % (self.model.vocab - 1)) for ch in text]

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return "".join(chr(0x60 + t % 32) for t in tokens).encode()

    #: The call format the fake template teaches; None: it takes no tools.
    tool_family: ToolFamily | None = ToolFamily.HERMES
    chat_template_file: str | None = None
    #: The fake template's end-of-turn markers (none: replies end at EOS or max_tokens).
    turn_ends: tuple[str, ...] = ()
    chat_template_origin: str = "the model's chat template (fake)"

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        shown = f"<tools>{json.dumps(list(tools))}</tools>" if tools else ""
        return shown + "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def use_chat_template_file(self, path: str) -> None:
        self.chat_template_file = path

    def new_sequence(self, prefer: int | None = None) -> int:
        """The lowest free id, or `prefer` when it is free, as the real runtimes hand them out."""
        assert len(self.kv) < self.capabilities.max_sequences, "more sequences than lanes"
        free = [seq for seq in range(self.capabilities.max_sequences) if seq not in self.kv]
        seq = prefer if prefer in free else free[0]
        self.kv[seq] = []
        return seq

    def free_sequence(self, seq: int) -> None:
        del self.kv[seq]

    def cut(self, seq: int, length: int) -> None:
        assert self.capabilities.cut_refusal is None, "cut on a model that cannot cut"
        assert 0 <= length <= len(self.kv[seq])
        del self.kv[seq][length:]
        self.cuts += 1

    def step(self, feeds: Sequence[Feed]) -> list[Logits]:
        self.steps.append(list(feeds))
        if self.fail_next_step:
            self.fail_next_step = False
            raise RuntimeFault("injected fault")
        assert len({feed.seq for feed in feeds}) == len(feeds), "a sequence fed twice in a step"
        out = []
        for feed in feeds:
            cells = self.kv[feed.seq]
            assert feed.start == len(cells), f"fed at {feed.start}, KV holds {len(cells)}"
            assert feed.tokens, "an empty feed"
            assert len(cells) + len(feed.tokens) <= self.capabilities.context_size
            if feed.all_rows:
                assert len(feed.tokens) <= self.capabilities.max_verify_rows
            rows = []
            for token in feed.tokens:
                cells.append(token)
                rows.append(self.model.logits(cells))
            out.append(np.stack(rows if feed.all_rows else rows[-1:]))
        return out


class ClassPlan:
    """A policy that plans the same per-class depths every tick, filled or not: it stands for
    whatever the gates decide, which must never change what is committed."""

    def __init__(self, by_class, fill):
        self._plan = TickPlan(max(by_class), tuple(by_class), fill=fill)
        self.rounds = []  # (class, drafted, accepted) of every verified round

    def plan(self, lane_count):
        return self._plan

    def may_draft(self, request_id):
        return True

    def request_started(self, request_id):
        pass

    def request_finished(self, request_id):
        pass

    def record_round(self, request_id, lane_count, *, drafted, accepted, klass=0, asked=None):
        assert 0 <= accepted <= drafted <= max(1, asked or 0)
        self.rounds.append((klass, drafted, accepted))

    def record_spec_tick(self, lane_count, *, drafted, committed, seconds, rows):
        pass

    def record_plain_tick(self, lane_count, *, committed, seconds):
        pass
