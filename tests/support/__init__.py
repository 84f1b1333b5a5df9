"""Helpers shared by the tests (toy configs and specs, the CLI runner, real servers); pytest puts `tests/` on the
path (`pythonpath` in pyproject.toml), so tests import them as `from support.toy import ...`."""
