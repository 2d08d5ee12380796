"""The links a serving command prints: the dashboard, and the review page through its login.

Printed on standard output (not the log) once the server listens, so that whoever started the
daemon can click them. The token is never part of a link unless asked for (`--show-token`, which
the quickstart and `symphony demo` pass for the token they generate); it then rides in the
link's fragment (`#token=`), which a browser does not send to the server, and the login page
fills it in and takes it out of the address bar.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote


def link_lines(url: str, *, token: str | None, show_token: bool) -> list[str]:
    """The lines printed for a workflow's server at `url` (ending in a slash); `token` is
    `server.auth_token` (None: actions are off)."""
    base = url if url.endswith("/") else url + "/"
    lines = [f"dashboard: {base}"]
    if token is None:
        lines.append(
            f"review:    {base}review  (read-only: set server.auth_token to approve there)"
        )
        return lines
    login = f"{base}login?next=/review"
    if show_token:
        lines.append(f"review:    {login}#token={quote(token, safe='')}  (logs you in)")
    else:
        lines.append(f"review:    {login}  (log in with server.auth_token)")
    return lines


def print_links(lines: list[str], out: Callable[[str], None] | None = None) -> None:
    write = out or (lambda line: print(line, flush=True))
    for line in lines:
        write(f"symphony: {line}")
