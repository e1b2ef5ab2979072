"""The ShareRepo's blocks, run against the in-memory fake (tests/service/test_share_blocks.py) and the
DynamoDB adapter on moto (tests/e2e/test_share_blocks_dynamo.py): a tenant blocks an owner tenant, which
removes that owner's shares with it in one call and refuses the owner's next ones."""

from __future__ import annotations

import uuid

from chalicelib.ports import ShareRepo


def new_id() -> str:
    return str(uuid.uuid4())


class ShareBlockContract:
    def test_a_block_removes_the_owners_shares_and_refuses_its_next_ones(self, shares: ShareRepo) -> None:
        owner, other, reader = new_id(), new_id(), new_id()
        owned = sorted(new_id() for _ in range(3))
        kept = new_id()
        for kb_id in owned:
            assert shares.add(owner, kb_id, reader) is True
        assert shares.add(other, kept, reader) is True
        other_reader = new_id()
        assert shares.add(owner, owned[0], other_reader) is True
        assert shares.blocks(reader, owner) is False
        assert shares.block(reader, owner) == owned
        assert shares.shared_with(reader) == [kept]
        assert shares.tenants_of(owned[0]) == [other_reader]  # another recipient keeps its share
        assert shares.blocks(reader, owner) is True and shares.blocks(reader, other) is False
        assert shares.add(owner, owned[1], reader) is False  # nothing written
        assert shares.add(owner, new_id(), reader) is False
        assert shares.tenants_of(owned[1]) == []
        assert shares.shared_with(reader) == [kept]
        assert shares.block(reader, owner) == []  # twice is once
        assert shares.blocked(reader) == [owner]
        assert shares.unblock(reader, owner) is True
        assert shares.unblock(reader, owner) is False
        assert shares.blocked(reader) == []
        assert shares.add(owner, owned[1], reader) is True
        assert shares.shared_with(reader) == sorted([kept, owned[1]])

    def test_blocks_are_capped_and_listed(self, shares: ShareRepo) -> None:
        reader = new_id()
        owners = sorted(new_id() for _ in range(3))
        assert shares.blocked(reader) == []
        assert shares.block(reader, owners[0], cap=2) == []
        assert shares.block(reader, owners[1], cap=2) == []
        assert shares.block(reader, owners[2], cap=2) is None  # nothing written
        assert shares.block(reader, owners[1], cap=2) == []  # one it blocks: no new block
        assert shares.blocked(reader) == owners[:2]
        assert shares.unblock(new_id(), owners[0]) is False  # a tenant that never blocked
        assert shares.unblock(reader, owners[0]) is True
        assert shares.block(reader, owners[2], cap=2) == []
        assert shares.blocked(reader) == owners[1:]

    def test_a_block_does_not_count_against_the_share_cap(self, shares: ShareRepo) -> None:
        """The attack blocks answer: an owner fills a recipient's share cap with its own knowledge bases;
        blocked, its shares are gone and the cap is free for the others, however often the owner retries."""
        spammer, friend, reader = new_id(), new_id(), new_id()
        spam = [new_id() for _ in range(2)]
        for kb_id in spam:
            assert shares.add(spammer, kb_id, reader, cap=2) is True
        assert shares.add(friend, new_id(), reader, cap=2) is False
        assert sorted(shares.block(reader, spammer) or ()) == sorted(spam)
        for kb_id in spam:
            assert shares.add(spammer, kb_id, reader, cap=2) is False
        wanted = new_id()
        assert shares.add(friend, wanted, reader, cap=2) is True
        assert shares.shared_with(reader) == [wanted]
