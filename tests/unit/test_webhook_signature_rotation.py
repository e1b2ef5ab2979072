"""After a rotation a delivery carries one `v1=` per secret that still signs (`t=…,v1=<new>,v1=<old>…`):
the library's `verify` and the README's snippet accept it with any of them and refuse another; each old
secret signs until its own expiry, not after, the oldest last; a rotation keeps at most three old secrets,
dropping the one that expires first, and a grace of 0 drops them all."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import to_iso
from chalicelib.domain.webhooks import (
    PreviousSecret,
    rotated_previous,
    signature_header,
    signing_secrets,
    verify,
)

from .test_webhook_signature import readme_verifier

BODY = b'{"type":"Knowledge Completed"}'


def test_a_header_with_two_signatures_verifies_with_either_secret_and_no_other() -> None:
    now = int(time.time())
    header = signature_header("whsec_new", now, BODY, "whsec_old")
    assert header.startswith(f"t={now},v1=") and header.count(",v1=") == 2
    assert header.split(",")[1] == signature_header("whsec_new", now, BODY).split(",")[1]
    for secret in ("whsec_new", "whsec_old"):
        assert verify(secret, header, BODY, now=now)
        assert not verify(secret, header, BODY + b" ", now=now)
        assert not verify(secret, header, BODY, now=now + 3600)
    assert not verify("whsec_other", header, BODY, now=now)
    assert not verify("whsec_new", f"t={now},t={now - 1},{header.split(',', 1)[1]}", BODY, now=now)


def test_the_readme_snippet_verifies_either_signature_of_a_rotation() -> None:
    verified = readme_verifier()
    header = signature_header("whsec_new", int(time.time()), BODY, "whsec_old", "whsec_oldest")
    assert all(verified(s, header, BODY) for s in ("whsec_new", "whsec_old", "whsec_oldest"))
    assert not verified("whsec_other", header, BODY)
    assert not verified("whsec_new", header, BODY + b" ")


def test_each_previous_secret_signs_until_its_own_expiry_only_newest_first() -> None:
    newer = PreviousSecret("newer", "2026-12-07T00:00:00.000Z")
    older = PreviousSecret("older", "2026-12-09T00:00:00.000Z")
    assert signing_secrets("new", [newer, older], "2026-12-06T23:59:59.999Z") == ["new", "newer", "older"]
    assert signing_secrets("new", [newer, older], newer.expires_at) == ["new", "older"]
    assert signing_secrets("new", [newer, older], "2026-12-09T00:00:00.000Z") == ["new"]
    assert signing_secrets("new", [], "2026-12-06T00:00:00.000Z") == ["new"]


NOW = datetime(2026, 12, 7, tzinfo=UTC)


def at(seconds: int) -> str:
    return to_iso(NOW + timedelta(seconds=seconds))


def test_a_rotation_puts_the_replaced_secret_first_and_keeps_the_others_with_their_own_expiries() -> None:
    s0 = PreviousSecret("s0", at(3600))
    assert rotated_previous("s1", [s0], 60, NOW) == [PreviousSecret("s1", at(60)), s0]
    expired = PreviousSecret("gone", at(0))  # expires now: dropped, not carried
    assert rotated_previous("s1", [expired, s0], 60, NOW) == [PreviousSecret("s1", at(60)), s0]


def test_a_grace_of_0_drops_every_previous_secret() -> None:
    assert rotated_previous("s2", [PreviousSecret("s1", at(60)), PreviousSecret("s0", at(600))], 0, NOW) == []


def test_at_most_three_previous_secrets_the_one_expiring_first_goes_the_oldest_of_a_tie() -> None:
    s2, s1, s0 = PreviousSecret("s2", at(600)), PreviousSecret("s1", at(7200)), PreviousSecret("s0", at(3600))
    assert rotated_previous("s3", [s2, s1, s0], 86400, NOW) == [PreviousSecret("s3", at(86400)), s1, s0]
    # the secret replaced now may be the one expiring first: then it goes
    assert rotated_previous("s3", [s2, s1, s0], 60, NOW) == [s2, s1, s0]
    tie = [PreviousSecret("b", at(600)), PreviousSecret("a", at(600)), PreviousSecret("z", at(9000))]
    assert rotated_previous("c", tie, 600, NOW) == [PreviousSecret("c", at(600)), tie[0], tie[2]]


def test_the_oldest_previous_secret_signs_last_for_a_receiver_keeping_the_last_v1() -> None:
    now = int(time.time())
    previous = [
        PreviousSecret("whsec_s1", "9999-01-01T00:00:00.000Z"),
        PreviousSecret("whsec_s0", "9999-01-01T00:00:00.000Z"),
    ]
    own, *others = signing_secrets("whsec_s2", previous, to_iso(datetime.now(UTC)))
    header = signature_header(own, now, BODY, *others)
    last = header.rsplit(",", 1)[1]
    assert last == signature_header("whsec_s0", now, BODY).split(",")[1]
    assert all(verify(s, header, BODY, now=now) for s in ("whsec_s2", "whsec_s1", "whsec_s0"))


def test_a_forged_header_is_refused_never_raised_by_verify_and_the_readme_snippet() -> None:
    """`"²".isdigit()` is True and `int("²")` raises; compare_digest raises on a str with non-ASCII characters:
    a receiver would answer a forged request with a 500."""
    verified = readme_verifier()
    now = int(time.time())
    for header in ("t=²,v1=ab", f"t={now},v1=é", f"t={now},v1=\u0661\u0662"):
        assert not verify("whsec_new", header, BODY, now=now)
        assert not verified("whsec_new", header, BODY)
