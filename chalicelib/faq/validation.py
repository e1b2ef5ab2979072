"""The import plan: what each row of an FAQ import does, decided once, before anything is written.

Pure (no ports): the worker computes the plan on its first delivery, stores it, and every later delivery
executes it from the saved offset, so a retry never validates again against a knowledge base the import
itself has already changed (spec §1.24: validated indices are kept, a resumed `replace` goes on as append).

Append, per row in file order:
1. basic checks (a standard question, at least one non-blank answer) and duplicate standard questions in
   the file; a standard question an entry already has makes the row a merge candidate; one that equals a
   similar question of another entry (or of an earlier row) fails the row;
2. similar questions that clash with another entry or an earlier row are removed one by one (`partial`);
3. negative questions equal to one of the row's own questions are removed (`partial`);
4. a merge candidate's merged result (similar and negative questions, answers and tags united: spec §1.24,
   not WeKnora's replace of the answers) is checked
   again; a conflict reverts that entry (the row fails, the entry stays as it was); a merged result equal to
   the entry (same content hash) is skipped.

Replace: rows whose content hash equals an existing entry keep that entry (`skip`, nothing embedded); the
other rows are checked against the kept entries and the earlier rows: a standard-question clash fails the
row, other clashes are removed; entries no row kept are deleted. A row that fails names the entry it was
sent for (the same normalised standard question), and nothing a user sent deletes the entry it names: that
entry stays as it is (`Plan.kept`), unless a valid row names it too (that row replaces it) or the file's
result takes its question (a standard question that is a kept question's: the row's `conflict`; a row over
the quota whose entry's similar question a row before it took). A file with no valid row at all deletes
nothing, and the import fails (replace_refusal).

Both: an entry (or a merged one) beyond the API's limits or too large to store fails its row (`invalid`);
with a storage quota, a row whose entry (a merge: its growth) does not fit in what the rows before it left
fails (`quota`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from chalicelib.domain.clock import to_iso
from chalicelib.domain.faq import FaqEntry, clean_tags, content_bytes
from chalicelib.domain.faq_normalise import URL, content_hash, normalise
from chalicelib.faq.commands import FaqEntryRequest
from chalicelib.faq.entry_size import StorageChange, storage_change, too_large

Mode = Literal["append", "replace"]
Action = Literal["add", "merge", "skip", "fail"]

#: failure categories in the failed-rows CSV
INVALID = "invalid"
DUPLICATE = "duplicate"
CONFLICT = "conflict"
QUOTA = "quota"

#: an import row's switches (ImportRow.given)
SWITCHES = ("answer_all", "disabled")


@dataclass
class ImportRow:
    """One entry as read from the request or the uploaded file; `row` counts from 1."""

    row: int
    question: str
    answers: list[str]
    similar: list[str] = field(default_factory=list)
    negatives: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    answer_all: bool = False
    disabled: bool = False
    #: which of the switches (`answer_all`, `disabled`) the row carries: an append merge keeps the entry's
    #: own for the others (rows of plans stored before this was kept carry both)
    given: list[str] = field(default_factory=lambda: list(SWITCHES))
    #: why the row cannot be imported as read (a JSON entry naming a key twice); "" in plans stored before
    refused: str = ""


@dataclass
class PlannedRow:
    row: int
    action: Action
    source: ImportRow
    entry_id: str = ""
    #: the entry's content after the import (add, merge, skip)
    content: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    reason: str = ""
    category: str = ""
    notes: list[str] = field(default_factory=list)
    #: a merge's (or skip's) entry as the plan read it: its `updated_at` ('' in plans stored before it was
    #: kept); the worker merges again into an entry written since (import_claims.changed_since_plan)
    base: str = ""
    #: a replace's new entry: the existing entry it takes the place of (the same standard question), which
    #: the worker deletes only once this row's entry is written ('' in plans stored before)
    replaces: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedRow:
        values = dict(data)
        values["source"] = ImportRow(**values["source"])
        return cls(**values)


@dataclass
class Plan:
    mode: Mode
    rows: list[PlannedRow]
    #: entries a replace deletes (with their vectors)
    delete: list[str] = field(default_factory=list)
    #: entries a replace keeps as they are because a row that failed names them ([] in plans stored before)
    kept: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "rows": [r.to_json() for r in self.rows],
            "delete": self.delete,
            "kept": self.kept,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        rows = [PlannedRow.from_json(r) for r in data["rows"]]
        return cls(data["mode"], rows, list(data["delete"]), list(data.get("kept", [])))


#: the error code of a replace whose file has no valid row (it deletes nothing and fails)
NO_VALID_ROW = "replace_without_valid_rows"


def _no_valid_row(rows: Sequence[PlannedRow]) -> bool:
    """None of the file's rows can be imported (a header alone, or every row failing)."""
    return all(row.action == "fail" for row in rows)


