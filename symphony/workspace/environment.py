"""The environment of everything symphony starts in a workspace: agents, hooks and gates.

It is built from an allowlist, never inherited: a credential in the daemon's environment
(`AWS_SECRET_ACCESS_KEY`, `DATABASE_URL`, a tracker token) reaches no child unless the workflow
names it. A child gets

- the basics a shell and a toolchain need (`BASE_NAMES`, and every `LC_*` locale variable),
- the names listed in `agent.env_passthrough` (a name, or a prefix ending in `*`), when the
  daemon has them,
- the pairs of `agent.env` (values resolved from the daemon's environment at load),
- an agent, and only an agent, the variables its backend needs to reach its model
  (`extra_names`, e.g. codex's `CODEX_HOME` and `OPENAI_API_KEY`), when the daemon has them,
- symphony's own `SYMPHONY_*` variables.

The tracker's declared secrets are removed last, whatever asked for them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from symphony.config.sections import Settings
from symphony.hosts.process import INSTANCE_VARIABLE

REMOTE_INSTANCE_VARIABLE = "SYMPHONY_REMOTE_INSTANCE"
"""The daemon instance that started a process on an SSH host (`SYMPHONY_INSTANCE` here)."""

BASE_NAMES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TMPDIR",
    "TZ",
    "LANG",
    "LANGUAGE",
)
LOCALE_PREFIX = "LC_"


def selected(environ: Mapping[str, str], patterns: Collection[str]) -> dict[str, str]:
    """The variables of `environ` that `patterns` name: a name, or a prefix ending in `*`."""
    names = {p for p in patterns if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))
    return {
        name: value
        for name, value in environ.items()
        if name in names or (prefixes and name.startswith(prefixes))
    }


def child_environment(
    environ: Mapping[str, str],
    settings: Settings,
    secret_names: Collection[str],
    instance_id: str | None = None,
    extra_names: Collection[str] = (),
) -> dict[str, str]:
    """The environment of a hook, gate or (with its backend's `extra_names`) an agent."""
    env = selected(
        environ, (*BASE_NAMES, *extra_names, f"{LOCALE_PREFIX}*", *settings.agent.env_passthrough)
    )
    env.update(settings.agent.env)
    env["SYMPHONY_WORKFLOW_DIR"] = str(settings.workflow_dir)
    if instance_id is not None:
        env[INSTANCE_VARIABLE] = instance_id
    return _without_secrets(env, settings, secret_names, environ)


def remote_environment(
    environ: Mapping[str, str],
    settings: Settings,
    secret_names: Collection[str],
    instance_id: str | None = None,
) -> dict[str, str]:
    """What an agent, hook or gate on an SSH worker host is sent: `agent.env`, the daemon's
    variables named in `worker.ssh.pass_env`, and the daemon's instance id. The host supplies
    its own basics (HOME, USER, PATH, ...); nothing else of this machine's environment
    crosses."""
    env = selected(environ, settings.worker.ssh.pass_env)
    env.update(settings.agent.env)
    if instance_id is not None:
        # Under a name of its own: a restart looks for it on the hosts (`stop_marked`), never
        # in this machine's processes.
        env[REMOTE_INSTANCE_VARIABLE] = instance_id
    return _without_secrets(env, settings, secret_names, environ)


def _without_secrets(
    env: dict[str, str],
    settings: Settings,
    secret_names: Collection[str],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """Drop the tracker's secret variables, the repository's token and the server's, under
    their own name or any other that `agent.env` or a passthrough gave them: they are the
    daemon's alone."""
    for name in secret_names:
        env.pop(name, None)
    repository = settings.repository
    tokens = [settings.server.auth_token or "", *(environ.get(n, "") for n in secret_names)]
    if repository is not None:
        if repository.token_env is not None:
            env.pop(repository.token_env, None)
        tokens.append(repository.token)  # empty for a host that needs none
    for token in filter(None, tokens):  # the server's token opens a person's actions
        for name in [name for name, value in env.items() if value == token]:
            del env[name]
    return env
