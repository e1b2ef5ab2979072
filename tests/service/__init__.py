import pytest

# The shared contract's asserts explain themselves when they fail, here and in tests/e2e.
pytest.register_assert_rewrite("service.repo_contract")
