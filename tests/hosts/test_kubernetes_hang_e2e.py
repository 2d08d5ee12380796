"""A cluster that stops answering some of the daemon's kubectl commands, through the real CLI
and the podman-backed shim: a `kubectl` first on PATH hangs (sleeps forever) for the command
lines a test names and hands the others to the shim. One ticket's pod wait hangs and another
ticket's agent exec hangs; the third ticket goes through meanwhile, the hung runs fail and are
retried, their pods are deleted, and the daemon stops when asked."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.harness import Board, Daemon, wait_until
from tests.hosts.test_kubernetes_e2e import SHIM, Cluster, cluster, pods_of, write_workflow

pytestmark = pytest.mark.slow
__all__ = ["cluster"]

HANGING = f"""#!/bin/sh
# The shim, but for command lines matching the pattern in $KUBECONFIG.hang: those never end.
line=$(printf '%s' "$*" | tr '\\n' ' ')
if [ -s "$KUBECONFIG.hang" ] && printf '%s\\n' "$line" | grep -Eq -f "$KUBECONFIG.hang"; then
  echo "$*" >> "$KUBECONFIG.hung"
  exec sleep 100000
fi
exec {SHIM}/kubectl "$@"
"""


def test_hung_kubectl_commands_fail_their_runs_and_the_daemon_goes_on(
    tmp_path: Path, cluster: Cluster
) -> None:
    lab = cluster
    wrapper = lab.base / "hanging"
    wrapper.mkdir()
    (wrapper / "kubectl").write_text(HANGING)
    (wrapper / "kubectl").chmod(0o755)
    # ABC-1's pod is never said to be ready; ABC-2's agent never starts (its exec hangs).
    Path(f"{lab.kubeconfig}.hang").write_text(
        "get pod symphony-abc-1-\nexec -i symphony-abc-2-.* bash stdin$\n"
    )
    board = Board(tmp_path)
    for n in range(1, 4):
        board.ticket(f"ABC-{n}", priority=n)
    write_workflow(board, lab, max_pods=3)
    text = board.workflow.read_text()
    config = text.split("---")[1]
    config = config.replace("namespace: agents", "namespace: agents\n    request_timeout_ms: 1500")
    config = config.replace(
        "read_timeout_ms: 20000", "read_timeout_ms: 60000\n  stall_timeout_ms: 8000"
    )
    board.workflow.write_text(f"---{config}---{text.split('---', 2)[2]}")
    env = lab.env(
        FAKE_AGENT_SCENARIO="tool", FAKE_AGENT_TOOL="local_move_issue",
        FAKE_AGENT_TOOL_ARGS=json.dumps({"state": "Human Review"}),
    )  # fmt: skip
    env["PATH"] = f"{wrapper}:{env['PATH']}"
    daemon = Daemon(board, env)
    started = time.monotonic()
    try:
        assert wait_until(lambda: board.state_of("ABC-3") == "Human Review", 60), "".join(
            daemon.lines
        )
        daemon.wait_for("retrying", timeout=60)
        daemon.wait_for('"pods deleted" issue_id=ABC-2', timeout=60)
        stopping = time.monotonic()
    finally:
        assert daemon.stop() == 0
    stopped_in = time.monotonic() - stopping
    log = "".join(daemon.lines)
    # The pod wait: killed after its deadline, the run host_unreachable, naming the cluster.
    assert re.search(
        r"host_unreachable.*the cluster \(context kubectl's current context, namespace agents\) "
        r"did not answer within 4 s",
        log,
    ), log
    # The agent's exec: long-lived by nature, caught as a stall.
    assert re.search(r'no agent activity for \d+s \(stall_timeout_ms=8000\)" issue_id=ABC-2', log)
    assert re.search(r'"pods deleted" issue_id=ABC-2 .*symphony-abc-2-', log), log
    assert "Human Review" not in (board.state_of("ABC-1"), board.state_of("ABC-2")), log
    hung = Path(f"{lab.kubeconfig}.hung").read_text()
    assert "get pod symphony-abc-1-" in hung and "exec -i symphony-abc-2-" in hung
    assert wait_until(lambda: not pods_of(lab), 20), pods_of(lab)  # every pod deleted
    print(f"stopped in {stopped_in:.1f} s; {time.monotonic() - started:.1f} s in all")
