"""Entry points: `symphony` and its subcommands (check, init, report, open, memory)."""
