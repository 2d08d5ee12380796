"""Publishing from a run's pod, whose workspace ends with the run: the hand-off pushes the
ticket's branch in the pod with the daemon's token on that command's stdin, and publishing
opens the pull request from the pushed branch with no workspace left. The in-memory `kubectl`
runs each `exec` here, in a folder standing for the pod's workspace, so the scripts are real."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from symphony.base.secrets import SecretMasker
from symphony.config.codex import CodexSettings
from symphony.config.repository import CodeHostKind, PublishSettings, RepositorySettings
from symphony.config.sections import HooksSettings
from symphony.config.stages import StageMachine
from symphony.core.stage_outcomes import PublishIntent, RunPush
from symphony.daemon.publish import Published, Publisher, Refused, Suspected, push_before_end
from symphony.daemon.runner import AttemptContext, run_attempt
from symphony.hosts.kubernetes.host import KubectlHost
from symphony.hosts.kubernetes.kubectl import Kubectl, KubectlResult
from symphony.workspace.git import Git
from symphony.workspace.local import Workspace, WorkspaceManager
from tests.daemon.test_runner import MovingTracker
from tests.factories import make_issue, make_settings, make_stage
from tests.fakes.code_host import MemoryCodeHost
from tests.harness import FAKE_AGENT
from tests.hosts.test_kubectl_host import SETTINGS, FakeKubectl

TOKEN = "ghp_pod_push_token_5678"
CANARY = "cnr99887766554433221100ffee"
ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test",
       "PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def pod_workspace(tmp_path: Path, message: str = "Fix it") -> tuple[Path, Path]:
    """A bare remote with `main`, and the pod's checkout on the ticket's branch with one
    commit of the agent's."""
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    git(work, "commit", "-q", "--allow-empty", "-m", "start")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    git(work, "fetch", "-q", "origin")
    git(work, "checkout", "-q", "-b", "symphony/A-1")
    (work / "calc.py").write_text("fine\n")
    git(work, "add", "calc.py")
    git(work, "commit", "-q", "-m", message)
    return remote, work


