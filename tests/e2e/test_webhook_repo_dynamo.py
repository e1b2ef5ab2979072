"""The WebhookRepo contract on the DynamoDB adapter (the webhooks table on moto, provisioned from the
template)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

import pytest
from service.webhook_repo_contract import WebhookRepoContract, make_hook, read_back

from chalicelib.adapters.dynamo.webhooks import DynamoWebhookRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.domain.webhooks import PreviousSecret
from chalicelib.ports import Webhook, WebhookRepo


class TestDynamoWebhookRepo(WebhookRepoContract):
    @pytest.fixture
    def hooks(self, module_services: Services) -> WebhookRepo:
        return module_services.webhooks


def test_a_webhooks_read_the_table_did_not_answer_is_service_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every announcement reads the knowledge base's webhooks: a throttled read is ServiceUnreachable, which
    the announcement logs and goes on from (services/events.py); a refusal stays the table's own error."""
    from botocore.exceptions import ClientError
    from pynamodb.exceptions import QueryError

    from chalicelib.adapters.dynamo.webhooks import DynamoWebhookRepo
    from chalicelib.ports import ServiceUnreachable

    class Table:
        class key:
            @staticmethod
            def startswith(prefix: str) -> str:
                return prefix

        answer = "ThrottlingException"

        @classmethod
        def query(cls, *args: object, **kwargs: object) -> list[object]:
            error = ClientError({"Error": {"Code": cls.answer, "Message": "server words"}}, "Query")
            raise QueryError("Failed to query items", cause=error)

    repo = DynamoWebhookRepo(Table)
    with pytest.raises(ServiceUnreachable) as raised:
        repo.list_kb("kb")
    assert "server words" not in str(raised.value)
    Table.answer = "AccessDeniedException"
    with pytest.raises(QueryError):
        repo.list_kb("kb")


def _head_body(hook: Webhook) -> dict[str, object]:
    """A webhook's body as the code from before rotations wrote it (and reads it: the secret in it)."""
    return {
        "id": hook.id,
        "tenant_id": hook.tenant_id,
        "url": hook.url,
        "event_types": hook.event_types,
        "secret": hook.secret,
        "enabled": True,
        "description": hook.description,
        "created_at": hook.created_at,
        "updated_at": hook.updated_at,
    }


def _dynamo_repo(module_services: Services) -> DynamoWebhookRepo:
    repo = module_services.webhooks
    assert isinstance(repo, DynamoWebhookRepo)
    return repo


def _body_secret(repo: DynamoWebhookRepo, hook: Webhook) -> str:
    """The secret code from before rotations reads: the one in the row's body."""
    return str(repo.model.get(hook.kb_id, f"hook#{hook.id}", consistent_read=True).body["secret"])


def test_a_row_from_before_rotations_keeps_its_secret_in_its_body_until_an_update_or_rotation_moves_it(
    module_services: Services,
) -> None:
    """Rows written before rotations hold the secret in their JSON body and no `secret` attribute: read from
    there, kept by a settings update (which writes the attribute), and rotated once (the missing attribute
    is the secret that was read; the body as read is the condition's)."""
    repo = _dynamo_repo(module_services)
    kb_id = f"kb-{uuid.uuid4()}"
    hook = make_hook(kb_id)
    repo.model(kb_id, f"hook#{hook.id}", body=_head_body(hook)).save()
    assert repo.get(kb_id, hook.id) == hook and repo.list_kb(kb_id) == [hook]
    assert repo.update(replace(hook, description="changed"), read=hook) == "written"
    assert repo.get(kb_id, hook.id) == replace(hook, description="changed")
    assert _body_secret(repo, hook) == hook.secret

    other = make_hook(kb_id)
    repo.model(kb_id, f"hook#{other.id}", body=_head_body(other)).save()
    previous = [PreviousSecret(other.secret, "2027-01-01T00:00:00.000Z")]
    rotated = replace(other, secret="whsec_new", previous_secrets=previous)
    assert repo.rotate_secret(rotated, other.secret)
    assert not repo.rotate_secret(replace(rotated, secret="whsec_late"), other.secret)
    assert repo.get(kb_id, other.id) == rotated
    assert _body_secret(repo, other) == "whsec_new"


def test_the_body_keeps_the_current_secret_for_code_from_before_rotations(module_services: Services) -> None:
    """Rolled back, the code from before rotations reads the secret from the body: every write keeps it
    the current one (created, rotated, changed with a read from before the rotation)."""
    repo = _dynamo_repo(module_services)
    hook = make_hook(f"kb-{uuid.uuid4()}")
    repo.put(hook)
    assert _body_secret(repo, hook) == hook.secret
    previous = [PreviousSecret(hook.secret, "2027-01-01T00:00:00.000Z")]
    assert repo.rotate_secret(replace(hook, secret="whsec_s1", previous_secrets=previous), hook.secret)
    assert _body_secret(repo, hook) == "whsec_s1"
    # read before the rotation: secret whsec_x
    assert repo.update(replace(hook, description="changed"), read=hook) == "written"
    assert _body_secret(repo, hook) == "whsec_s1"
    stored = repo.get(hook.kb_id, hook.id)
    assert stored == replace(hook, description="changed", secret="whsec_s1", previous_secrets=previous)


