"""What the daemon tells the operator beyond the core's decisions, in the log and the activity
feed: a ticket a person moved, and a model whose sessions have no price."""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from symphony.core.state import RunningEntry
from symphony.daemon.events import Clock
from symphony.observability.activity import Activity
from symphony.observability.board import PersonMove

log = structlog.get_logger("symphony.orchestrator")


class Notices:
    def __init__(self, activity: Activity, clock: Clock) -> None:
        self._activity = activity
        self._clock = clock
        self._unpriced_models: set[str] = set()

    def person_moves(self, moves: Iterable[PersonMove]) -> None:
        """Moves a poll found that no transition of the daemon explains."""
        for move in moves:
            log.info(
                "ticket moved by a person",
                issue_identifier=move.identifier,
                from_state=move.from_state,
                state=move.to_state,
            )
            self._activity.add(
                self._clock.wall(),
                "moved_by_person",
                f"a person moved it from {move.from_state} to {move.to_state}",
                issue_identifier=move.identifier,
            )

    def session_priced(self, entry: RunningEntry) -> None:
        """Say once per model that its sessions have no price: their cost shows as unknown."""
        if entry.price is not None:
            return
        model = entry.model or "(not named by the agent)"
        if model in self._unpriced_models:
            return
        self._unpriced_models.add(model)
        message = (
            f"no price for model {model}: its tokens are counted and its cost shows as "
            "unknown; add it under `pricing:` in WORKFLOW.md"
        )
        log.warning("model has no price", model=model, issue_identifier=entry.identifier)
        self._activity.add(
            self._clock.wall(), "unpriced_model", message, issue_identifier=entry.identifier,
            level="warning",
        )  # fmt: skip
