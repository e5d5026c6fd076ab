"""The ``minibroker`` command line: the top of the stack, though it lives in ``client/``
(docs/design.md, "Where the command line stands"). It names the broker, chaos and the audit
by module in :data:`client.cli.main.COMMANDS` and imports one only when its command runs."""
