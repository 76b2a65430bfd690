"""The conformance checks: pytest modules, one per group, each test parametrized over trainers.

Run them with ``pytest --pyargs towerkit.conformance.checks`` (the plugin adds the
options) or ``nox -s conformance``.
"""
