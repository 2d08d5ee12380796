"""The cluster of `worker.kubernetes` on the status surfaces: a row in `/api/v1/state`'s
`hosts` (context, namespace, pods running and pending with what they lack, `max_pods`,
whether the last kubectl reached the cluster) and the host series of `/metrics` with
host="kubernetes" plus `symphony_pods_pending`, from what the daemon's kubectl last heard."""

from __future__ import annotations

import asyncio
from pathlib import Path

from symphony import core
from symphony.config.load import load_settings
from symphony.config.sandbox import Network
from symphony.daemon.places import Places
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.pods import PodFailed, Pods
from symphony.observability.metrics import _Exposition, _host_metrics
from symphony.observability.snapshot import host_rows
from tests.harness import Board
from tests.hosts.test_kubectl_hangs import Hanging
from tests.hosts.test_kubectl_host import READY, UNSCHEDULABLE, FakeKubectl, statuses


def places_of(tmp_path: Path, environ: dict[str, str], **cluster: object) -> Places:
    tmp_path.mkdir(parents=True, exist_ok=True)
    board = Board(tmp_path)
    board.write_workflow(worker={"kubernetes": {
        "image": "runner:1", "context": "lab", "namespace": "agents", "max_pods": 3, **cluster,
    }})  # fmt: skip
    settings = load_settings(board.workflow, {"HOME": str(tmp_path)})
    return Places(settings, environ, [], "inst-1")


def rows(places: Places) -> list[dict[str, object]]:
    return host_rows(core.SchedulerState(), places._settings, 0.0, {}, places.cluster())


def metrics(found: list[dict[str, object]]) -> str:
    out = _Exposition()
    _host_metrics(out, found)
    return out.text()


def test_pods_pending_for_room_and_running_show_on_the_cluster_s_row(tmp_path: Path) -> None:
    places = places_of(tmp_path, {})
    assert places.pods is not None
    fake = FakeKubectl([statuses(UNSCHEDULABLE, UNSCHEDULABLE, READY)])
    kubectl = Kubectl(places.pods.kubectl.settings, {}, fake, places.pods.kubectl.status)
    pods = Pods(kubectl, "inst-1", poll_s=0)
    seen: list[dict[str, object]] = []
    asyncio.run(pods.start("ABC-1", "r", Network.FULL, lambda _: seen.extend(rows(places))))
    (waiting,) = seen
    assert waiting["host"] == "kubernetes" and waiting["kind"] == "kubernetes"
    assert (waiting["context"], waiting["namespace"], waiting["max_pods"]) == ("lab", "agents", 3)
    assert (waiting["running"], waiting["pending"]) == (0, 1)
    assert waiting["pending_reasons"] == ["Insufficient cpu"]
    assert waiting["reached"] is True and waiting["status"] == "up"
    (ready,) = rows(places)
    assert (ready["running"], ready["pending"], ready["capacity"]) == (1, 0, 3)
    said = metrics([waiting])
    assert 'symphony_host_up{host="kubernetes"} 1' in said
    assert 'symphony_host_capacity{host="kubernetes"} 3' in said
    assert 'symphony_pods_pending{host="kubernetes"} 1' in said
    (name,) = kubectl.status.running
    asyncio.run(pods.delete(name))
    assert rows(places)[0]["running"] == 0  # a deleted pod is no longer counted


def test_a_cluster_that_did_not_answer_is_down_with_its_words(tmp_path: Path) -> None:
    (tmp_path / "fake").mkdir()
    fake = Hanging(tmp_path / "fake")
    fake.hang("get pods")
    places = places_of(tmp_path / "wf", fake.env, request_timeout_ms=200)
    assert places.pods is not None
    assert rows(places)[0]["reached"] is None  # nothing asked yet: shown up
    asyncio.run(_listing(places.pods))
    (row,) = rows(places)
    assert row["reached"] is False and row["status"] == "down"
    assert "the cluster (context lab, namespace agents) did not answer within 1.4 s" in str(
        row["error"]
    )
    assert row["checked_at"] is not None
    assert 'symphony_host_up{host="kubernetes"} 0' in metrics([row])
    fake.hang("nothing")
    asyncio.run(_listing(places.pods))
    assert rows(places)[0]["reached"] is True and rows(places)[0]["error"] is None


async def _listing(pods: Pods) -> None:
    try:
        await pods.listed()
    except PodFailed:  # the status is what is looked at
        return


def test_a_reload_of_the_same_cluster_keeps_counting_its_pods(tmp_path: Path) -> None:
    first = places_of(tmp_path / "a", {})
    assert first.pods is not None
    first.pods.kubectl.status.running.add("symphony-abc-1-x")
    again = Places(first._settings, {}, [], "inst-1", previous=first)
    assert again.cluster() is not None and again.cluster()["running"] == 1  # type: ignore[index]
    moved = places_of(tmp_path / "b", {}, namespace="elsewhere")
    other = Places(moved._settings, {}, [], "inst-1", previous=first)
    assert other.cluster()["running"] == 0  # type: ignore[index]
