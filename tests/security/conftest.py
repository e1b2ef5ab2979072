"""The security suites drive the public path: the same fixtures as the end-to-end tests."""

from e2e.conftest import (  # noqa: F401
    Api,
    _aws_calls,
    _roles,
    _runtime,
    api,
    client,
    other_api,
    runtime,
    services,
)
