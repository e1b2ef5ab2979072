"""What lets an entry write skip reading every entry of its knowledge base.

A question's owner is found by its reservation (reservations.py), a tag's users by its links (the FaqRepo's
`link_tags`: one item per entry and tag). Every writer keeps both now, but entries written before they
existed hold their questions and tags only in their rows. So a knowledge base is `keyed` (a mark in the faq
table) once one pass has read every entry and reserved each question no entry holds yet, and linked each
tag: the first entry write on a knowledge base not keyed makes that pass (there is no separate backfill; an
empty knowledge base costs one read), later writes read reservations and links only. A pass that dies
midway keeps what it reserved and linked; the next write makes it again. A question two older entries
share stays reserved by the first (a new entry with it is still refused). The mark names the key rule
(reservations.KEY_RULE): a knowledge base keyed under an older rule is passed over again, which reserves
the new keys of the questions the rule changed (a "C++" entry held "c"; every other key is the same).

Tag links outlive a use (an import or a clone deleting entries, a merge changing tags: writers link before
they write and unlink only after), so `tag_in_use` reads the linked entries and drops the stale links.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from chalicelib.domain.faq_normalise import normalise
from chalicelib.faq.reservations import KEY_RULE, claim, unconfirmed

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry
    from chalicelib.ports import Dependencies

PAGE = 500
#: linked entries read per round of `tag_in_use`
TAG_USERS = 25
#: rounds of stale links dropped before `tag_in_use` gives up and calls the tag used (it stays listed)
TAG_ROUNDS = 4


def tag_links(entries: Iterable[FaqEntry]) -> list[tuple[str, str]]:
    return [(entry.id, tag) for entry in entries for tag in entry.tags]


def pages(deps: Dependencies, kb_id: str) -> Iterator[list[FaqEntry]]:
    """Every entry of the knowledge base, a page (PAGE entries at most) at a time, in id order."""
    after = ""
    while True:
        page, after = deps.faq.page_entries(kb_id, after, PAGE)
        yield page
        if not after:
            return


def ensure_keyed(deps: Dependencies, kb_id: str, own: set[str], entry_id: str) -> FaqEntry | None:
    """Makes the pass (module docstring) unless the knowledge base is keyed. Returns an entry other than
    `entry_id` with one of the normalised questions `own` that the pass read (None when keyed)."""
    if deps.faq.entries_keyed(kb_id, KEY_RULE):
        return None
    clash = None
    for page in pages(deps, kb_id):
        for other in page:
            if clash is None and other.id != entry_id and own & {normalise(q) for q in other.questions()}:
                clash = other
        key_entries(deps, kb_id, page)
    deps.faq.mark_entries_keyed(kb_id, KEY_RULE)
    return clash


def key_entries(deps: Dependencies, kb_id: str, entries: Sequence[FaqEntry]) -> None:
    """The entries' questions no entry holds reserved for them, their tags linked."""
    if not entries:
        return
    missing = unconfirmed(deps, kb_id, list(entries))  # one batched read
    for entry in entries:
        wanted = missing[entry.id]
        if wanted:  # (a question held by another entry that has it stays that entry's)
            _, clashes = claim(deps, kb_id, entry.id, wanted)
            deps.faq.confirm_questions(kb_id, entry.id, [k for k in wanted if k not in clashes])
    links = tag_links(entries)
    if links:
        deps.faq.link_tags(kb_id, links)


def tag_in_use(deps: Dependencies, kb_id: str, tag: str) -> bool:
    """Whether an entry of a keyed knowledge base has the tag: its linked entries read, stale links
    dropped. A tag with many stale links in a row counts as used (listed a while longer, never dropped
    wrongly)."""
    for _ in range(TAG_ROUNDS):
        users = deps.faq.tag_users(kb_id, tag, TAG_USERS)
        if not users:
            return False
        found = deps.faq.get_entries(kb_id, users)
        stale = [i for i in users if i not in found or tag not in found[i].tags]
        if len(stale) < len(users):
            return True
        deps.faq.unlink_tags(kb_id, [(i, tag) for i in stale])
    return True
