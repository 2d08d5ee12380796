"""How each agent kind of a workflow reaches its model, in words for `symphony check`: through
the daemon's model gateway (its environment holds an API key, which stays in the daemon), or
with its own login (a ChatGPT or Claude subscription: no key to keep back, so it calls its
provider itself, as before)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from symphony.agents.registry import backend
from symphony.config.sections import Settings
from symphony.gateway.tokens import Route, routes
from symphony.workspace.environment import child_environment, remote_environment


def _routes_of(settings: Settings, kind: str, environ: Mapping[str, str]) -> tuple[Route, ...]:
    return routes(child_environment(environ, settings, (), extra_names=backend(kind).env_names))


def through_gateway(
    settings: Settings, kinds: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """The agent kinds in `kinds` whose runs call their model through the daemon's gateway."""
    return [kind for kind in kinds if _routes_of(settings, kind, environ)]


def model_access(settings: Settings, kinds: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """One line per agent kind in `kinds`: how its runs reach their model (on a worker host,
    through a forward of the gateway on the run's connection)."""
    lines = []
    for kind in kinds:
        env = child_environment(environ, settings, (), extra_names=backend(kind).env_names)
        found = routes(env)
        if found:
            keys = ", ".join(next(n for n in r.provider.key_names if env.get(n)) for r in found)
            lines.append(
                f"model         {kind}: through the daemon's model gateway ({keys} stays in the "
                "daemon; the agent gets a token of its run)"
            )
        else:
            lines.append(
                f"model         {kind}: its own login (no API key in its environment), calling "
                "its provider itself"
            )
    return lines


def gateway_refusal(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """Why runs of this workflow cannot go to pods: an API key the pod's agent would be sent
    (`agent.env`, `worker.ssh.pass_env`) makes its calls go through the model gateway, on the
    daemon's loopback, which no pod reaches unless `worker.kubernetes.daemon_address` says
    where they reach the daemon (checked at start, as the key's presence depends on the
    daemon's environment)."""
    cluster = settings.worker.kubernetes
    if cluster is None or cluster.daemon is not None:
        return None
    env = remote_environment(environ, settings, ())
    found = routes(env)
    if not found:
        return None
    keys = ", ".join(next(n for n in r.provider.key_names if env.get(n)) for r in found)
    return (
        f"worker.kubernetes: the agents would be sent {keys} (agent.env or worker.ssh.pass_env), "
        "so they would call their model through the daemon's model gateway on its loopback, "
        "which no pod reaches; set worker.kubernetes.daemon_address to where pods reach the "
        "daemon, or give the image's agent a login of its own instead of an API key"
    )


def pods_through_gateway(settings: Settings, environ: Mapping[str, str]) -> bool:
    """Whether the agents in this workflow's pods call their model through the gateway (they
    are sent an API key): `network: model` then lets out the gateway, not the model hosts."""
    return bool(routes(remote_environment(environ, settings, ())))
