"""The reliability suite runs on the e2e stack (moto + the local event-source pollers): its fixtures."""

from e2e.conftest import _aws_calls, _roles, _runtime, api, client, runtime, services  # noqa: F401  (fixtures)
