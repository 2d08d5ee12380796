"""A ticket's workspace claim (`workspace: pvc:<claim>`) against an in-memory `kubectl`: made
with the ticket's first pod when it is not there, mounted as it is when it is (this
workflow's or a person's), deleted when the ticket ends only when this workflow made it, and
swept at start-up by what the tracker says of each claim's ticket."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from symphony import core
from symphony.config.kubernetes import KubernetesSettings
from symphony.config.sandbox import Network
from symphony.daemon.cluster import delete_ended_claims
from symphony.daemon.reads import TrackerReads
from symphony.hosts.kubernetes.claims import describe_claims
from symphony.hosts.kubernetes.kubectl import Kubectl, KubectlResult
from symphony.hosts.kubernetes.manifests import claim_manifest
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.observability.activity import Activity
from symphony.observability.health import Health, TrackerRequests
from symphony.store import Store
from symphony.tracker.contract import TRACKER_STATUS, TrackerError
from tests.factories import make_issue, make_settings
from tests.fakes.clock import FakeClock
from tests.fakes.tracker import MemoryTracker

SETTINGS = KubernetesSettings(image="runner:1", namespace="agents", workspace_claim="ws")
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@dataclasses.dataclass
class Cluster:
    """The claims a namespace holds, and every command line kubectl was given."""

    claims: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    calls: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    applied: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)
    down: bool = False

    async def __call__(
        self, argv: Sequence[str], stdin: bytes | None, env: Any, timeout_s: float,
        answer_s: float | None = None,
    ) -> KubectlResult:  # fmt: skip
        args = [a for a in argv[argv.index("agents") + 1 :] if not a.startswith("--request")]
        self.calls.append(tuple(args))
        if self.down:
            return KubectlResult(1, "", "Unable to connect to the server: i/o timeout")
        if args[:2] == ["get", "pvc"] and args[2] == "-l":
            return KubectlResult(0, json.dumps({"items": list(self.claims.values())}), "")
        if args[:2] == ["get", "pvc"]:
            found = self.claims.get(args[2])
            return KubectlResult(0, json.dumps(found) if found else "", "")
        if args[:2] == ["get", "pod"]:
            return KubectlResult(0, json.dumps({"status": READY}), "")
        if args[0] == "apply":
            assert stdin is not None
            items = json.loads(stdin)["items"]
            self.applied.append(items)
            for item in items:
                if item["kind"] == "PersistentVolumeClaim":
                    self.claims[item["metadata"]["name"]] = item
            return KubectlResult(0, "", "")
        if args[0] == "delete":
            for thing in args[1:]:
                if thing.startswith("pvc/"):
                    self.claims.pop(thing.removeprefix("pvc/"), None)
        return KubectlResult(0, "", "")


def reads() -> TrackerReads:
    return TrackerReads(TrackerRequests(), Health(), Activity(), FakeClock())


def pods_on(cluster: Cluster, workflow: str = "wf-1", instance: str = "inst-2") -> Pods:
    return Pods(Kubectl(SETTINGS, {}, cluster), instance, poll_s=0, workflow=workflow)


def ours(ticket: str, issue_id: str, workflow: str = "wf-1") -> dict[str, Any]:
    made = claim_manifest(SETTINGS, workflow, ticket, issue_id)
    assert made is not None
    return made


def theirs(name: str) -> dict[str, Any]:
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "labels": {"a": "b"}}}


async def test_a_ticket_s_first_run_makes_its_claim_in_the_pod_s_apply() -> None:
    cluster = Cluster()
    await pods_on(cluster).start("ABC-1", "run-1", Network.NONE, issue_id="id-1")
    assert cluster.calls[0] == ("get", "pvc", "ws-abc-1", "-o", "json", "--ignore-not-found")
    (items,) = cluster.applied
    assert [i["kind"] for i in items] == ["PersistentVolumeClaim", "Pod", "NetworkPolicy"]
    claim = items[0]
    assert claim["metadata"]["labels"]["symphony.dev/workflow"] == "wf-1"
    assert claim["metadata"]["annotations"]["symphony.dev/issue-id"] == "id-1"
    volumes = {v["name"]: v for v in items[1]["spec"]["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "ws-abc-1"}


async def test_a_later_run_mounts_the_claim_there_whoever_made_it() -> None:
    for there in (ours("ABC-1", "id-1"), ours("ABC-1", "id-1", "wf-other"), theirs("ws-abc-1")):
        cluster = Cluster({"ws-abc-1": there})
        await pods_on(cluster, instance="inst-3").start("ABC-1", "run-2", Network.NONE)
        (items,) = cluster.applied
        assert [i["kind"] for i in items] == [
            "Pod",
            "NetworkPolicy",
        ]  # nothing made, nothing changed
        assert cluster.claims["ws-abc-1"] is there


async def test_a_claim_that_cannot_be_read_fails_the_start_before_anything_is_applied() -> None:
    cluster = Cluster(down=True)
    try:
        await pods_on(cluster).start("ABC-1", "run-1", Network.NONE)
    except PodFailed as exc:
        assert exc.unreachable and "cannot read claim ws-abc-1" in exc.message
    else:
        raise AssertionError("the start did not fail")
    assert cluster.applied == []


async def test_a_ticket_that_ends_loses_only_a_claim_this_workflow_made() -> None:
    cluster = Cluster({"ws-abc-1": ours("ABC-1", "id-1"), "ws-abc-2": theirs("ws-abc-2"),
                       "ws-abc-3": ours("ABC-3", "id-3", "wf-other")})  # fmt: skip
    claims = pods_on(cluster).claims
    assert await claims.remove_for("ABC-1") is True
    assert ("delete", "pvc/ws-abc-1", "--ignore-not-found", "--wait=false") in cluster.calls
    assert await claims.remove_for("ABC-2") is False
    assert await claims.remove_for("ABC-3") is False
    assert await claims.remove_for("ABC-4") is False  # none there
    assert sorted(cluster.claims) == ["ws-abc-2", "ws-abc-3"]
    assert [c for c in cluster.calls if c[0] == "delete"] == [
        ("delete", "pvc/ws-abc-1", "--ignore-not-found", "--wait=false")
    ]
    cluster.down = True
    assert await claims.remove_for("ABC-2") is False  # a cluster that is down: logged, kept


def test_a_claim_goes_when_its_ticket_is_terminal_and_stays_otherwise() -> None:
    tracker = make_settings().tracker
    found = [make_issue("ABC-1", state="In Progress"), make_issue("ABC-2", state="Done"),
             make_issue("ABC-4", state="Human Review")]  # fmt: skip
    claims = {"ws-abc-1": "id-ABC-1", "ws-abc-2": "id-ABC-2", "ws-abc-3": "id-ABC-3",
              "ws-abc-4": "id-ABC-4", "ws-odd": ""}  # fmt: skip
    assert core.claim_fates(claims, found, tracker) == {
        "ws-abc-1": None, "ws-abc-2": "ticket terminal", "ws-abc-3": None,
        "ws-abc-4": None, "ws-odd": None,
    }  # fmt: skip


async def test_start_up_deletes_this_workflow_s_claims_of_terminal_tickets_only() -> None:
    cluster = Cluster({
        "ws-abc-1": ours("ABC-1", "id-ABC-1"), "ws-abc-2": ours("ABC-2", "id-ABC-2"),
        "ws-abc-3": ours("ABC-3", "id-ABC-3"), "ws-abc-9": ours("ABC-9", "id-ABC-9", "wf-other"),
        "ws-mine": theirs("ws-mine"),
    })  # fmt: skip
    tracker = MemoryTracker(make_issue("ABC-1", state="Todo"), make_issue("ABC-2", state="Done"))
    listed = await pods_on(cluster).claims.listed()
    assert [c.name for c in listed] == ["ws-abc-1", "ws-abc-2", "ws-abc-3"]
    lines = describe_claims(
        listed,
        core.claim_fates({c.name: c.issue_id for c in listed}, list(tracker.issues.values()),
                         make_settings().tracker),
        {i.id: i.state for i in tracker.issues.values()},
    )  # fmt: skip
    assert lines == [
        "ws-abc-1 (ticket ABC-1, Todo, Pending): kept",
        "ws-abc-2 (ticket ABC-2, Done, Pending): deleted at the next start: ticket terminal",
        "ws-abc-3 (ticket ABC-3, Pending): kept: the tracker no longer returns its ticket; "
        "delete pvc/ws-abc-3 once its work is not needed",
    ]
    loop_reads = reads()
    deleted = await delete_ended_claims(loop_reads, tracker, make_settings(), pods_on(cluster))
    assert deleted == ["ws-abc-2"]  # ABC-3's may hold unpushed work for a ticket that comes back
    assert sorted(cluster.claims) == ["ws-abc-1", "ws-abc-3", "ws-abc-9", "ws-mine"]


async def test_start_up_deletes_nothing_when_the_tracker_cannot_be_read() -> None:
    class Failing(MemoryTracker):
        async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Any]:
            raise TrackerError(TRACKER_STATUS, "503")

    cluster = Cluster({"ws-abc-2": ours("ABC-2", "id-ABC-2")})
    loop_reads = reads()
    assert await delete_ended_claims(loop_reads, Failing(), make_settings(), pods_on(cluster)) == []
    assert list(cluster.claims) == ["ws-abc-2"]
    cluster.down = True  # a cluster that cannot be listed: nothing either
    assert await delete_ended_claims(loop_reads, Failing(), make_settings(), pods_on(cluster)) == []


def test_the_store_s_workflow_id_is_made_once_and_kept_across_daemons(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store, _ = Store.open(path)
    reader = Store.read_only(path)
    assert reader is not None and reader.workflow_id() is None  # a reader makes none
    reader.close()
    first = store.workflow_id()
    assert first and store.workflow_id() == first
    store.close()
    again, _ = Store.open(path)
    assert again.workflow_id() == first
    again.close()
    reader = Store.read_only(path)
    assert reader is not None and reader.workflow_id() == first
    reader.close()