def replace_refusal(plan: Plan) -> str:
    """Why a replace is not carried out, or "": a file with no valid row (`_no_valid_row`) would otherwise
    empty the knowledge base."""
    if plan.mode != "replace" or not _no_valid_row(plan.rows):
        return ""
    return (
        f"the file has no valid row ({len(plan.rows)} read, all failed): a replace deletes nothing "
        "without one; fix the rows (see the failed rows) and import again"
    )


def counts(rows: Sequence[PlannedRow]) -> dict[str, int]:
    """success = added + merged + skipped (every row that did not fail); partial counts rows that lost a
    similar or negative question and still succeeded."""
    tally = {"added": 0, "merged": 0, "skipped": 0, "failed": 0, "partial": 0}
    for row in rows:
        tally[{"add": "added", "merge": "merged", "skip": "skipped", "fail": "failed"}[row.action]] += 1
        if row.partial and row.action != "fail":
            tally["partial"] += 1
    tally["success"] = tally["added"] + tally["merged"] + tally["skipped"]
    return tally


def _clean(values: Sequence[str]) -> list[str]:
    return [v.strip() for v in values if v and v.strip()]


def _content(
    question: str,
    similar: list[str],
    negatives: list[str],
    answers: list[str],
    tags: list[str],
    answer_all: bool,
    enabled: bool,
) -> dict[str, Any]:
    return {
        "standard_question": question,
        "similar_questions": similar,
        "negative_questions": negatives,
        "answers": answers,
        "tags": tags,
        "answer_all": answer_all,
        "is_enabled": enabled,
        "content_hash": content_hash(question, similar, negatives, answers),
    }


def _union(
    first: Sequence[str], second: Sequence[str], key_of: Callable[[str], str] = normalise
) -> list[str]:
    seen: set[str] = set()
    out = []
    for value in [*first, *second]:
        key = key_of(value)
        if key and key not in seen:
            seen.add(key)
            out.append(value)
    return out


def _answer_key(answer: str) -> str:
    """Answers are one when their normalised texts and their links are: normalising strips links (and an
    answer of symbols to nothing, which is then compared as written), so an answer that is a link, or
    differs by its link, would be lost."""
    return f"{normalise(answer) or answer.strip()}\x1f{' '.join(URL.findall(answer))}"


class _Questions:
    """Who owns each normalised question: an entry id (`e:<id>`) or an import row (`r:<n>`)."""

    def __init__(self) -> None:
        self.standard: dict[str, str] = {}
        self.similar: dict[str, str] = {}

    def add_entry(self, entry: FaqEntry) -> None:
        self.standard.setdefault(normalise(entry.standard_question), f"e:{entry.id}")
        for q in entry.similar_questions:
            self.similar.setdefault(normalise(q), f"e:{entry.id}")

    def owner(self, key: str) -> str | None:
        return self.standard.get(key) or self.similar.get(key)

    @staticmethod
    def describe(owner: str) -> str:
        kind, _, ident = owner.partition(":")
        return f"entry {ident}" if kind == "e" else f"row {ident}"


def _beyond_entry_limits(
    question: str,
    answers: Sequence[str],
    similar: Sequence[str],
    negatives: Sequence[str],
    tags: Sequence[str],
) -> str:
    """Why this content could not be written as an entry through the API (FaqEntryRequest's lengths and
    counts), or "": an imported entry must be one that can be read back and sent again unchanged."""
    try:
        FaqEntryRequest.model_validate(
            {
                "standard_question": question,
                "answers": list(answers),
                "similar_questions": list(similar),
                "negative_questions": list(negatives),
                "tags": list(tags),
            }
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}"
    return too_large(question, answers, similar, negatives, tags)


