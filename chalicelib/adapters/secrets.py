"""The operator key on AWS: an SSM Parameter Store SecureString, read on the first admin request and cached.

CloudFormation cannot create a SecureString, so `make deploy` (scripts/deploy.sh) creates it after the stack;
until then `read()` answers None and the admin API says so (403 operator_key_missing), never a 500.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from chalicelib.ports import SecretSource


class SsmParameter:
    """One SecureString parameter, decrypted. Under the AWS-managed key (aws/ssm) a role of the account
    needs only ssm:GetParameter on the parameter, no KMS grant."""

    def __init__(self, ssm: Any, name: str) -> None:
        self.ssm = ssm
        self.name = name

    def read(self) -> str | None:
        try:
            answer = self.ssm.get_parameter(Name=self.name, WithDecryption=True)
        except self.ssm.exceptions.ParameterNotFound:
            return None
        return str(answer["Parameter"]["Value"])


class CachedSecret:
    """`source` read at most once per `ttl` seconds: a warm function asks SSM again only after it, so a
    rotated key takes effect within `ttl`. A missing value is asked again after `missing_ttl` (shorter:
    the key `make deploy` creates is seen soon), and never more often (unauthenticated callers cannot make
    every request a call to SSM)."""

    def __init__(
        self,
        source: SecretSource,
        *,
        ttl: float = 300.0,
        missing_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.ttl = ttl
        self.missing_ttl = missing_ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._expires = float("-inf")

    def read(self) -> str | None:
        with self._lock:
            now = self.clock()
            if now >= self._expires:
                self._value = self.source.read()
                self._expires = now + (self.ttl if self._value else self.missing_ttl)
            return self._value


class StaticSecret:
    """A fixed value (tests; None: the secret does not exist)."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def read(self) -> str | None:
        return self.value
