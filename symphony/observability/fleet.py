"""One HTTP surface for a fleet of workflows (`symphony serve`).

Each workflow keeps its own dashboard, review page, API and actions (`server.create_app`),
served under `/w/<name>/`, with its own `server.auth_token` and its own login session. Across
them: `/` (every workflow, and everything waiting for a person, oldest first), `/api/v1/fleet`
(the same as JSON), `/api/v1/review` (the merged review queue), `/api/v1/state` (every
workflow's snapshot by name), `/metrics` (every workflow's figures with a `workflow` label),
and the supervisor's `/livez` and `/readyz` (ready when every workflow is loaded and ready).
A workflow that could not be loaded shows with its error; its pages answer 503 until it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from symphony.base.secrets import SecretMasker
from symphony.observability.health import notes, unready
from symphony.observability.metrics import render_metrics
from symphony.observability.server import METRICS_CONTENT_TYPE, JSONResponse, Observed, create_app


@dataclass(frozen=True, slots=True)
class Seen:
    """What the fleet's surface sees of one workflow."""

    name: str
    weight: int
    orchestrator: Observed | None
    error: str | None
    auth_token: str | None = None


class FleetApp:
    """The ASGI app: `/w/<name>/...` to that workflow's own app, the rest to the fleet's."""

    def __init__(
        self,
        members: Callable[[], Sequence[Seen]],
        fleet: Callable[[], dict[str, Any]],
        masker: SecretMasker,
    ) -> None:
        self._members = members
        self._fleet = fleet
        self._masker = masker
        self._apps: dict[str, tuple[int, Starlette]] = {}
        self._own = self._fleet_app()
        page = resources.files(__package__).joinpath("fleet.html").read_bytes()
        self._page = page

    def close(self) -> None:
        """End every workflow's open event streams (the server is stopping)."""
        for _, app in self._apps.values():
            app.state.changes.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] in ("http", "websocket") else ""
        match = re.match(r"^/w/([^/]+)(/.*)?$", path)
        if match is None:
            await self._own(scope, receive, send)
            return
        name, rest = match.group(1), match.group(2)
        if rest is None:  # `/w/a` -> `/w/a/`: the pages' relative links need the slash
            await RedirectResponse(f"/w/{name}/", status_code=308)(scope, receive, send)
            return
        app = self._app_for(name)
        if app is None:
            seen = next((m for m in self._members() if m.name == name), None)
            words = (
                f"no workflow {name!r}" if seen is None else f"{name} is not running: {seen.error}"
            )
            status = 404 if seen is None else 503
            body = {"error": {"code": "workflow_unavailable", "message": words}}
            await JSONResponse(body, self._masker, status_code=status)(scope, receive, send)
            return
        inner = dict(scope)
        inner["root_path"] = scope.get("root_path", "") + f"/w/{name}"
        inner["path"] = rest
        await app(inner, receive, send)

    def _app_for(self, name: str) -> Starlette | None:
        seen = next((m for m in self._members() if m.name == name), None)
        if seen is None or seen.orchestrator is None:
            return None
        known = self._apps.get(name)
        if known is None or known[0] != id(seen.orchestrator):
            app = create_app(seen.orchestrator, auth_token=seen.auth_token)
            known = self._apps[name] = (id(seen.orchestrator), app)
        return known[1]

    def overview(self) -> dict[str, Any]:
        workflows: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for seen in self._members():
            row: dict[str, Any] = {"name": seen.name, "weight": seen.weight, "error": seen.error,
                                   "url": f"/w/{seen.name}/"}  # fmt: skip
            if seen.orchestrator is None:
                row.update(status="not loaded", ready=False,
                           reasons=[f"not loaded: {seen.error}"])  # fmt: skip
                workflows.append(row)
                continue
            snapshot = seen.orchestrator.snapshot()
            reasons = unready(snapshot)
            counts = snapshot.get("counts") or {}
            queue = seen.orchestrator.review_queue()["queue"]
            row.update(
                status="running", ready=not reasons, reasons=reasons, notes=notes(snapshot),
                running=counts.get("running", 0), retrying=counts.get("retrying", 0),
                waiting_for_review=len(queue), paused=snapshot.get("paused") is not None,
                workflow_error=(snapshot.get("health") or {}).get("workflow_error"),
            )  # fmt: skip
            workflows.append(row)
            waiting.extend(
                {**item, "workflow": seen.name,
                 "review_url": f"/w/{seen.name}/review#{item['issue_identifier']}"}
                for item in queue
            )  # fmt: skip
        return {"fleet": self._fleet(), "workflows": workflows, "review": waiting}

    def _fleet_app(self) -> Starlette:
        masker = self._masker

        async def index(request: Request) -> Response:
            return Response(self._page, media_type="text/html; charset=utf-8")

        async def fleet(request: Request) -> Response:
            return JSONResponse(self.overview(), masker)

        async def review_page(request: Request) -> Response:
            # The one place a person looks: the overview's queue of every workflow.
            return RedirectResponse("./#review", status_code=303)

        async def review(request: Request) -> Response:
            return JSONResponse({"queue": self.overview()["review"]}, masker)

        async def state(request: Request) -> Response:
            snapshots = {
                m.name: m.orchestrator.snapshot() if m.orchestrator is not None
                else {"error": m.error}
                for m in self._members()
            }  # fmt: skip
            return JSONResponse({"fleet": self._fleet(), "workflows": snapshots}, masker)

        async def metrics(request: Request) -> Response:
            parts = [
                labelled(render_metrics(m.orchestrator.snapshot()), m.name)
                for m in self._members() if m.orchestrator is not None
            ]  # fmt: skip
            return Response(masker.mask(merge_metrics(parts)),
                            headers={"Content-Type": METRICS_CONTENT_TYPE})  # fmt: skip

        async def livez(request: Request) -> Response:
            return JSONResponse({"live": True}, masker)

        async def readyz(request: Request) -> Response:
            rows = self.overview()["workflows"]
            reasons = [f"{row['name']}: {why}" for row in rows for why in row["reasons"]]
            body = {"ready": not reasons, "reasons": reasons}
            return JSONResponse(body, masker, status_code=200 if not reasons else 503)

        return Starlette(routes=[
            Route("/", index, methods=["GET"]),
            Route("/api/v1/fleet", fleet, methods=["GET"]),
            Route("/review", review_page, methods=["GET"]),
            Route("/api/v1/review", review, methods=["GET"]),
            Route("/api/v1/state", state, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/livez", livez, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ])  # fmt: skip


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?( .*)$")


def labelled(text: str, workflow: str) -> str:
    """Prometheus text with `workflow="<name>"` added to every sample."""
    value = workflow.replace("\\", "\\\\").replace('"', '\\"')
    lines = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if line.startswith("#") or match is None:
            lines.append(line)
            continue
        name, labels, rest = match.groups()
        inner = labels[1:-1] if labels else ""
        joined = f'workflow="{value}"' + (f",{inner}" if inner else "")
        lines.append(f"{name}{{{joined}}}{rest}")
    return "\n".join(lines)


def merge_metrics(parts: Sequence[str]) -> str:
    """Several workflows' figures in one exposition: each metric's HELP and TYPE once, its
    samples from every workflow together."""
    order: list[str] = []
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for text in parts:
        current = ""
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                current = line.split()[2]
                if current not in heads:
                    order.append(current)
                    heads[current] = []
                    samples[current] = []
                if line not in heads[current]:
                    heads[current].append(line)
            elif line:
                samples.setdefault(current, []).append(line)
    out = [line for name in order for line in (*heads[name], *samples[name])]
    return "\n".join(out) + "\n"
