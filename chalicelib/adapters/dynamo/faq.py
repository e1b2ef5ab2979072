"""FaqRepo on DynamoDB (PynamoDB): one table `{prefix}-faq`, partition = knowledge base, sort key =
`e#<entry id>` (entries), `q#<question key>` (a normalised question reserved by one entry), `lease` (the
import lease), `tag#<name>`, `tu#<tag digest>#<entry id>` (an entry uses a tag), `keyed` / `keyed#<rule>`
(every entry holds its reservations under key rule 1 / that rule, and its tag links), `last-import`.

An entry item keeps its `updated_at` beside its body, so an update can write the row only if it is still
the one it read (and a create only if no row has its id). A question reservation is one conditional put:
claimed while free, pending and expired, or already the claimant's (see `claim_questions`).

The lease is one conditional put: it is taken only when no lease exists, it has expired, or the writer
already holds it; it is deleted only under the condition that the deleter holds it. Timeline it protects:

    import A: put(lease=A, exp) ok ──── batches ──── delete(if owner=A) ok
    import B:        put(lease=B) ✗ (A holds it, not expired) → 409 with A's task id
    A's worker dies: ...                      exp passes → put(lease=C) ok; A's late delete(if owner=A) ✗
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, PutError
from pynamodb.models import Model

from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import provider_code
from chalicelib.ports import FaqLease
from chalicelib.ports.faq import EntryWriteFailed, EntryWriteRefused, QuestionHolder
from chalicelib.settings import Settings

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry

CONDITION_FAILED = "ConditionalCheckFailedException"
ENTRY = "e#"
#: above every character of an entry id (uuids: hex digits and '-'), below nothing we store under `e#`
ENTRY_END = "e#~"
QUESTION = "q#"
LEASE = "lease"
TAG = "tag#"
LAST_IMPORT = "last-import"
TAG_USE = "tu#"
KEYED = "keyed"


def _keyed_key(rule: int) -> str:
    """Rule 1's mark keeps the name it had before rules were numbered."""
    return KEYED if rule == 1 else f"{KEYED}#{rule}"


def _tag_use_prefix(name: str) -> str:
    """A tag's links' sort key prefix: a digest, so one tag's prefix never starts another's."""
    return f"{TAG_USE}{hashlib.sha256(name.encode('utf-8')).hexdigest()[:32]}#"


def build_faq_model(settings: Settings) -> type[Any]:
    class FaqItem(Model):
        class Meta:
            table_name = settings.table("faq")
            region = settings.region

        kb_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)
        body = JSONAttribute(null=True)
        owner = UnicodeAttribute(null=True)
        expires_at = NumberAttribute(null=True)
        #: an entry's updated_at (the conditional update compares it)
        updated_at = UnicodeAttribute(null=True)
        #: a question reservation's write token (a takeover names the one it found)
        token = UnicodeAttribute(null=True)

    return FaqItem


def _failed_condition(error: Exception) -> bool:
    return getattr(error, "cause_response_code", None) == CONDITION_FAILED


def _as_holder(item: Any) -> QuestionHolder:
    expires = item.expires_at
    return QuestionHolder(
        str(item.owner), str(item.token or ""), float(expires) if expires is not None else None
    )


