"""Symphony: run coding agents on tracker tickets, each in its own workspace."""

DISTRIBUTION = "symphony-daemon"
"""The name symphony is installed under (`pipx install symphony-daemon`); `symphony` on PyPI is
another project's. The import package and the command stay `symphony`."""
