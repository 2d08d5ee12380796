"""What a supervisor asks (systemd's watchdog, Kubernetes' probes): is the loop turning
(`/livez`), and can the daemon do its work (`/readyz`)?

Live is answered by the event loop itself: a handler that runs proves it turns. Ready needs a
first poll done, the store saving and the tracker answering at its last read; a WORKFLOW.md
rejected on reload is reported but leaves the daemon ready, since it runs on its last good
settings and a restart would not help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unready(snapshot: Mapping[str, Any]) -> list[str]:
    """Why a workflow's daemon is not ready, in words; empty when it is."""
    health = snapshot.get("health") or {}
    reasons = []
    if health.get("last_tick_at") is None:
        reasons.append("its first poll has not finished")
    if health.get("store_error"):
        reasons.append(f"its state cannot be saved: {health['store_error']}")
    if health.get("tracker_error"):
        reasons.append(f"its tracker did not answer at the last read: {health['tracker_error']}")
    return reasons


def notes(snapshot: Mapping[str, Any]) -> list[str]:
    """What is wrong without making it unready."""
    health = snapshot.get("health") or {}
    found = []
    if health.get("workflow_error"):
        where = health.get("workflow_error_path") or "WORKFLOW.md"
        since = health.get("workflow_error_since")
        when = f" at {since}" if since else ""
        found.append(
            f"{where} was rejected{when}; the daemon runs on its last good settings until it "
            f"is fixed: {health['workflow_error']}"
        )
    for limit in snapshot.get("limits") or []:
        found.append(f"{limit['says']}: no run starts on it until then")
    return found