class DynamoFaqRepo:
    def __init__(self, model: type[Any]):
        self.model = model

    # -- entries
    def _entry_item(self, entry: FaqEntry) -> Any:
        return self.model(
            entry.kb_id, f"{ENTRY}{entry.id}", body=entry.to_body(), updated_at=to_iso(entry.updated_at)
        )

    def put_entries(self, entries: Sequence[FaqEntry]) -> None:
        with self.model.batch_write() as batch:
            for entry in entries:
                batch.save(self._entry_item(entry))

    def put_entry(self, entry: FaqEntry, expected: FaqEntry | None) -> None:
        m = self.model
        if expected is None:
            condition = m.key.does_not_exist()
        else:  # a row written before `updated_at` was kept beside the body has none: any write adds it
            condition = m.key.exists() & (
                (m.updated_at == to_iso(expected.updated_at)) | m.updated_at.does_not_exist()
            )
        try:
            self._entry_item(entry).save(condition=condition)
        except PutError as error:
            if not _failed_condition(error):  # throttled, not answering, the item refused: a port error
                # the store's words stay out (its message may quote the item): the code tells the kind
                raise EntryWriteFailed(
                    f"FAQ entry {entry.id} was not written "
                    f"({provider_code(error.cause_response_code) or type(error).__name__})"
                ) from None
            gone = expected is not None and self.get_entry(entry.kb_id, entry.id) is None
            raise EntryWriteRefused(entry.id, gone=gone) from error

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None:
        from chalicelib.domain.faq import FaqEntry

        try:
            item = self.model.get(kb_id, f"{ENTRY}{entry_id}", consistent_read=True)
        except self.model.DoesNotExist:
            return None
        return FaqEntry.from_body(item.body)

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        from chalicelib.domain.faq import FaqEntry

        keys = [(kb_id, f"{ENTRY}{i}") for i in dict.fromkeys(entry_ids)]
        if not keys:
            return {}
        entries = [FaqEntry.from_body(item.body) for item in self.model.batch_get(keys, consistent_read=True)]
        return {e.id: e for e in entries}

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> list[FaqEntry]:
        """One DeleteItem per row (a batch write cannot say what it removed), returning the old item: of
        two deletes racing for a row, only the one that removed it gets it."""
        from chalicelib.domain.faq import FaqEntry

        table = self.model._get_connection()  # Model.delete does not pass ReturnValues
        removed = []
        for entry_id in dict.fromkeys(entry_ids):
            answer = table.delete_item(kb_id, range_key=f"{ENTRY}{entry_id}", return_values="ALL_OLD")
            if "Attributes" in answer:  # (absent: no row was there to remove)
                removed.append(FaqEntry.from_body(self.model.from_raw_data(answer["Attributes"]).body))
        return removed

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        from chalicelib.domain.faq import FaqEntry

        start = f"{ENTRY}{after}!" if after else ENTRY
        if start > ENTRY_END:  # after every entry id (DynamoDB refuses a BETWEEN whose bounds are reversed)
            return [], ""
        items = list(
            self.model.query(
                kb_id,
                range_key_condition=self.model.key.between(start, ENTRY_END),
                limit=limit + 1,
                consistent_read=True,
            )
        )
        entries = [FaqEntry.from_body(item.body) for item in items[:limit]]
        return entries, (entries[-1].id if len(items) > limit and entries else "")

    # -- question reservations
    def _holder(self, kb_id: str, key: str) -> QuestionHolder | None:
        try:
            item = self.model.get(kb_id, f"{QUESTION}{key}", consistent_read=True)
        except self.model.DoesNotExist:
            return None
        return _as_holder(item)

    def claim_questions(
        self,
        kb_id: str,
        entry_id: str,
        keys: Sequence[str],
        now: float,
        ttl_seconds: float,
        takeover: Mapping[str, QuestionHolder] | None = None,
    ) -> dict[str, QuestionHolder]:
        m = self.model
        refused: dict[str, QuestionHolder] = {}
        for key in dict.fromkeys(keys):
            condition = m.key.does_not_exist() | (m.owner == entry_id) | (m.expires_at < now)
            stale = takeover[key] if takeover and key in takeover else None
            if stale is not None:
                condition = condition | ((m.owner == stale.entry_id) & (m.token == stale.token))
            holder: QuestionHolder | None = None
            for _ in range(3):  # a holder that let go between the write and the read: try again
                try:
                    m(
                        kb_id,
                        f"{QUESTION}{key}",
                        owner=entry_id,
                        token=uuid.uuid4().hex,
                        expires_at=now + ttl_seconds,
                    ).save(condition=condition)
                    holder = None
                    break
                except PutError as error:
                    if not _failed_condition(error):
                        raise
                holder = self._holder(kb_id, key) or QuestionHolder("", "", now + ttl_seconds)
                if holder.entry_id:
                    break
            if holder is not None:  # (an empty holder: the key kept changing hands; the caller refuses)
                refused[key] = holder
        return refused

    def confirm_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        m = self.model
        for key in dict.fromkeys(keys):
            try:
                m(kb_id, f"{QUESTION}{key}", owner=entry_id, token=uuid.uuid4().hex).save(
                    condition=m.owner == entry_id
                )
            except PutError as error:
                if not _failed_condition(error):
                    raise

    def release_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        m = self.model
        for key in dict.fromkeys(keys):
            try:
                m(kb_id, f"{QUESTION}{key}").delete(condition=m.owner == entry_id)
            except DeleteError as error:
                if not _failed_condition(error):
                    raise

    def question_holders(self, kb_id: str, keys: Sequence[str]) -> dict[str, QuestionHolder]:
        wanted = [(kb_id, f"{QUESTION}{key}") for key in dict.fromkeys(keys)]
        if not wanted:
            return {}
        items = self.model.batch_get(wanted, consistent_read=True)
        return {item.key[len(QUESTION) :]: _as_holder(item) for item in items}

    def clear_questions(self, kb_id: str) -> None:
        items = [
            item
            for prefix in (QUESTION, TAG_USE, KEYED)  # (KEYED: the marks of every rule)
            for item in self.model.query(
                kb_id, range_key_condition=self.model.key.startswith(prefix), consistent_read=True
            )
        ]
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(self.model(kb_id, item.key))

    def entries_keyed(self, kb_id: str, rule: int) -> bool:
        try:
            self.model.get(kb_id, _keyed_key(rule), consistent_read=True)
        except self.model.DoesNotExist:
            return False
        return True

    def mark_entries_keyed(self, kb_id: str, rule: int) -> None:
        self.model(kb_id, _keyed_key(rule)).save()

    # -- tag links
    def link_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None:
        with self.model.batch_write() as batch:
            for entry_id, name in dict.fromkeys(links):
                batch.save(self.model(kb_id, f"{_tag_use_prefix(name)}{entry_id}"))

    def unlink_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None:
        with self.model.batch_write() as batch:
            for entry_id, name in dict.fromkeys(links):
                batch.delete(self.model(kb_id, f"{_tag_use_prefix(name)}{entry_id}"))

    def tag_users(self, kb_id: str, name: str, limit: int) -> list[str]:
        prefix = _tag_use_prefix(name)
        items = self.model.query(
            kb_id, range_key_condition=self.model.key.startswith(prefix), limit=limit, consistent_read=True
        )
        return [item.key[len(prefix) :] for item in items][:limit]

    # -- the import lease
    def acquire_lease(self, kb_id: str, owner: str, now: float, ttl_seconds: float) -> FaqLease | None:
        m = self.model
        try:
            m(kb_id, LEASE, owner=owner, expires_at=now + ttl_seconds).save(
                condition=m.key.does_not_exist() | (m.expires_at < now) | (m.owner == owner)
            )
            return None
        except PutError as error:
            if not _failed_condition(error):
                raise
        held = self.get_lease(kb_id)
        return held if held is not None else FaqLease(owner="", expires_at=now)

    def release_lease(self, kb_id: str, owner: str) -> bool:
        m = self.model
        try:
            m(kb_id, LEASE).delete(condition=m.owner == owner)
            return True
        except DeleteError as error:
            if _failed_condition(error):
                return False
            raise

    def get_lease(self, kb_id: str) -> FaqLease | None:
        try:
            item = self.model.get(kb_id, LEASE, consistent_read=True)
        except self.model.DoesNotExist:
            return None
        return FaqLease(str(item.owner), float(item.expires_at))

    # -- tags and the last import
    def tags(self, kb_id: str) -> list[str]:
        items = self.model.query(
            kb_id, range_key_condition=self.model.key.startswith(TAG), consistent_read=True
        )
        return sorted(item.key[len(TAG) :] for item in items)

    def add_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self.model.batch_write() as batch:
            for name in dict.fromkeys(names):
                batch.save(self.model(kb_id, f"{TAG}{name}"))

    def remove_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self.model.batch_write() as batch:
            for name in dict.fromkeys(names):
                batch.delete(self.model(kb_id, f"{TAG}{name}"))

    def put_last_import(self, kb_id: str, result: Mapping[str, Any]) -> None:
        self.model(kb_id, LAST_IMPORT, body=dict(result)).save()

    def get_last_import(self, kb_id: str) -> dict[str, Any] | None:
        try:
            return dict(self.model.get(kb_id, LAST_IMPORT, consistent_read=True).body)
        except self.model.DoesNotExist:
            return None
