"""`draft-model:<path>`: a smaller model with the target's tokenizer drafts.

Each lane gets its own KV cache in the draft model. `propose(k)` feeds whatever of the lane's
committed history the cache lacks, then k−1 of its own draft tokens one at a time, and returns
the k draft tokens; `commit(tokens)` keeps the cache positions whose token the lane really
committed (the accepted prefix of the draft) and cuts the rest off, so the next round only
feeds what is new. As in the executor, the cache never holds the last committed token: it is
fed first next round, and its row gives the first draft token.

On a greedy lane the draft is the draft model's argmax, verified by matching: the output is the
plain-decode output token for token. On a sampling lane (`propose_sampled`) each draft token is
drawn from the draft model's own distribution q under the request's sampling parameters, with
the counter RNG's draft stream, and the executor verifies by rejection sampling with that q
(docs/contract.md §6), as the heads do. Drafting the argmax at temperature > 0 accepts only where
the target happens to sample its own mode; drafting from q accepts with probability Σ min(p, q).

A draft model must share the target's tokenizer, token for token, and be able to cut its cache
back; anything else is refused when the drafter is built, in one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from superfluid.adapters.basert.bundle import Bundle, BundleError
from superfluid.adapters.basert.drafters.common import Proposal, ProposingLane
from superfluid.adapters.basert.layers import KVCache, Pass
from superfluid.adapters.basert.model import DenseModel
from superfluid.adapters.basert.model_config import ModelConfig, cut_refusal
from superfluid.adapters.basert.target import DraftTarget
from superfluid.adapters.basert.tokenizer import BundleTokenizer
from superfluid.application.ports import DraftState, EngineRefusal
from superfluid.domain.strategies import Strategy

_SAME_TOKENIZER = "a draft model must share the target's tokenizer"


class DraftModelDrafter:
    """The `draft-model` strategy over one loaded draft bundle (one cache per open lane)."""

    strategy = Strategy.DRAFT_MODEL

    def __init__(self, model: DenseModel, *, stops: frozenset[int], context_size: int) -> None:
        self.model = model
        self.stops = stops
        self.context_size = context_size

    @classmethod
    def load(cls, path: Path | str, *, target: DraftTarget) -> DraftModelDrafter:
        """Load the draft bundle for `target`; EngineRefusal (a SuperfluidError) says why not."""
        path = Path(path).expanduser()
        try:
            with Bundle.open(path) as bundle:
                shown = bundle.shown
                if cut_refusal(bundle.header) is not None:
                    raise EngineRefusal(
                        f"{shown} keeps recurrent state, which cannot be cut back after a "
                        "rejected draft; use a dense draft model"
                    )
                config = ModelConfig.from_header(bundle.header, shown)
                target_vocab = target.model.config.vocab_size
                if config.vocab_size != target_vocab:
                    raise EngineRefusal(
                        f"{shown} has a vocabulary of {config.vocab_size} tokens and the target "
                        f"{target_vocab}; {_SAME_TOKENIZER}"
                    )
                tokenizer = BundleTokenizer.from_header(bundle.header, shown)
                difference = _tokenizer_difference(tokenizer, target.tokenizer)
                if difference is not None:
                    raise EngineRefusal(
                        f"{shown}'s tokenizer is not the target's ({difference}); {_SAME_TOKENIZER}"
                    )
                size = target.capabilities.context_size
                model = DenseModel.from_bundle(bundle, max_positions=size, config=config)
        except BundleError as err:
            raise EngineRefusal(err.message) from None
        return cls(model, stops=target.capabilities.eos_tokens, context_size=size)

    def open(self, prompt: Sequence[int], *, seq: int) -> DraftState:
        del seq  # the draft model keeps its own cache per lane
        return _DraftLane(self, prompt)


class _DraftLane(ProposingLane):
    """One lane's draft cache: it holds `history[:cache.length]`, then `drafted`."""

    __slots__ = ("_cache", "_drafted", "_history", "_model", "_stops")

    def __init__(self, drafter: DraftModelDrafter, prompt: Sequence[int]) -> None:
        self._model = drafter.model
        self._stops = drafter.stops
        self._cache: KVCache = drafter.model.new_cache(drafter.context_size)
        self._history = list(prompt)
        # Draft tokens fed past the history during the last propose (all of it was fed then).
        self._drafted: list[int] = []

    def _propose(self, k: int, proposal: Proposal) -> Proposal:
        history, cache = self._history, self._cache
        if not history:
            return proposal
        # The cache holds a prefix of the history, then perhaps an unverified draft (a propose
        # with no commit since): keep the history part, and always re-feed the last token,
        # whose row gives the first draft token.
        cache.cut(min(cache.length, len(history) - 1))
        self._drafted = []
        # Proposing k tokens feeds the history's tail and k−1 draft tokens.
        k = min(k, cache.limit - len(history) + 1)
        if k <= 0:
            return proposal
        feed = history[cache.length :]
        while True:
            out = self._model.forward([Pass(cache, feed)])
            token = proposal.choose(out.logits[0][-1])
            # Past a stop token the lane ends, so drafting further would be wasted work.
            if len(proposal.tokens) == k or token in self._stops:
                break
            feed = [token]
        self._drafted = proposal.tokens[:-1]
        return proposal

    def commit(self, tokens: Sequence[int]) -> None:
        before = len(self._history)
        self._history.extend(tokens)
        if self._drafted:
            agreed = 0
            for drafted, committed in zip(self._drafted, tokens, strict=False):
                if drafted != committed:
                    break
                agreed += 1
            self._cache.cut(before + agreed)
            self._drafted = []
        # Never hold the last committed token: its row is the next round's first draft token.
        self._cache.cut(min(self._cache.length, len(self._history) - 1))


def _tokenizer_difference(draft: BundleTokenizer, target: BundleTokenizer) -> str | None:
    """Where two tokenizers first disagree, in words; None when they are the same."""
    ours, theirs = draft.vocabulary(), target.vocabulary()
    if ours == theirs:
        return None
    for token in sorted(set(ours) | set(theirs), key=lambda t: theirs.get(t, ours.get(t, 0))):
        mine, wanted = ours.get(token), theirs.get(token)
        if mine != wanted:
            where = "missing" if mine is None else f"id {mine}"
            there = "missing" if wanted is None else f"id {wanted}"
            return f"token {token!r} is {where} in the draft and {there} in the target"
    return None  # pragma: no cover - unequal dicts always differ somewhere
