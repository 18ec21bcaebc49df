"""train_on_inputs: false the way Axolotl does it: the loss covers every turn of `roles_to_train`
(assistant by default), not only the final reply, and the end-of-turn marker per `train_on_eos`.

Each conversation is rendered once with the tokenizer's chat template; each message's turn is found as
the text that rendering one more message adds (the named templates render a conversation's prefix as a
prefix of it: launchpad.train.chat_templates), the message's content inside that turn, and the marker
that closes it (`<|im_end|>`, `<|eot_id|>`, ...). Character spans become a token mask through the fast
tokenizer's offset mapping. The rows leave here tokenized, `input_ids` + `assistant_masks`, which TRL's
SFTTrainer turns into labels as they are (-100 where the mask is 0), with packing or without.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

EOS_MODES = ("turn", "last", "all", "none")


class NotAPrefix(Exception):
    """The template renders a conversation's start differently from the whole: turns cannot be found."""


@dataclass(frozen=True)
class TurnRule:
    """What a dataset trains: the roles whose turns are in the loss, and which end-of-turn markers."""

    roles: tuple[str, ...] = ("assistant",)
    eos: str = "turn"  # turn: each trained turn's; last: the last trained turn's; all: every turn's; none

    @classmethod
    def of(cls, spec: Any) -> TurnRule:
        roles = getattr(spec, "roles_to_train", None) or ("assistant",)
        return cls(tuple(roles), getattr(spec, "train_on_eos", None) or "turn")


def _render(tokenizer: Any, messages: Sequence[dict[str, str]]) -> str:
    if not messages:
        return ""
    return tokenizer.apply_chat_template(list(messages), tokenize=False)


def trained_spans(tokenizer: Any, conversation: Sequence[dict[str, str]], rule: TurnRule) -> tuple[str, list[tuple[int, int]]]:
    """(rendered text, character spans in the loss) of one conversation."""
    text = _render(tokenizer, conversation)
    spans: list[tuple[int, int]] = []
    ends: list[tuple[int, int, bool]] = []  # (start, end, trained turn) of each turn's end marker
    before = ""
    for i, message in enumerate(conversation):
        upto = _render(tokenizer, conversation[: i + 1])
        if not upto.startswith(before) or not text.startswith(upto):
            raise NotAPrefix(message["role"])
        start, turn = len(before), upto[len(before):]
        before = upto
        content = message["content"].strip()
        at = turn.find(content) if content else -1
        if at < 0:  # a template that rewrites the content (or an empty one): no content span to train
            continue
        trained = message["role"] in rule.roles
        c0, c1 = start + at, start + at + len(content)
        if trained:
            spans.append((c0, c1))
        tail = turn[at + len(content):]
        marker = tail.strip()
        if marker:
            m0 = c1 + tail.index(marker)
            ends.append((m0, m0 + len(marker), trained))
    if rule.eos == "turn":
        spans += [(a, b) for a, b, trained in ends if trained]
    elif rule.eos == "all":
        spans += [(a, b) for a, b, _ in ends]
    elif rule.eos == "last":
        last = [(a, b) for a, b, trained in ends if trained][-1:]
        spans += last
    return text, sorted(spans)


def _mask(offsets: Iterable[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    out, j = [], 0
    for s, e in offsets:
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        out.append(int(e > s and j < len(spans) and spans[j][0] < e))  # overlaps a span; (0, 0) tokens never
    return out


def tokenize_turns(tokenizer: Any, conversations: list[tuple[list[dict[str, str]], TurnRule]],
                   texts: list[str], *, batch: int = 512) -> dict[str, list[list[int]]]:
    """`input_ids` and `assistant_masks` for chat rows (masked per their rule) and completion rows
    (trained whole, EOS appended as TRL does for language modelling). Raises NotAPrefix when the chat
    template does not render a conversation's start as a prefix of it."""
    rendered = [trained_spans(tokenizer, c, rule) for c, rule in conversations]
    eos = tokenizer.eos_token or ""
    rendered += [(t if t.endswith(eos) else t + eos, [(0, len(t) + len(eos))]) for t in texts]
    ids: list[list[int]] = []
    masks: list[list[int]] = []
    for k in range(0, len(rendered), batch):
        chunk = rendered[k:k + batch]
        enc = tokenizer([t for t, _ in chunk], add_special_tokens=False, return_offsets_mapping=True)
        for (_, spans), row_ids, offsets in zip(chunk, enc["input_ids"], enc["offset_mapping"], strict=True):
            ids.append(list(row_ids))
            masks.append(_mask(offsets, spans))
    return {"input_ids": ids, "assistant_masks": masks}


def describe(rules: Iterable[TurnRule]) -> str:
    """The log line's account of what the loss covers."""
    parts = []
    for rule in dict.fromkeys(rules):
        eos = {"turn": "its end-of-turn marker", "last": "the last one's end-of-turn marker",
               "all": "every turn's end-of-turn marker", "none": "no end-of-turn marker"}[rule.eos]
        parts.append(f"every {'/'.join(rule.roles)} turn and {eos}")
    return "; ".join(parts)
