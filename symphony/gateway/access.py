"""How each agent kind of a workflow reaches its model, in words for `symphony check`: through
the daemon's model gateway (its environment holds an API key, which stays in the daemon), or
with its own login (a ChatGPT or Claude subscription: no key to keep back, so it calls its
provider itself, as before)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from symphony.agents.registry import backend
from symphony.config.sections import Settings
from symphony.gateway.tokens import Route, routes
from symphony.workspace.environment import child_environment


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