def test_a_settings_change_between_a_rotations_read_and_write_is_kept_and_the_rotation_holds(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotation writes the whole body (the secret in it), conditional on the body it read: a change of
    settings that came between fails that condition once, and the rotation goes again from a fresh read."""
    repo = _dynamo_repo(module_services)
    hook = make_hook(f"kb-{uuid.uuid4()}")
    repo.put(hook)
    read = repo._item
    other = DynamoWebhookRepo(repo.model)  # another request's (its reads are not the ones patched here)
    reads = 0

    def changed_after_the_first_read(kb_id: str, webhook_id: str) -> object:
        nonlocal reads
        reads += 1
        item = read(kb_id, webhook_id)
        if reads == 1:
            assert other.update(replace(hook, description="renamed"), read=hook) == "written"
        return item

    monkeypatch.setattr(repo, "_item", changed_after_the_first_read)
    previous = [PreviousSecret(hook.secret, "2027-01-01T00:00:00.000Z")]
    assert repo.rotate_secret(replace(hook, secret="whsec_s1", previous_secrets=previous), hook.secret)
    assert reads == 2
    monkeypatch.undo()
    assert repo.get(hook.kb_id, hook.id) == replace(
        hook, description="renamed", secret="whsec_s1", previous_secrets=previous
    )
    assert _body_secret(repo, hook) == "whsec_s1"


def test_a_rotation_overtaken_by_changes_every_time_is_a_409_not_a_loop(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _dynamo_repo(module_services)
    hook = make_hook(f"kb-{uuid.uuid4()}")
    repo.put(hook)
    read = repo._item
    other = DynamoWebhookRepo(repo.model)  # another request's (its reads are not the ones patched here)

    def always_changed(kb_id: str, webhook_id: str) -> object:
        item = read(kb_id, webhook_id)
        changed = replace(hook, description=str(uuid.uuid4()))
        assert other.update(changed, read=read_back(other, hook)) == "written"
        return item

    monkeypatch.setattr(repo, "_item", always_changed)
    with pytest.raises(Conflict) as overtaken:
        repo.rotate_secret(replace(hook, secret="whsec_s1"), hook.secret)
    assert overtaken.value.code == "webhook_write_conflict"
    monkeypatch.undo()
    stored = repo.get(hook.kb_id, hook.id)
    assert stored is not None and stored.secret == hook.secret


def _between_the_updates_read_and_write(
    repo: DynamoWebhookRepo, monkeypatch: pytest.MonkeyPatch, write: Callable[[], None]
) -> None:
    """Runs `write` (another request's) right after the update's own first read of the row."""
    read = repo._item
    reads = 0

    def then_written(kb_id: str, webhook_id: str) -> object:
        nonlocal reads
        reads += 1
        item = read(kb_id, webhook_id)
        if reads == 1:
            write()
        return item

    monkeypatch.setattr(repo, "_item", then_written)


def test_a_put_landing_between_an_updates_own_read_and_write_makes_it_changed_not_undone(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_events #1 on the table: the write's condition is the body read; another PUT's body fails it, and
    the fresh read finds other settings than the caller's: `changed`, the other PUT's URL stays."""
    repo = _dynamo_repo(module_services)
    other = DynamoWebhookRepo(repo.model)
    hook = make_hook(f"kb-{uuid.uuid4()}")
    repo.put(hook)
    moved = replace(hook, url="https://93.184.216.35/new", updated_at="2026-01-02T00:00:00.000Z")
    _between_the_updates_read_and_write(
        repo, monkeypatch, lambda: assert_written(other.update(moved, read=hook, resume=True))
    )
    renamed = replace(hook, description="renamed", updated_at="2026-01-03T00:00:00.000Z")
    assert repo.update(renamed, read=hook) == "changed"
    monkeypatch.undo()
    assert repo.get(hook.kb_id, hook.id) == moved


def test_a_rotation_between_an_updates_own_read_and_write_is_no_change_of_settings(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotation changed the body (its secret): the update writes again from a fresh read, with the
    rotated secret, and is `written`."""
    repo = _dynamo_repo(module_services)
    other = DynamoWebhookRepo(repo.model)
    hook = make_hook(f"kb-{uuid.uuid4()}")
    repo.put(hook)
    previous = [PreviousSecret(hook.secret, "2027-01-01T00:00:00.000Z")]
    rotated = replace(hook, secret="whsec_s1", previous_secrets=previous)
    _between_the_updates_read_and_write(
        repo, monkeypatch, lambda: assert_written(other.rotate_secret(rotated, hook.secret))
    )
    renamed = replace(hook, description="renamed", updated_at="2026-01-02T00:00:00.000Z")
    assert repo.update(renamed, read=hook) == "written"
    monkeypatch.undo()
    assert repo.get(hook.kb_id, hook.id) == replace(renamed, secret="whsec_s1", previous_secrets=previous)
    assert _body_secret(repo, hook) == "whsec_s1"


def assert_written(answer: object) -> None:
    assert answer in (True, "written"), answer
