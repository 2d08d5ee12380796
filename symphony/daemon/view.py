"""The read side of one workflow's daemon: what the HTTP server, the fleet page and the
terminal see of it, and the few things a person may ask of it from there.

The orchestrator keeps the loop; this is the one object the surfaces hold (the server's
`Observed`). It builds the snapshot once per change (the loop says when: `changed`) and at most
every `SNAPSHOT_MAX_AGE_S` otherwise, so ten open dashboards cost one snapshot, not ten. What
reads files or runs git (a ticket's workspace, its branch, its evidence, a review's diff) is
done here, never in an HTTP handler. Requests that change something (refresh, pause, a
person's action on a ticket, a webhook) are handed to the loop or to `PersonActions`; nothing
here decides.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from symphony.base.hosts import LOCAL
from symphony.codehost.contract import CodeHostError, code_host_adapter
from symphony.core import review_actions
from symphony.daemon.events import FollowRequested
from symphony.daemon.owner import Owner
from symphony.daemon.places import Workspaces
from symphony.tracker.webhooks import ReceivesWebhooks, WebhookReceiver
from symphony.workspace.editor import editor_words, open_command
from symphony.workspace.facts import read_evidence_file
from symphony.workspace.git import git_output
from symphony.workspace.local import workspace_key

SNAPSHOT_MAX_AGE_S = 1.0
"""How old a snapshot may be served when nothing changed (its ages and countdowns move)."""


class DaemonView:
    """The surfaces' view of one orchestrator (see the module's docstring)."""

    def __init__(self, orchestrator: Owner) -> None:
        self._daemon = orchestrator
        self.masker = orchestrator.masker
        self._snapshot: dict[str, Any] | None = None
        self._built_at = 0.0
        self._listeners: list[Callable[[], None]] = []

    # Reading

    def changed(self) -> None:
        """The loop changed something: the next snapshot is built afresh."""
        self._snapshot = None

    def snapshot(self) -> dict[str, Any]:
        """A JSON-safe view of the current state for status surfaces."""
        now = time.monotonic()
        if self._snapshot is None or now - self._built_at >= SNAPSHOT_MAX_AGE_S:
            self._snapshot, self._built_at = self._build_snapshot(), now
        return self._snapshot

    def _build_snapshot(self) -> dict[str, Any]:
        from symphony.observability.snapshot import daemon_snapshot  # with the first surface

        daemon = self._daemon
        return daemon_snapshot(
            daemon.state,
            daemon.settings,
            daemon.clock.monotonic(),
            daemon.clock.wall(),
            health=daemon.health,
            tracker_requests=daemon.tracker_requests,
            activity=daemon.activity,
            board=daemon.board,
            outcomes=daemon.outcomes.report,
            held_for_review=daemon.polling.held_for_review,
            host_roots=daemon.places.host_roots(),
            cluster=daemon.places.cluster(),
            notify=daemon.notifier.status(),
            notices=daemon.saver.recent_notices(),
        )

    def issue_snapshot(self, wanted: str) -> dict[str, Any] | None:
        """One issue (by identifier or id) in detail: running, retrying, or known from the last
        poll as waiting (with the reason); None when the daemon knows nothing of it."""
        from symphony.observability.snapshot import issue_detail  # with the first surface

        daemon = self._daemon
        return issue_detail(
            daemon.state,
            wanted,
            daemon.clock.monotonic(),
            daemon.clock.wall(),
            board=daemon.board,
            activity=daemon.activity,
            evidence=self._evidence_of,
        )

    async def issue_detail(self, wanted: str) -> dict[str, Any] | None:
        """`issue_snapshot` with the ticket's workspace, how a person opens it and the branch
        checked out there (what the API and the dashboard's ticket panel show)."""
        detail = self.issue_snapshot(wanted)
        if detail is None:
            return None
        identifier = detail["issue_identifier"]
        path = self.workspace_path(identifier)
        detail["workspace_key"] = workspace_key(identifier)
        detail["workspace_path"] = str(path)
        detail["open_command"] = self.open_command(path)
        branch = None
        if path.is_dir():
            head = await git_output(path, os.environ, "rev-parse", "--abbrev-ref", "HEAD")
            branch = head.strip() if head and head.strip() != "HEAD" else None
        detail["branch"] = branch
        return detail

    def _evidence_of(self, identifier: str) -> dict[str, Any] | None:
        workspace = self._daemon.places.local.owned_path(identifier)
        return read_evidence_file(workspace) if workspace is not None else None

    def local_file(self, kind: str, wanted: str) -> tuple[str, str] | None:
        """(path, text) of the file behind a ticket's own `file://` link: its Markdown file on a
        local board (`kind` "ticket") or its pull request's on the local code host ("pull").
        Only a file the daemon itself names for that ticket is read, so no other can be."""
        daemon = self._daemon
        url: str | None = None
        if kind == "pull":
            found = [r for r in daemon.state.pull_requests.values() if r.identifier == wanted]
            url = found[0].url if found else None
        elif kind == "ticket":
            row = next((r for r in daemon.board.rows.values() if r.identifier == wanted), None)
            url = row.url if row is not None else None
        path = _file_of(url)
        if path is None:
            return None
        try:
            return str(path), path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def review_queue(self) -> dict[str, Any]:
        """The tickets waiting for a person (`symphony.daemon.review`), those running, and
        whether dispatch is paused: what the review page polls, without the whole snapshot."""
        from symphony.daemon.review import review_queue  # loaded with the review page

        daemon = self._daemon
        paused = daemon.state.paused
        return {
            "queue": review_queue(daemon.board, daemon.settings, daemon.state),
            "running": [
                {
                    "issue_identifier": entry.identifier,
                    "title": entry.issue.title,
                    "state": entry.issue.state,
                    "stage": entry.stage,
                    "run": entry.label,
                    "stopping": entry.stop_reason.value if entry.stop_reason else None,
                }
                for entry in daemon.state.running.values()
            ],
            "paused": paused.to_json() if paused is not None else None,
        }

    async def review_detail(self, wanted: str) -> dict[str, Any] | None:
        """One waiting ticket's review: its words, plan, evidence and diff."""
        from symphony.daemon.review import review_detail

        daemon = self._daemon
        return await review_detail(
            wanted, board=daemon.board, settings=daemon.settings, state=daemon.state,
            tracker=daemon.tracker, workspaces_of=self._workspaces_of,
            open_command=self.open_command, env=daemon.environ,
        )  # fmt: skip

    def _workspaces_of(self, issue_id: str) -> Workspaces:
        """The workspaces holding the issue's: its SSH host's, else this machine's."""
        daemon = self._daemon
        return daemon.places.on(daemon.state.workspace_hosts.get(issue_id, LOCAL))

    def workspace_path(self, identifier: str) -> Path:
        """Where the issue's workspace is (or would be) under the current settings."""
        return self._daemon.places.local.path_for(identifier)

    def open_command(self, path: Path) -> str:
        """The command that opens `path` in the configured editor (`symphony.workspace.editor`)."""
        daemon = self._daemon
        return open_command(editor_words(daemon.settings, daemon.environ), path)

    def notify_status(self) -> list[dict[str, Any]]:
        """Each notification channel's deliveries (pending, sent, failing)."""
        return self._daemon.notifier.status()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called after every change the loop makes (must not block)."""
        self._listeners.append(listener)

    def listeners(self) -> Sequence[Callable[[], None]]:
        return self._listeners

    # Asking

    def request_refresh(self, ids: Sequence[str] | None = None) -> None:
        """Poll now, or read only the tickets `ids` names (`Orchestrator.request_refresh`)."""
        self._daemon.request_refresh(ids)

    def webhook(self, kind: str) -> WebhookReceiver | None:
        """The receiver of the workflow's tracker for deliveries addressed to `kind`; None
        when that is another tracker or no webhook secret is configured."""
        tracker = self._daemon.tracker
        if kind != self._daemon.settings.tracker.kind or not isinstance(tracker, ReceivesWebhooks):
            return None
        return tracker.webhook()

    def follow_webhook(self, kind: str, headers: Mapping[str, str]) -> bool:
        """A verified delivery to `kind`: when it is the code host's word about a pull request,
        every followed pull request is read now; True when it was."""
        repository = self._daemon.settings.repository
        if repository is None or repository.kind.value != kind:
            return False
        try:
            adapter = code_host_adapter(kind)
        except CodeHostError:
            return False
        if not adapter.about_pull_requests(headers):
            return False
        self._daemon.put(FollowRequested())
        return True

    def pause(self, by: str) -> bool:
        """A person paused dispatch (the review surface); False when it already was."""
        return self._daemon.actions.pause(by)

    def resume(self, by: str) -> bool:
        """Dispatch again, and poll now; False when it was not paused."""
        return self._daemon.actions.resume(by)

    async def ticket_action(
        self, wanted: str, action: str, *, comment: str, by: str, tickets: object = None,
        comments: object = None,
    ) -> dict[str, Any] | review_actions.Refusal:  # fmt: skip
        """A person's action on one ticket (`symphony.daemon.actions`); line comments are
        read against the ticket's branch diff, for the code round each."""
        patches = await self._patches(wanted) if comments else {}
        return await self._daemon.actions.on_ticket(
            wanted, action, comment=comment, by=by, tickets=tickets,
            comments=comments, patches=patches,
        )  # fmt: skip

    async def _patches(self, wanted: str) -> dict[str, str]:
        daemon = self._daemon
        row = daemon.board.row(wanted)
        if row is None:
            return {}
        from symphony.daemon.review import branch_patches

        return await branch_patches(
            row.identifier, daemon.settings,
            self._workspaces_of(row.issue_id), daemon.environ,
        )  # fmt: skip


def _file_of(url: str | None) -> Path | None:
    """The Markdown file a `file://` URL names; None for any other URL."""
    if not url or not url.startswith("file://"):
        return None
    path = Path(unquote(urlsplit(url).path))
    return path if path.suffix == ".md" and path.is_file() else None
