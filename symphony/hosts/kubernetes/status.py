"""What a pod's status (`kubectl get pod -o json`) says about a run that waits for it: ready
for commands, still starting, waiting for room in the cluster, or never going to run.

Only a pod the scheduler cannot place for want of room (`PodScheduled` False, reason
`Unschedulable`: `0/3 nodes are available: 3 Insufficient cpu.`) is a wait the run shows as
such (`Pending: Insufficient cpu`) and sits out however long it takes: the cluster places it
once other pods end. An image that cannot be pulled or a container that ended is a failure
of the run, said in the cluster's words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

PodKind = Literal["ready", "starting", "waiting", "failed"]

_IMAGE_FAILURES = (
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
)  # fmt: skip
_SHORTAGE = re.compile(
    r"(Insufficient [\w/-]+(?:\.[\w/-]+)*|Too many pods|didn't match [^,.]+|"
    r"had untolerated taint[^,.]*|had volume node affinity conflict)"
)

_MISSING_CLAIM = re.compile(r'persistentvolumeclaim "[^"]+" not found')


@dataclass(frozen=True, slots=True)
class PodState:
    """What a pod's status means for the run waiting for it, and the words the run shows for it."""

    kind: PodKind
    message: str = ""


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = status.get("conditions") or []
    return {c.get("type", ""): c for c in found if isinstance(c, Mapping)}


def unschedulable_reason(message: str) -> str:
    """The scheduler's message shortened to what is missing (`Insufficient cpu`, several
    joined with `, `); the message itself when it names nothing known."""
    found: list[str] = []
    for match in _SHORTAGE.findall(message):
        if match not in found:
            found.append(match)
    return ", ".join(found) or message.strip() or "Unschedulable"


def pod_state(pod: Mapping[str, Any]) -> PodState:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    conditions = _conditions(status)
    if phase in ("Failed", "Succeeded"):
        why = status.get("message") or status.get("reason") or phase
        return PodState("failed", f"the pod ended ({phase}): {why}")
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in _IMAGE_FAILURES:
            return PodState("failed", f"{waiting['reason']}: {waiting.get('message', '')}".strip())
        terminated = state.get("terminated")
        if terminated:
            reason = terminated.get("reason") or f"exit {terminated.get('exitCode')}"
            return PodState("failed", f"the pod's container ended: {reason}")
    ready = conditions.get("Ready", {})
    if phase == "Running" and ready.get("status") == "True":
        return PodState("ready")
    scheduled = conditions.get("PodScheduled", {})
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        said = scheduled.get("message", "")
        missing = _MISSING_CLAIM.search(said)
        if missing:  # no other pod's end makes room for it: the run could wait for ever
            return PodState("failed", f"{missing.group(0)} (worker.kubernetes.workspace)")
        return PodState("waiting", f"Pending: {unschedulable_reason(said)}")
    return PodState("starting", f"{phase}")
