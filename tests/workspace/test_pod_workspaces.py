"""The workspace of a run in its own pod, against an in-memory `kubectl`: the pod made and
waited for first, the checkout cloned with the code host's token sent on stdin only, hooks
run in the pod, and the pod deleted when the run ends, whatever ended it."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from symphony.base.errors import ErrorCategory
from symphony.config.sandbox import Network
from symphony.config.sections import HooksSettings
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import Kubectl, KubectlResult
from symphony.hosts.kubernetes.manifests import pod_name
from symphony.hosts.kubernetes.pods import Pods
from symphony.workspace.local import Workspace, WorkspaceError
from symphony.workspace.pod import _CLONE, CloneSource, PodWorkspaces
from tests.daemon.test_pod_publish import here, pod_workspace
from tests.hosts.test_kubectl_host import READY, SETTINGS, FakeKubectl, statuses

TOKEN = "ghp_pod_clone_token_1234"
NO_HOOKS = HooksSettings()


def in_pod(
    fake: FakeKubectl, hooks: HooksSettings = NO_HOOKS, clone: CloneSource | None = None
) -> PodWorkspaces:
    kubectl = Kubectl(SETTINGS, {}, fake)
    pods = Pods(kubectl, "inst", poll_s=0)
    host = KubectlHost(kubectl, pod_name("inst", "ABC-1", "run-1"))
    return PodWorkspaces(pods, host, hooks, env={"A": "1"}, ticket="ABC-1", run="run-1",
                         network=Network.NONE, clone=clone)  # fmt: skip


def reached(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
    """Every command in the pod runs and says so, as the wrapper does."""
    if "exec" not in argv:
        return None
    out = "0123456789abcdef0123456789abcdef01234567\n" if "rev-parse" in " ".join(argv) else ""
    return KubectlResult(0, out, "symphony-remote-pgid 7\n")


def test_the_checkout_is_cloned_in_the_pod_with_the_token_on_stdin_only() -> None:
    fake = FakeKubectl([statuses(READY), reached])
    clone = CloneSource("https://github.com/acme/app.git", "symphony/{{ issue.identifier }}",
                        "main", TOKEN, "x-access-token")  # fmt: skip
    workspaces = in_pod(fake, HooksSettings(after_create="make deps"), clone)
    workspace = asyncio.run(workspaces.prepare("ABC-1"))
    assert str(workspace.path) == "/workspace/ABC-1" and workspace.created_now
    assert workspace.base == "0123456789abcdef0123456789abcdef01234567"
    # The folder, the clone, the hook, the start commit.
    assert fake.verbs() == ["apply", "get", "exec", "exec", "exec", "exec"]
    for argv, _ in fake.calls:
        assert TOKEN not in " ".join(argv)
    _, sent = fake.calls[3]
    assert sent is not None and base64.b64encode(TOKEN.encode()) in sent
    assert base64.b64encode(b"symphony/ABC-1") in sent  # the ticket's branch
    assert "make deps" in fake.calls[4][0]


def test_the_pod_is_deleted_when_the_run_ends_even_if_after_run_fails() -> None:
    def after_run_fails(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
        if "exec" in argv and "cleanup" in argv:
            return KubectlResult(3, "", "symphony-remote-pgid 9\n")
        return None

    fake = FakeKubectl([statuses(READY), after_run_fails, reached])
    workspaces = in_pod(fake, HooksSettings(after_run="cleanup"))
    workspace = asyncio.run(workspaces.prepare("ABC-1"))
    asyncio.run(workspaces.after_run(workspace))
    assert fake.verbs()[-1] == "delete"
    name = pod_name("inst", "ABC-1", "run-1")
    assert f"pod/{name}" in fake.calls[-1][0]


def test_a_failed_checkout_fails_the_workspace_and_leaves_no_pod() -> None:
    def clone_fails(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
        if "exec" in argv and "clone" in " ".join(argv):
            return KubectlResult(128, "", f"symphony-remote-pgid 7\nfatal: auth {TOKEN}\n")
        return None

    fake = FakeKubectl([statuses(READY), clone_fails, reached])
    clone = CloneSource("https://github.com/acme/app.git", "b", None, TOKEN, "u")
    with pytest.raises(WorkspaceError) as failed:
        asyncio.run(in_pod(fake, clone=clone).prepare("ABC-1"))
    assert failed.value.category is ErrorCategory.WORKSPACE_CREATE_FAILED
    assert TOKEN not in str(failed.value)
    assert fake.verbs()[-1] == "delete"


def test_a_cluster_out_of_reach_is_host_unreachable_and_retried() -> None:
    refused = KubectlResult(1, "", "Unable to connect to the server: connection refused")
    fake = FakeKubectl([lambda argv, _: refused if "apply" in argv else None])
    with pytest.raises(WorkspaceError) as failed:
        asyncio.run(in_pod(fake).prepare("ABC-1"))
    assert failed.value.category is ErrorCategory.HOST_UNREACHABLE
    assert fake.verbs() == ["apply", "delete"]


def _git(*args: str, cwd: Path | None = None) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    done = subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True,
                          text=True)  # fmt: skip
    return done.stdout.strip()


def _checkout(folder: Path, bare: Path) -> None:
    folder.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(folder.parent), "SYMPHONY_CLONE_URL": str(bare),
           "SYMPHONY_CLONE_TOKEN": "", "SYMPHONY_CLONE_USER": "", "SYMPHONY_CLONE_BASE": "main",
           "SYMPHONY_BRANCH": "agent/ABC-1", "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip
    subprocess.run(["sh", "-c", _CLONE], cwd=folder, env=env, check=True, capture_output=True)


def test_a_new_pod_goes_on_from_the_branch_an_earlier_run_pushed(tmp_path: Path) -> None:
    seed, bare = tmp_path / "seed", tmp_path / "remote.git"
    _git("init", "-q", "-b", "main", str(seed))
    (seed / "README").write_text("hello\n")
    _git("add", "README", cwd=seed)
    _git("commit", "-qm", "the start", cwd=seed)
    start = _git("rev-parse", "HEAD", cwd=seed)
    _git("clone", "-q", "--bare", str(seed), str(bare))
    first = tmp_path / "first"
    _checkout(first, bare)  # nothing pushed yet: the branch starts at the base
    assert _git("rev-parse", "HEAD", cwd=first) == start
    assert not (first / ".git" / "symphony-start").exists()
    (first / "README").write_text("hello, world\n")
    _git("commit", "-qam", "the agent's work", cwd=first)
    _git("push", "-q", str(bare), "HEAD:refs/heads/agent/ABC-1", cwd=first)
    pushed = _git("rev-parse", "HEAD", cwd=first)
    fix = tmp_path / "fix"
    _checkout(fix, bare)  # a fix run's pod: the pushed branch, measured from the base
    assert _git("branch", "--show-current", cwd=fix) == "agent/ABC-1"
    assert _git("rev-parse", "HEAD", cwd=fix) == pushed
    assert (fix / ".git" / "symphony-start").read_text().strip() == start


async def test_a_hand_off_keeps_its_evidence_and_diff_here_until_the_ticket_is_removed(
    tmp_path: Path,
) -> None:
    _, work = pod_workspace(tmp_path)  # stands for the pod's workspace
    base = _git("rev-parse", "main", cwd=work)
    kept = tmp_path / "kept"
    kubectl = Kubectl(SETTINGS, {}, here(tmp_path))
    host = KubectlHost(kubectl, pod_name("inst", "ABC-1", "run-1"))
    workspaces = PodWorkspaces(Pods(kubectl, "inst", poll_s=0), host, NO_HOOKS, env={},
                               ticket="A-1", run="run-1", network=Network.NONE,
                               kept=kept)  # fmt: skip
    assert not workspaces.outlives_run
    workspace = Workspace(path=work, key="A-1", created_now=False, identifier="A-1")
    await workspaces.keep_for_review("A-1", workspace, base, {})
    await workspaces.write_evidence("A-1", {"workspace": {"base": base}})
    # The pod has gone: the review page reads what the hand-off kept on this machine.
    gone = PodWorkspaces(Pods(kubectl, "inst"), KubectlHost(kubectl, "x"), NO_HOOKS, env={},
                         ticket="", run="", network=Network.NONE, kept=kept)  # fmt: skip
    assert await gone.read_evidence("A-1") == {"workspace": {"base": base}}
    diff = await gone.branch_diff("A-1", base, {})
    assert diff is not None and [f.path for f in diff.files] == ["calc.py"]
    assert (
        diff.files[0].status == "added" and diff.files[0].patch and "+fine" in diff.files[0].patch
    )
    assert await gone.remove("A-1") and not (kept / "A-1").exists()
    assert await gone.read_evidence("A-1") is None and not await gone.remove("A-1")


async def test_a_hand_off_in_a_pod_is_checked_against_the_base_its_clone_fetched() -> None:
    clone = CloneSource("https://github.com/acme/app.git", "b", "main")
    target = await in_pod(FakeKubectl(), clone=clone).merge_target()
    assert target == ("origin/main", "refs/remotes/origin/main")
    assert await in_pod(FakeKubectl()).merge_target() is None
    without_base = CloneSource("https://github.com/acme/app.git", "b")
    assert await in_pod(FakeKubectl(), clone=without_base).merge_target() is None
