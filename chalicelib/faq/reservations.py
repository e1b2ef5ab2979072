"""Question reservations: a normalised question of an FAQ knowledge base held by one entry (the FaqRepo's
`claim_questions`, `confirm_questions`, `release_questions`), taken by every writer of entries alike: the
entries API (entries.py), the bulk import (importing.py, import_claims.py) and the clone's copies
(clone.py). A writer claims the questions its entry adds (pending until its row is saved), writes, then
confirms them (held for good) or releases them; a delete releases what the entry held.

The holder is the entry's id, so a writer that is redone (a redelivered import batch, a clone copy made
again: their ids are derived from the task and the row or the source entry) claims its own reservations
again instead of being refused by them.

Key rules (KEY_RULE). Rule 1 normalised "What is C++?" as "what is c", rule 2 keeps a `+`/`#` ending a
word (faq_normalise). A key is the digest of the normalised question under the rule, unprefixed: the two
rules give every question whose text rule 2 did not change the same key (nothing to move), and a rule-1
text never ends with `+`/`#`, so a rule-2 key of a changed text ("c++") is never a rule-1 key. An entry
saved under rule 1 holds its changed questions under the rule-1 key only ("C++" as "c"), so:
- the keyed mark is per rule (keyed.py): the first write on a knowledge base after the change reads every
  entry once (finding a rule-1 "C++" entry by its text) and reserves each entry's rule-2 keys;
- a rule-1 key kept by an entry whose questions no longer normalise to it ("C" wanted, "C++" holds "c") is
  taken over like any reservation whose entry let the question go (`claim`);
- a delete or an update releases the rule-1 keys too (`held_keys`): what the entry may hold.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chalicelib.domain.faq_normalise import normalise
from chalicelib.ports.faq import QuestionHolder

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry
    from chalicelib.ports import Dependencies

#: how long a question claimed by a request stays reserved before its row is saved: longer than any Lambda
#: runs (15 min), so a claim expires only when its request died
CLAIM_SECONDS = 20 * 60
#: a request that holds its claims longer than this gives up before writing its row (a local run, say)
CLAIM_USABLE_SECONDS = CLAIM_SECONDS - 5 * 60
#: rounds of taking over reservations whose entry let the question go, before giving up
ROUNDS = 3
#: the rule keys are made with now (module docstring); the keyed mark names it
KEY_RULE = 2


def _digest(normalised: str) -> str:
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:32]


def question_key(question: str) -> str:
    """A question's reservation key: the digest of its normalised form (a sort key holds at most 1 KB)."""
    return _digest(normalise(question))


def question_keys(entry: FaqEntry) -> dict[str, str]:
    """The entry's reservation keys -> its normalised questions."""
    return {question_key(q): normalise(q) for q in entry.questions() if normalise(q)}


def held_keys(entry: FaqEntry) -> list[str]:
    """Every key the entry may hold: its keys, and the rule-1 keys of its questions rule 2 changed (held
    if it was saved before the change)."""
    keys = list(question_keys(entry))
    for q in entry.questions():
        old = normalise(q, keep_word_marks=False)
        if old and old != normalise(q):
            keys.append(_digest(old))
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class Clash:
    """A question another writer holds: `other` is the entry that has it (saved); None while its claim is
    pending (`holder.expires_at` set: that entry is being saved) or when the key kept changing hands
    (`holder.entry_id` empty)."""

    question: str
    holder: QuestionHolder
    other: FaqEntry | None


def claim(
    deps: Dependencies,
    kb_id: str,
    entry_id: str,
    wanted: Mapping[str, str],
    yielding: Collection[str] = (),
) -> tuple[float, dict[str, Clash]]:
    """Claims `wanted` (key -> normalised question) for `entry_id`, pending. A reservation held for an entry
    that no longer has the question (deleted, or rewritten without it), or for one of `yielding` (entries a
    replace import deletes once their replacements are written), is taken over, exactly as read (a holder
    that wrote it again meanwhile keeps it). Returns when it claimed and the questions it could not claim;
    the others stay claimed: the caller confirms or releases them."""
    claimed_at = time.time()
    takeover: dict[str, QuestionHolder] = {}
    clashes: dict[str, Clash] = {}
    todo = list(wanted)
    for _ in range(ROUNDS):
        if not todo:
            break
        refused = deps.faq.claim_questions(kb_id, entry_id, todo, claimed_at, CLAIM_SECONDS, takeover)
        todo = []
        for key, holder in refused.items():
            if holder.entry_id and holder.entry_id in yielding:
                takeover[key] = holder
                todo.append(key)
                continue
            other = deps.faq.get_entry(kb_id, holder.entry_id) if holder.entry_id else None
            if other is not None and wanted[key] in {normalise(q) for q in other.questions()}:
                clashes[key] = Clash(wanted[key], holder, other)
            elif holder.expires_at is not None:  # another writer is saving an entry with it now
                clashes[key] = Clash(wanted[key], holder, None)
            else:  # held for an entry that no longer has it
                takeover[key] = holder
                todo.append(key)
    for key in todo:
        clashes[key] = Clash(wanted[key], QuestionHolder("", "", None), None)
    return claimed_at, clashes


def unconfirmed(deps: Dependencies, kb_id: str, entries: list[FaqEntry]) -> dict[str, dict[str, str]]:
    """Per entry id, its questions (key -> normalised) not yet held for good by it: what a writer that may
    be redone still has to claim (one batched read for all the entries)."""
    wanted = {entry.id: question_keys(entry) for entry in entries}
    keys = list(dict.fromkeys(k for questions in wanted.values() for k in questions))
    held = deps.faq.question_holders(kb_id, keys) if keys else {}
    return {
        entry_id: {
            k: q
            for k, q in questions.items()
            if not (k in held and held[k].entry_id == entry_id and held[k].expires_at is None)
        }
        for entry_id, questions in wanted.items()
    }


def release_entries(deps: Dependencies, kb_id: str, entries: list[FaqEntry]) -> None:
    """The reservations the entries (deleted) held."""
    for entry in entries:
        deps.faq.release_questions(kb_id, entry.id, held_keys(entry))