def _stored(content: dict[str, Any]) -> int:
    return content_bytes(
        content["standard_question"],
        content["similar_questions"],
        content["negative_questions"],
        content["answers"],
    )


def _over_quota(row: ImportRow, entry_id: str, need: int, room: int) -> PlannedRow:
    reason = f"the tenant's storage quota is used up: the entry needs {need} bytes, {max(room, 0)} are left"
    return PlannedRow(row.row, "fail", row, entry_id, reason=reason, category=QUOTA)


def _reverted(row: ImportRow, target: FaqEntry, why: str, category: str, notes: list[str]) -> PlannedRow:
    """A merge candidate whose merged entry cannot be: the entry stays as it was, the row fails."""
    return PlannedRow(
        row.row, "fail", row, target.id, reason=f"merge reverted: {why}", category=category, notes=notes
    )


def _basic(row: ImportRow, seen: dict[str, int]) -> tuple[str, list[str], PlannedRow | None]:
    question = (row.question or "").strip()
    key = normalise(question)
    answers = _clean(row.answers)
    if row.refused:
        return key, answers, PlannedRow(row.row, "fail", row, reason=row.refused, category=INVALID)
    if not key:
        return (
            key,
            answers,
            PlannedRow(row.row, "fail", row, reason="the question is empty", category=INVALID),
        )
    if not answers:
        return (
            key,
            answers,
            PlannedRow(
                row.row, "fail", row, reason="at least one non-blank answer is required", category=INVALID
            ),
        )
    beyond = _beyond_entry_limits(
        question, answers, _clean(row.similar), _clean(row.negatives), clean_tags(row.tags)
    )
    if beyond:
        return key, answers, PlannedRow(row.row, "fail", row, reason=beyond, category=INVALID)
    if key in seen:
        return (
            key,
            answers,
            PlannedRow(
                row.row,
                "fail",
                row,
                reason=f"duplicate standard question (row {seen[key]})",
                category=DUPLICATE,
            ),
        )
    seen[key] = row.row
    return key, answers, None


def _similar(
    row: ImportRow, own: set[str], questions: _Questions, allowed_owner: str | None, notes: list[str]
) -> list[str]:
    kept = []
    for value in _clean(row.similar):
        key = normalise(value)
        if not key or key in own:
            continue  # blank, or a repeat of the row's own question: nothing lost
        owner = questions.owner(key)
        if owner is not None and owner != allowed_owner:
            notes.append(
                f"similar question {value!r} removed: it is already a question of {questions.describe(owner)}"
            )
            continue
        kept.append(value)
        own.add(key)
    return kept


def _negatives(values: Sequence[str], own: set[str], notes: list[str]) -> list[str]:
    kept, seen = [], set()
    for value in _clean(values):
        key = normalise(value)
        if not key or key in seen:
            continue
        if key in own:
            notes.append(f"negative question {value!r} removed: it is one of the entry's own questions")
            continue
        seen.add(key)
        kept.append(value)
    return kept


