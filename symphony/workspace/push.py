"""Pushing a ticket's branch to the code host with the daemon's own credential.

The token reaches one process only: the daemon's `git push`, through a credential helper that
reads it from that process's environment. It is never in a command line (the helper's text
names the variable, not the value), never in an environment an agent, hook or gate gets (those
are built without it, `symphony.workspace.environment`), and never in a message: what git
prints is masked before it is reported. A person's own credential helpers are turned off for
this push, so the daemon pushes as itself or not at all, and git never prompts.

A push never forces: when the remote branch moved (a person pushed), the push is refused as
git refuses it, and the daemon reports the remote's words rather than overwrite a commit it
did not make. A branch already at the commit is a success (pushing twice after a crash is safe).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.secrets import REDACTED, SecretMasker
from symphony.workspace.git import LOCAL_GIT, Git, git_output

PUSH_TOKEN_VARIABLE = "SYMPHONY_PUSH_TOKEN"
"""The variable the daemon's push carries the token in (that process only)."""
PUSH_TIMEOUT_S = 120.0

PUSH_REJECTED = ErrorCategory.PUSH_REJECTED
"""The remote refused the push (a protected branch, a hook, a branch that moved on)."""
PUSH_FAILED = ErrorCategory.PUSH_FAILED
"""The push could not be made (no such remote, authentication, network, timeout)."""

# The helper answers `get` with the token from its own environment; other actions (store,
# erase) are ignored, so git never writes the token anywhere.
_HELPER = (
    '!f() { test "$1" = get || exit 0; echo "username=$SYMPHONY_PUSH_USER"; '
    f'echo "password=${PUSH_TOKEN_VARIABLE}"; }}; f'
)


class PushError(SymphonyError):
    """A push that did not land; the message holds git's and the remote's words, masked."""


@dataclass(frozen=True, slots=True)
class Pushed:
    """A push that landed: the branch it updated on the remote, and the commit."""

    branch: str
    sha: str
    """The commit the remote branch now points at."""


async def push_branch(
    workspace: Path,
    branch: str,
    remote: str,
    *,
    token: str,
    username: str,
    env: Mapping[str, str],
    masker: SecretMasker,
    timeout_s: float = PUSH_TIMEOUT_S,
    git: Git = LOCAL_GIT,
    commit: str | None = None,
) -> Pushed:
    """Push the workspace's HEAD to `refs/heads/<branch>` of `remote` (a remote's name or a
    URL). `env` is the environment of the daemon's git (without the token); `token` is empty
    for a remote that needs none (a path). On an SSH host (`git`) the push runs there, from
    the workspace, with the token sent for that command alone. `commit` (the one the daemon
    verified) is pushed rather than whatever HEAD is now. Raises PushError."""
    wanted = f"{commit}^{{commit}}" if commit else "HEAD^{commit}"
    sha = (await git_output(workspace, env, "rev-parse", "--verify", wanted, git=git) or "").strip()
    if not sha:
        missing = f"lacks the verified commit {commit[:12]}" if commit else "has no commit"
        raise PushError(PUSH_FAILED, f"{workspace} {missing} to push")
    run = await git.run_sending(
        workspace,
        "-c", "credential.helper=",
        "-c", f"credential.helper={_HELPER}",
        "-c", "core.askPass=",
        "push", "--porcelain", remote, f"{sha}:refs/heads/{branch}",
        env=env,
        sent={
            PUSH_TOKEN_VARIABLE: token,
            "SYMPHONY_PUSH_USER": username,
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
        },
        timeout_s=timeout_s,
    )  # fmt: skip
    if run.returncode == 0:
        return Pushed(branch, sha)
    said = _said(run.out, run.err)
    refused = "[rejected]" in run.out or "[remote rejected]" in run.out
    if run.returncode is None:
        category, message = PUSH_FAILED, f"pushing {branch} to {remote} {said}"
    elif refused:
        category, message = PUSH_REJECTED, f"{remote} refused the push of {branch}: {said}"
    else:
        category, message = PUSH_FAILED, f"the push of {branch} to {remote} failed: {said}"
    masked = masker.mask(message)
    raise PushError(category, masked.replace(token, REDACTED) if token else masked)


def _said(out: str, err: str) -> str:
    """What git and the remote said, on one line: the remote's messages, then the refused
    ref's reason (porcelain output), then git's own error."""
    remote = [
        line[len("remote:") :].strip() for line in err.splitlines() if line.startswith("remote:")
    ]
    refs = [
        line.split("\t")[-1].strip()
        for line in out.splitlines()
        if line.startswith("!") and "\t" in line
    ]
    errors = [
        line.removeprefix("fatal:").removeprefix("error:").strip()
        for line in err.splitlines()
        if line.startswith(("fatal:", "error:"))
    ]
    parts = [p for p in (*remote, *refs, *errors) if p] or [err.strip() or "no reason given"]
    return "; ".join(dict.fromkeys(parts))[:2000]