def here(home: Path) -> FakeKubectl:
    """`kubectl exec` run on this machine: what follows `--` with the exec's stdin."""

    def run(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
        if "exec" not in argv:
            return None
        done = subprocess.run(
            list(argv[list(argv).index("--") + 1 :]), input=stdin or b"", capture_output=True,
            env={"PATH": os.environ["PATH"], "HOME": str(home)}, timeout=60,
        )  # fmt: skip
        return KubectlResult(done.returncode, done.stdout.decode(), done.stderr.decode())

    return FakeKubectl([run])


def repository(remote: Path) -> RepositorySettings:
    return RepositorySettings(CodeHostKind.GITHUB, "acme/app", "", TOKEN, None, str(remote))


async def pushed_from_pod(
    tmp_path: Path, work: Path, remote: Path, fake: FakeKubectl, head: str | None = None
) -> RunPush:
    pod = KubectlHost(Kubectl(SETTINGS, {}, fake), "symphony-a-1-0123")
    return await push_before_end(
        repository(remote), work, head, base="main", git=Git(pod), env=ENV,
        masker=SecretMasker(), canaries=(CANARY,), pause_s=0,
    )  # fmt: skip


def intent(pushed: RunPush) -> PublishIntent:
    return PublishIntent("{{ issue.identifier }}", "Done.", base="main", branch=pushed.branch,
                         head=pushed.sha, pushed=pushed)  # fmt: skip


async def test_the_hand_off_pushes_in_the_pod_and_the_pull_request_needs_no_workspace(
    tmp_path: Path,
) -> None:
    remote, work = pod_workspace(tmp_path)
    fake = here(tmp_path)
    pushed = await pushed_from_pod(tmp_path, work, remote, fake)
    head = git(work, "rev-parse", "HEAD")
    assert pushed == RunPush("symphony/A-1", head)
    assert git(remote, "rev-parse", "refs/heads/symphony/A-1") == head
    # The token went to the push in the pod on its stdin, never on a command line.
    assert all(TOKEN not in " ".join(argv) for argv, _ in fake.calls)
    assert any(base64.b64encode(TOKEN.encode()) in (sent or b"") for _, sent in fake.calls)
    # The workspace is gone with its pod: publishing opens the pull request all the same.
    host = MemoryCodeHost(remote=remote)
    publisher = Publisher(host, repository(remote), ENV, SecretMasker(), canaries=(CANARY,))
    published = await publisher.publish(None, intent(pushed), make_issue("A-1"))
    assert isinstance(published, Published) and published.opened
    assert published.pull.branch == "symphony/A-1" and published.pull.head_sha == head


async def test_commits_carrying_the_canary_are_not_pushed_from_the_pod(tmp_path: Path) -> None:
    remote, work = pod_workspace(tmp_path, message=f"Fix it {CANARY}")
    pushed = await pushed_from_pod(tmp_path, work, remote, here(tmp_path))
    assert pushed == RunPush("symphony/A-1", suspected=True)
    assert subprocess.run(["git", "-C", str(remote), "rev-parse", "--verify", "--quiet",
                           "refs/heads/symphony/A-1"]).returncode != 0  # fmt: skip
    host = MemoryCodeHost(remote=remote)
    publisher = Publisher(host, repository(remote), ENV, SecretMasker(), canaries=(CANARY,))
    published = await publisher.publish(None, intent(pushed), make_issue("A-1"))
    assert isinstance(published, Suspected) and CANARY not in published.why
    assert host.pulls == {}


async def test_a_push_the_remote_refuses_is_refused_at_publishing_with_its_words(
    tmp_path: Path,
) -> None:
    remote, work = pod_workspace(tmp_path)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branch symphony/A-1 is protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    pushed = await pushed_from_pod(tmp_path, work, remote, here(tmp_path))
    assert pushed.branch == "symphony/A-1" and not pushed.sha
    assert "branch symphony/A-1 is protected" in pushed.refused and TOKEN not in pushed.refused
    host = MemoryCodeHost(remote=remote)
    publisher = Publisher(host, repository(remote), ENV, SecretMasker())
    published = await publisher.publish(None, intent(pushed), make_issue("A-1"))
    assert isinstance(published, Refused) and "pod" in published.why
    assert "protected" in published.why and host.pulls == {}


async def test_a_pod_that_cannot_be_reached_pushes_nothing_and_says_so(tmp_path: Path) -> None:
    remote, work = pod_workspace(tmp_path)
    gone = FakeKubectl([lambda argv, _: KubectlResult(1, "", "Error from server (NotFound)")])
    pushed = await pushed_from_pod(tmp_path, work, remote, gone)
    assert pushed == RunPush(refused=pushed.refused) and "could not be read" in pushed.refused
    assert "NotFound" in pushed.refused


async def test_a_push_that_may_pass_later_is_tried_again_in_the_pod(tmp_path: Path) -> None:
    remote, work = pod_workspace(tmp_path)
    runs = here(tmp_path)
    pushes = 0

    def flaky(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
        nonlocal pushes
        if "--porcelain" not in " ".join(argv):
            return None
        pushes += 1
        return (
            KubectlResult(128, "", "symphony-remote-pgid 5\nfatal: unable to access\n")
            if (pushes == 1)
            else None
        )

    runs.handlers.insert(0, flaky)
    pushed = await pushed_from_pod(tmp_path, work, remote, runs)
    assert pushes == 2 and pushed == RunPush("symphony/A-1", git(work, "rev-parse", "HEAD"))


class EndingWithRun(WorkspaceManager):
    """This machine's workspaces standing for a pod's: gone after the run, so a hand-off does
    what publishing needs before it ends (git runs here, as it would in the pod)."""

    outlives_run = False

    def __init__(self, *args: Any, record: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept: list[tuple[str, str]] = []
        self.record = record
        self.agent_alive_at_end: bool | None = None

    async def end_leftovers(self) -> None:
        # (Never `kill -1` here: this machine stands for the pod.) The agent has stopped.
        pid = json.loads(self.record.read_text().splitlines()[0])["pid"]
        try:
            os.kill(pid, 0)
            self.agent_alive_at_end = True
        except ProcessLookupError:
            self.agent_alive_at_end = False

    async def keep_for_review(
        self, identifier: str, workspace: Workspace, base: str, env: Mapping[str, str]
    ) -> None:
        assert self.agent_alive_at_end is False, "kept before the leftovers were ended"
        self.kept.append((identifier, base))


async def hand_off(tmp_path: Path, publish: PublishSettings | None) -> tuple[Any, EndingWithRun]:
    remote, work = pod_workspace(tmp_path / "src")
    seed = f"git clone -q {work} . && git checkout -q symphony/A-1"
    seed += f" && git remote set-url origin {remote}"
    settings = make_settings(
        root=tmp_path / "ws", max_turns=2,
        codex=CodexSettings(command=f"{sys.executable} {FAKE_AGENT}", read_timeout_ms=5000),
        hooks=HooksSettings(after_create=seed),
    )  # fmt: skip
    stage = make_stage("implement", ("Todo",), evidence=True, publish=publish)
    settings = replace(
        settings, machine=StageMachine((stage,), "Needs Attention"), repository=replace(
            repository(remote), kind=CodeHostKind.LOCAL, token=""),
    )  # fmt: skip
    report = json.dumps({"outcome": "done", "summary": "did it"})
    env = {**os.environ, **ENV, "FAKE_AGENT_SCENARIO": "tool", "FAKE_AGENT_TOOL": "report_outcome",
           "FAKE_AGENT_TOOL_ARGS": report,
           "FAKE_AGENT_RECORD": str(tmp_path / "agent.jsonl")}  # fmt: skip
    workspaces = EndingWithRun(settings.workspace.root, settings.hooks, env=env,
                               record=tmp_path / "agent.jsonl")  # fmt: skip
    ctx = AttemptContext(settings, MovingTracker(make_issue("A-1"), ["Todo"]), workspaces,
                         env, env, SecretMasker(), stage=stage)  # fmt: skip
    end = await run_attempt(make_issue("A-1"), None, ctx, lambda _: None)
    return end, workspaces


async def test_a_run_whose_workspace_ends_with_it_pushes_at_its_publishing_hand_off(
    tmp_path: Path,
) -> None:
    end, workspaces = await hand_off(tmp_path, PublishSettings(base="main"))
    assert end.report is not None and end.facts is not None
    assert end.pushed == RunPush("symphony/A-1", end.facts.head)
    remote = tmp_path / "src" / "remote.git"
    assert git(remote, "rev-parse", "refs/heads/symphony/A-1") == end.facts.head
    assert workspaces.kept == [("A-1", end.facts.base)]
    assert workspaces.agent_alive_at_end is False  # stopped before anything ran with a token


async def test_a_hand_off_that_does_not_publish_pushes_nothing_but_keeps_its_diff(
    tmp_path: Path,
) -> None:
    end, workspaces = await hand_off(tmp_path, None)
    assert end.report is not None and end.pushed is None
    assert workspaces.kept and workspaces.kept[0][0] == "A-1"