def plan_append(
    rows: Sequence[ImportRow],
    existing: Sequence[FaqEntry],
    new_id: Callable[[int], str],
    room: int | None = None,
) -> Plan:
    """`room`: the bytes the tenant may still store (None: no quota); a row whose entry (or a merge's
    growth) does not fit in what the rows before it left fails (`quota`)."""
    by_id = {e.id: e for e in existing}
    questions = _Questions()
    for entry in existing:
        questions.add_entry(entry)
    seen: dict[str, int] = {}
    planned: list[PlannedRow] = []
    for row in rows:
        key, answers, failed = _basic(row, seen)
        if failed is not None:
            planned.append(failed)
            continue
        standard_owner = questions.standard.get(key)
        target = by_id.get(standard_owner[2:]) if standard_owner and standard_owner.startswith("e:") else None
        similar_owner = questions.similar.get(key)
        if similar_owner is not None and (target is None or similar_owner != f"e:{target.id}"):
            planned.append(
                PlannedRow(
                    row.row,
                    "fail",
                    row,
                    reason=f"the question is a similar question of {_Questions.describe(similar_owner)}",
                    category=CONFLICT,
                )
            )
            continue
        notes: list[str] = []
        own = {key} | ({normalise(q) for q in target.similar_questions} if target else set())
        similar = _similar(row, own, questions, f"e:{target.id}" if target else None, notes)
        question = row.question.strip()
        tags = clean_tags(row.tags)
        if target is None:
            negatives = _negatives(row.negatives, own, notes)
            content = _content(question, similar, negatives, answers, tags, row.answer_all, not row.disabled)
            need = _stored(content)
            if room is not None and need > room:
                planned.append(_over_quota(row, "", need, room))
                continue
            room = None if room is None else room - need
            planned.append(
                PlannedRow(row.row, "add", row, new_id(row.row), content, partial=bool(notes), notes=notes)
            )
        else:
            merged_similar = _union(target.similar_questions, similar)
            negatives = _negatives(row.negatives, own, notes)
            merged_negatives = _union(target.negative_questions, negatives)
            merged_own = {normalise(q) for q in [target.standard_question, *merged_similar]}
            clash = [n for n in merged_negatives if normalise(n) in merged_own]
            if clash:  # (4) the merged entry contradicts itself: keep the entry as it was
                why = f"negative question {clash[0]!r} of the merged entry is one of its questions"
                planned.append(_reverted(row, target, why, CONFLICT, notes))
                continue
            merged_answers = _union(target.answers, answers, _answer_key)
            merged_tags = clean_tags([*target.tags, *tags])
            beyond = _beyond_entry_limits(
                target.standard_question, merged_answers, merged_similar, merged_negatives, merged_tags
            )
            if beyond:  # the entry and the row are each within the limits, the two together are not
                why = f"the merged entry would exceed a limit ({beyond})"
                planned.append(_reverted(row, target, why, INVALID, notes))
                continue
            content = _content(
                target.standard_question,
                merged_similar,
                merged_negatives,
                merged_answers,
                merged_tags,
                row.answer_all if "answer_all" in row.given else target.answer_all,
                not row.disabled if "disabled" in row.given else target.is_enabled,
            )
            unchanged = (
                content["content_hash"] == target.content_hash
                and content["tags"] == target.tags
                and content["is_enabled"] == target.is_enabled
                and content["answer_all"] == target.answer_all
            )
            change = StorageChange(0, 0) if unchanged else storage_change(target, _stored(content))
            if room is not None and not change.fits(room):
                planned.append(_over_quota(row, target.id, change.grows_by, room))
                continue
            room = None if room is None else room - change.counts
            planned.append(
                PlannedRow(
                    row.row,
                    "skip" if unchanged else "merge",
                    row,
                    target.id,
                    content,
                    partial=bool(notes),
                    notes=notes,
                    base=to_iso(target.updated_at),
                )
            )
        owner = f"e:{target.id}" if target else f"r:{row.row}"
        questions.standard.setdefault(key, owner)
        for q in similar:
            questions.similar.setdefault(normalise(q), owner)
    return Plan("append", planned)


