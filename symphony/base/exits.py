"""The command's exit statuses."""

EXIT_OK = 0
EXIT_FAILED = 1
"""A failure the command explained in one line on stderr."""
EXIT_USAGE = 2
"""Arguments the command cannot take (argparse's own status)."""
