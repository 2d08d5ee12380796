"""A ticket's workspace claim (`worker.kubernetes.workspace: pvc:<claim>`): made by the daemon
with the ticket's first run, mounted by every run of the ticket after it, deleted when the
ticket ends, and only ever when this workflow made it.

The claim `<claim>-<ticket>` is read (`kubectl get pvc <name> -o json --ignore-not-found`)
before the run's pod is applied: a claim that is not there goes into the same `kubectl apply`
as the pod, first, labelled `app.kubernetes.io/managed-by: symphony` and with this workflow's
id (`symphony.dev/workflow`, the id its store keeps across restarts); one that is there is
mounted as it is, whoever made it. Deleting (`kubectl delete pvc/<name>`) is for this
workflow's claims alone: one a person made, or another workflow, is never deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from symphony.hosts.kubernetes.kubectl import ClusterFailed, Kubectl
from symphony.hosts.kubernetes.manifests import (
    ISSUE_ANNOTATION,
    MANAGED_BY,
    TICKET_ANNOTATION,
    TICKET_LABEL,
    WORKFLOW_LABEL,
    claim_manifest,
    claim_name,
    claim_selector,
    label_value,
)

log = structlog.get_logger("symphony.hosts")

ClaimUse = Literal["make", "ours", "foreign"]


class ClaimsFailed(ClusterFailed):
    """A claim could not be read or listed; `unreachable`: kubectl did not reach the cluster."""


@dataclass(frozen=True, slots=True)
class ListedClaim:
    """A claim of this workflow's, as `kubectl get pvc` lists it."""

    name: str
    ticket: str
    issue_id: str
    phase: str


def is_ours(item: Mapping[str, Any], workflow: str) -> bool:
    """Whether the claim `item` was made by this workflow (its labels say so)."""
    labels = (item.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY) == "symphony" and labels.get(WORKFLOW_LABEL) == label_value(
        workflow
    )


def claim_use(item: Mapping[str, Any] | None, workflow: str) -> ClaimUse:
    """What a run does with its ticket's claim as the cluster has it (None: not there):
    make it, mount the one this workflow made, or mount a person's (or another workflow's)
    as it is, which is then never deleted."""
    if item is None:
        return "make"
    return "ours" if is_ours(item, workflow) else "foreign"


class Claims:
    """This workflow's (`workflow`: its store's id) claims in the pods' namespace."""

    def __init__(self, kubectl: Kubectl, workflow: str) -> None:
        self.kubectl = kubectl
        self.workflow = workflow

    async def read(self, name: str) -> dict[str, Any] | None:
        """The claim `name` as the cluster has it; None when there is none."""
        got = await self.kubectl("get", "pvc", name, "-o", "json", "--ignore-not-found")
        if not got.ok:
            raise ClaimsFailed(
                f"cannot read claim {name}: {got.reason()}", unreachable=got.unreachable
            )
        if not got.out.strip():
            return None
        try:
            item = json.loads(got.out)
        except ValueError:
            raise ClaimsFailed(f"kubectl said something other than JSON of claim {name}") from None
        return item if isinstance(item, dict) else None

    async def to_make(self, ticket: str, issue_id: str) -> dict[str, Any] | None:
        """The claim to apply with the ticket's run's pod; None when the ticket's claim is
        there already (or the workspace is an `emptyDir`)."""
        made = claim_manifest(self.kubectl.settings, self.workflow, ticket, issue_id)
        if made is None:
            return None
        name = made["metadata"]["name"]
        use = claim_use(await self.read(name), self.workflow)
        if use == "make":
            return made
        if use == "foreign":
            log.info("the ticket's claim was not made by this workflow: mounted as it is, "
                     "never deleted", claim=name, ticket=ticket)  # fmt: skip
        return None

    async def listed(self) -> list[ListedClaim]:
        """This workflow's claims in the namespace, but those already being deleted."""
        got = await self.kubectl("get", "pvc", "-l", claim_selector(self.workflow), "-o", "json")
        if not got.ok:
            raise ClaimsFailed(f"cannot list claims: {got.reason()}", unreachable=got.unreachable)
        try:
            items = json.loads(got.out).get("items") or []
        except (ValueError, AttributeError):
            raise ClaimsFailed("kubectl listed claims as something other than JSON") from None
        return [
            _listed(item)
            for item in items
            if isinstance(item, dict)
            and is_ours(item, self.workflow)
            and not (item.get("metadata") or {}).get("deletionTimestamp")
        ]

    async def delete(self, *names: str) -> bool:
        """Delete the claims `names` (the cluster keeps a claim a pod still uses until that
        pod is gone); the caller has made sure they are this workflow's."""
        if not names:
            return True
        return await self.kubectl.delete("claims", names, [f"pvc/{name}" for name in names])

    async def remove_for(self, ticket: str) -> bool:
        """Delete the ticket's claim if this workflow made it; whether one was deleted. A
        claim it did not make is left as it is; a cluster that cannot be read is logged."""
        name = claim_name(self.kubectl.settings, ticket)
        if name is None:
            return False
        try:
            item = await self.read(name)
        except ClaimsFailed as exc:
            log.warning("the ticket's claim was not checked", claim=name, reason=exc.message)
            return False
        if item is None:
            return False
        if not is_ours(item, self.workflow):
            log.info("the ticket's claim was not made by this workflow: kept", claim=name)
            return False
        return await self.delete(name)


def _listed(item: Mapping[str, Any]) -> ListedClaim:
    metadata = item.get("metadata") or {}
    labels = metadata.get("labels") or {}
    notes = metadata.get("annotations") or {}
    return ListedClaim(
        name=str(metadata.get("name", "")),
        ticket=str(notes.get(TICKET_ANNOTATION) or labels.get(TICKET_LABEL, "")),
        issue_id=str(notes.get(ISSUE_ANNOTATION, "")),
        phase=str((item.get("status") or {}).get("phase", "Pending")),
    )


def describe_claims(
    listed: Sequence[ListedClaim],
    fates: Mapping[str, str | None] | None,
    states: Mapping[str, str],
) -> list[str]:
    """One line per claim of this workflow: what a start-up would do with it (`fates`, None
    when the tracker could not be read); `states`: its ticket's state, by ticket id."""
    lines = []
    for claim in listed:
        state = states.get(claim.issue_id)
        about = ", ".join(x for x in (f"ticket {claim.ticket}", state, claim.phase) if x)
        if fates is None:
            fate = "not judged: the tracker could not be read"
        else:
            why = fates.get(claim.name)
            fate = "kept" if why is None else f"deleted at the next start: {why}"
            if why is None and claim.issue_id and claim.issue_id not in states:
                fate = (
                    f"kept: the tracker no longer returns its ticket; delete pvc/{claim.name} "
                    "once its work is not needed"
                )
        lines.append(f"{claim.name} ({about}): {fate}")
    return lines