def plan_replace(
    rows: Sequence[ImportRow],
    existing: Sequence[FaqEntry],
    new_id: Callable[[int], str],
    room: int | None = None,
) -> Plan:
    """`room` as plan_append's; the entries the replace deletes give theirs back first, an entry kept
    keeps its place."""
    by_hash: dict[str, FaqEntry] = {}
    by_question: dict[str, FaqEntry] = {}
    for entry in existing:
        by_hash.setdefault(entry.content_hash, entry)
        by_question.setdefault(normalise(entry.standard_question), entry)
    seen: dict[str, int] = {}
    questions = _Questions()
    decided: dict[int, PlannedRow] = {}
    kept: set[str] = set()
    pending: list[tuple[ImportRow, str, list[str]]] = []
    # pass 1: basic checks, and rows that keep an unchanged entry (their questions are taken first)
    for row in rows:
        key, answers, failed = _basic(row, seen)
        if failed is not None:
            decided[row.row] = failed
            continue
        digest = content_hash(row.question, _clean(row.similar), _clean(row.negatives), answers)
        match = by_hash.get(digest)
        if match is not None and match.id not in kept:
            kept.add(match.id)
            questions.add_entry(match)
            # the same questions and answers: nothing to embed, but the row's tags and switches are the
            # file's word (an update in place, "merge"), as a clone takes the source's
            content = {
                **entry_content(match),
                "tags": clean_tags(row.tags),
                "answer_all": row.answer_all,
                "is_enabled": not row.disabled,
            }
            action: Action = "skip" if content == entry_content(match) else "merge"
            decided[row.row] = PlannedRow(
                row.row, action, row, match.id, content, base=to_iso(match.updated_at)
            )
            if room is not None and action == "merge":  # same texts: counts only if saved before counting
                room -= storage_change(match, _stored(content)).counts
        else:
            pending.append((row, key, answers))
    # an entry a row that failed the checks names, and no valid row does, stays as it is
    held: list[str] = []
    for failed in decided.values():
        named = by_question.get(normalise(failed.source.question or ""))
        if named is None or failed.action != "fail" or named.id in kept:
            continue
        if normalise(named.standard_question) not in seen:  # no valid row names it: it stays
            kept.add(named.id)
            held.append(named.id)
            questions.add_entry(named)
    # an entry a pending row names frees its bytes only once that row takes its place (below)
    replaced = {
        by_question[key].id: by_question[key]
        for _, key, _ in pending
        if key in by_question and by_question[key].id not in kept
    }
    if room is not None:
        room += sum(e.counted_bytes for e in existing if e.id not in kept and e.id not in replaced)
    # pass 2: the other rows, against the kept entries and the rows before them
    for row, key, answers in pending:
        named = replaced.get(by_question[key].id) if key in by_question else None
        owner = questions.owner(key)
        if owner is not None:
            # the question is another's in the file's own result: the entry it named goes
            if room is not None and named is not None:
                room += named.counted_bytes
            decided[row.row] = PlannedRow(
                row.row,
                "fail",
                row,
                reason=f"the standard question is already a question of {_Questions.describe(owner)}",
                category=CONFLICT,
            )
            continue
        notes: list[str] = []
        own = {key}
        similar = _similar(row, own, questions, None, notes)
        negatives = _negatives(row.negatives, own, notes)
        content = _content(
            row.question.strip(),
            similar,
            negatives,
            answers,
            clean_tags(row.tags),
            row.answer_all,
            not row.disabled,
        )
        need = _stored(content)
        freed = named.counted_bytes if named is not None else 0
        if room is not None and need > room + freed:
            decided[row.row] = _over_quota(row, "", need, room + freed)
            # the entry the row was sent for stays, unless a row before took one of its questions
            if named is not None and not any(questions.owner(normalise(q)) for q in named.similar_questions):
                kept.add(named.id)
                held.append(named.id)
                questions.add_entry(named)
            else:
                room += freed
            continue
        room = None if room is None else room + freed - need
        decided[row.row] = PlannedRow(
            row.row,
            "add",
            row,
            new_id(row.row),
            content,
            partial=bool(notes),
            notes=notes,
            replaces=named.id if named is not None else "",
        )
        questions.standard.setdefault(key, f"r:{row.row}")
        for q in similar:
            questions.similar.setdefault(normalise(q), f"r:{row.row}")
    planned = [decided[row.row] for row in rows]
    if _no_valid_row(planned):  # nothing deleted (replace_refusal)
        return Plan("replace", planned, [], held)
    return Plan("replace", planned, [e.id for e in existing if e.id not in kept], held)


def entry_content(entry: FaqEntry) -> dict[str, Any]:
    return {
        "standard_question": entry.standard_question,
        "similar_questions": entry.similar_questions,
        "negative_questions": entry.negative_questions,
        "answers": entry.answers,
        "tags": entry.tags,
        "answer_all": entry.answer_all,
        "is_enabled": entry.is_enabled,
        "content_hash": entry.content_hash,
    }
