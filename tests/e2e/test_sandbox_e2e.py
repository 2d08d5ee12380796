"""The daemon's sandbox for real: a hostile agent and a hook under bubblewrap and podman, the
real codex inside it, and the quickstart's sandboxed plan stage, run through the orchestrator
on a local board. Needs bwrap, socat, podman and runc (scripts/test installs them)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from symphony.config.sandbox import SandboxKind
from tests.e2e.conftest import CLAUDE_BIN, CODEX_BIN, claude_environment, codex_command
from tests.e2e.fake_model import FakeModel, ModelRequest, Say, Shell, Step
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.harness import Board, Daemon, Folder, scenario_env, start, wait_until
from tests.hosts.sandbox_lab import require_bwrap, require_sandbox
from tests.quickstart import prepare_quickstart

pytestmark = pytest.mark.slow

MARKER = f"sandbox-e2e-leftover-{os.getpid()}"


@pytest.fixture(params=[SandboxKind.BWRAP, SandboxKind.PODMAN], ids=lambda k: k.value)
def kind(request: pytest.FixtureRequest) -> SandboxKind:
    require_sandbox(request.param)
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def bwrap() -> None:
    require_bwrap()


def leftovers(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == marker.encode():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_a_hostile_agent_and_its_hooks_reach_nothing_outside_their_workspace(
    tmp_path: Path, kind: SandboxKind
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    other = board.workspaces / "ABC-9"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("another ticket's work")
    listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    state_db = tmp_path / ".symphony" / "state.db"  # where the daemon keeps its store
    probes = {
        "read": [str(home / ".ssh" / "id_ed25519"), str(state_db), str(other / "secret.txt"),
                 "/etc/shadow", f"/proc/{os.getpid()}/environ"],
        "write": [str(tmp_path / "outside.txt"), str(home / "pwned"), str(other / "pwned")],
        "connect": [f"127.0.0.1:{port}"],
        "leave": MARKER,
    }  # fmt: skip
    board.write_workflow(
        agent={"max_turns": 1},
        hooks={"after_create": 'echo "$(id -u) $HOME" > hook.txt; touch "$HOME/hook-home"'},
        sandbox={"kind": kind.value, "network": "none"},
    )
    env = scenario_env(
        "probe", HOME=str(home), FAKE_AGENT_PROBES=json.dumps(probes),
        SYMPHONY_TEST_SECRET="daemon-only",
    )  # fmt: skip
    workspace = board.workspaces / "ABC-1"
    run = start(board, env, watch=False)
    shown: set[str] = set()
    run.orchestrator.view.add_listener(
        lambda: shown.update(r["sandbox"] for r in run.orchestrator.snapshot()["running"])
    )
    try:
        await run.until(lambda: (workspace / "probe.json").exists(), timeout=30)
        await run.until(lambda: not run.orchestrator.state.running, timeout=30)
    finally:
        await run.stop()
        listener.close()

    assert shown == {
        f"{kind.value}, network none, workspace writable"
    }  # what the API says it runs in
    results = json.loads((workspace / "probe.json").read_text())
    for attempt, outcome in results.items():
        # A write may land in the sandbox's private /tmp, which is gone with it (checked below).
        if attempt.startswith(("read", "connect")):
            assert outcome != "ok", f"{attempt} succeeded inside the sandbox"
    assert all(results[f"write {home / n}"] != "ok" for n in ("pwned",))
    assert "SYMPHONY_TEST_SECRET" not in results["environ"]
    for victim in (tmp_path / "outside.txt", home / "pwned", other / "pwned"):
        assert not victim.exists()
    assert wait_until(lambda: leftovers(MARKER) == [], 5.0), leftovers(MARKER)
    uid, hook_home = (workspace / "hook.txt").read_text().split()
    if os.getuid() == 0:
        assert uid != "0"  # a root daemon hands its hooks no root
    assert hook_home != str(home) and not (home / "hook-home").exists()
    assert sys.executable  # the agent ran from this interpreter's installation, mounted read-only


async def test_the_real_codex_works_inside_the_sandbox_through_the_proxy(
    tmp_path: Path, codex_env: dict[str, str], kind: SandboxKind
) -> None:
    """Codex reaches its (fake) model through the daemon's proxy; the commands the model has
    it run write in the workspace, and find nothing of the machine's secrets: the daemon's
    home and ssh key, the operator's codex history, another ticket's workspace."""
    board = Board(tmp_path)
    board.ticket("ABC-1")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("SECRET-KEY")
    codex_home = Path(codex_env["CODEX_HOME"])
    (codex_home / "history.jsonl").write_text("SECRET-HISTORY")
    other = board.workspaces / "ABC-9"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("SECRET-OTHER")
    secrets = [home / ".ssh" / "id_ed25519", codex_home / "history.jsonl", other / "notes.txt"]
    steal = "".join(f"cat {path} >> leaked.txt 2>/dev/null; " for path in secrets)

    def script(request: ModelRequest) -> list[Step]:
        return [
            Shell(f"printf %s sandboxed > made.txt; {steal}echo probed >> leaked.txt"),
            Say("done in the sandbox"),
        ]

    with FakeModel(script) as model:
        port = urlsplit(model.base_url).port
        board.write_workflow(
            agent={"max_turns": 1},
            codex={"command": codex_command(model.base_url), "approval_policy": "never",
                   "thread_sandbox": "workspace-write", "read_timeout_ms": 30_000,
                   "turn_timeout_ms": 60_000},
            sandbox={"kind": kind.value, "network": "model", "allow_hosts": [f"127.0.0.1:{port}"]},
        )  # fmt: skip
        run = start(board, {**codex_env, "HOME": str(home)}, watch=False)
        workspace = board.workspaces / "ABC-1"
        try:
            await run.until(lambda: (workspace / "leaked.txt").exists(), timeout=60)
            await run.until(lambda: not run.orchestrator.state.running, timeout=60)
        finally:
            await run.stop()
    assert model.script_errors == [] and model.unexpected_requests == []
    assert (workspace / "made.txt").read_text() == "sandboxed"
    assert (workspace / "leaked.txt").read_text() == "probed\n"  # nothing else reached it


async def test_the_real_codex_runs_its_own_workspace_write_sandbox_inside_the_daemons(
    scratch_path: Path, codex_env: dict[str, str], bwrap: None
) -> None:
    """With Debian's bubblewrap installed, codex sandboxes a command through a helper it makes
    in its home, and makes none under the temporary folder. The agent's private home lives
    beside the store, so codex writes in the workspace both directly and through its own
    `workspace-write` sandbox, inside the daemon's."""
    board = Board(scratch_path)
    board.ticket("ABC-1")
    codex = os.path.realpath(CODEX_BIN)
    inner = shlex.join(
        [codex, "sandbox", "-c", 'sandbox_mode="workspace-write"', "--",
         "sh", "-c", "printf %s inner > inner.txt"]
    )  # fmt: skip

    def script(request: ModelRequest) -> list[Step]:
        return [
            Shell(f'printf %s "$HOME" > home.txt; printf %s outer > outer.txt; {inner}'),
            Say("written"),
        ]

    with FakeModel(script) as model:
        port = urlsplit(model.base_url).port
        board.write_workflow(
            agent={"max_turns": 1},
            codex={"command": codex_command(model.base_url), "approval_policy": "never",
                   "thread_sandbox": "workspace-write", "read_timeout_ms": 60_000,
                   "turn_timeout_ms": 120_000},
            sandbox={"kind": "bwrap", "network": "model", "allow_hosts": [f"127.0.0.1:{port}"]},
        )  # fmt: skip
        run = start(board, codex_env, watch=False)
        workspace = board.workspaces / "ABC-1"
        try:
            await run.until(lambda: (workspace / "home.txt").exists(), timeout=120)
            await run.until(lambda: not run.orchestrator.state.running, timeout=120)
        finally:
            await run.stop()
    assert model.script_errors == [] and model.unexpected_requests == []
    assert (workspace / "outer.txt").read_text() == "outer"
    assert (workspace / "inner.txt").read_text() == "inner"
    home = Path((workspace / "home.txt").read_text())
    runs = scratch_path / ".symphony" / "sandbox-runs"
    assert home.is_relative_to(runs) and home.name == "home"
    assert not home.is_relative_to(tempfile.gettempdir())
    assert not home.parent.exists()  # removed with its run
    assert [p.name for p in runs.iterdir()] == []


def test_the_quickstart_plans_in_a_sandbox_without_network_or_write_access(
    tmp_path: Path, bwrap: None
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    workflow = prepare_quickstart(root)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "DEMO_AGENT_DELAY_MS": "300", "SYMPHONY_SANDBOX": "bwrap"}
    daemon = Daemon(Folder(root, workflow), env, "--port", "0")
    seen: set[tuple[str, str]] = set()
    board = root / ".symphony" / "board"

    def planned() -> bool:
        state = httpx.get(f"{url}api/v1/state", timeout=5).json()
        seen.update((r["state"], r["sandbox"]) for r in state["running"])
        return any("state: Plan Review" in p.read_text() for p in board.glob("*.md"))

    try:
        url = daemon.url()
        assert wait_until(planned, 60), "".join(daemon.lines)[-3000:]
    finally:
        daemon.stop()
    assert ("Todo", "bwrap, network none, workspace read-only") in seen
    # The other stage runs as configured: unsandboxed.
    assert all(sandbox == "none" for state, sandbox in seen if state != "Todo")
    assert "Traceback" not in "".join(daemon.lines)


async def test_a_connection_the_proxy_refuses_shows_on_the_tickets_run(
    tmp_path: Path, bwrap: None
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    allowed = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = allowed.sockets[0].getsockname()[1]
    probes = {"proxy": [f"127.0.0.1:{port}", "exfiltrate.example.com:443"]}
    board.write_workflow(
        agent={"max_turns": 1},
        sandbox={"kind": "bwrap", "network": "model", "allow_hosts": [f"127.0.0.1:{port}"]},
    )
    env = scenario_env("probe", HOME=str(tmp_path), FAKE_AGENT_PROBES=json.dumps(probes))
    run = start(board, env, watch=False)
    events: list[tuple[str, str | None]] = []

    def collect() -> None:
        for entry in run.orchestrator.state.running.values():
            events.extend((e.kind, e.message) for e in entry.recent_events)

    run.orchestrator.view.add_listener(collect)
    workspace = board.workspaces / "ABC-1"
    try:
        await run.until(lambda: (workspace / "probe.json").exists(), timeout=30)
        await run.until(lambda: not run.orchestrator.state.running, timeout=30)
    finally:
        await run.stop()
        allowed.close()
    results = json.loads((workspace / "probe.json").read_text())
    assert results[f"proxy 127.0.0.1:{port}"].startswith("HTTP/1.1 200")
    assert results["proxy exfiltrate.example.com:443"].startswith("HTTP/1.1 403")
    assert (
        "permission_denied",
        "sandbox refused a connection to exfiltrate.example.com:443 (not in sandbox.allow_hosts)",
    ) in events


async def test_the_real_claude_reaches_its_model_and_the_trackers_tool_from_a_sandbox(
    tmp_path: Path, claude_home: Path, bwrap: None
) -> None:
    """Under `network: model` with no allow_hosts: the agent reaches its model through the
    daemon's model gateway (the gateway only: the key stays outside), and the daemon's MCP tool
    server is carried in, so the move tool works from inside."""
    board = Board(tmp_path)
    board.ticket("ABC-1")
    move = json.dumps({"state": "Human Review"})
    with FakeAnthropic() as anthropic:
        board.write_workflow(
            agent={"kind": "claude", "max_turns": 2},
            prompt="Finish {{ issue.identifier }}. "
            f"<<tool mcp__symphony__local_move_issue {move}>>",
            claude={"command": str(CLAUDE_BIN), "model": "claude-sonnet-4-5",
                    "read_timeout_ms": 30_000},
            sandbox={"kind": "bwrap", "network": "model"},
        )  # fmt: skip
        env = {**claude_environment(claude_home, anthropic.base_url), "HOME": str(tmp_path)}
        run = start(board, env, watch=False)
        try:
            # The run's end: a stop would revoke its token before the call with the tool's answer.
            await run.until(
                lambda: (
                    board.state_of("ABC-1") == "Human Review" and not run.orchestrator.state.running
                ),
                timeout=60,
            )
        finally:
            await run.stop()
    results = [r for request in anthropic.requests for r in request["tool_results"]]
    assert any("Human Review" in r for r in results), results
    assert {r["api_key"] for r in anthropic.requests} == {"sk-ant-fake-key"}
    assert run.orchestrator.state.wire_totals["ABC-1"].requests == len(anthropic.requests)


GIT_PLANTS = (
    'git config core.fsmonitor "touch $MARK/fsmonitor"',
    'git config filter.evil.clean "touch $MARK/clean; cat"',
    'git config diff.evil.textconv "touch $MARK/textconv; cat"',
    'echo "* diff=evil filter=evil" > "$(git rev-parse --git-common-dir)/info/attributes"',
    "for h in post-checkout pre-push reference-transaction post-index-change; do"
    ' f="$(git rev-parse --git-common-dir)/hooks/$h";'
    ' printf "#!/bin/sh\\ntouch $MARK/$h\\n" > "$f" && chmod +x "$f" || exit 1; done',
    "git config extensions.worktreeConfig true",
    'echo "$PWD/../evil" > "$(git rev-parse --git-dir)/commondir"',
    "mv .git .git-away",
)
"""What a hostile agent writes to get its commands run by the daemon's git, outside. (A
worktree's own `config.worktree` stays writable, and inert: git reads it only when the shared
configuration, read-only, turns `extensions.worktreeConfig` on.)"""


@pytest.mark.parametrize("access", ["writable", "read-only"])
@pytest.mark.parametrize("strategy", ["worktree", "clone"])
async def test_an_agent_cannot_plant_git_commands_for_the_daemon_or_the_next_ticket(
    tmp_path: Path, kind: SandboxKind, strategy: str, access: str
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("x = 1\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    marks, reports = tmp_path / "marks", tmp_path / "reports"
    marks.mkdir()
    reports.mkdir()
    workspace_section: dict[str, object] = {"root": "workspaces"}
    hooks: dict[str, object] = {}
    if strategy == "worktree":
        workspace_section |= {"strategy": "worktree", "repository": str(repo)}
    else:
        hooks = {"after_create": f"git clone -q {repo} ."}
    board.write_workflow(
        agent={"max_turns": 1}, hooks=hooks, workspace=workspace_section,
        sandbox={"kind": kind.value, "network": "none", "read_only": [str(repo)],
                 "workspace": access, "writable": [str(reports)]},
    )  # fmt: skip
    probes = {
        "shell": [p.replace("$MARK", str(marks)) for p in GIT_PLANTS],
        "report": str(reports / "$SYMPHONY_ISSUE_IDENTIFIER.json"),
    }
    env = scenario_env("probe", FAKE_AGENT_PROBES=json.dumps(probes))
    workspace = board.workspaces / "ABC-1"
    run = start(board, env, watch=False)
    try:
        await run.until(lambda: (reports / "ABC-1.json").exists(), timeout=30)
        await run.until(lambda: not run.orchestrator.state.running, timeout=30)
        board.ticket("ABC-2")  # the next ticket's worktree comes from the same store
        run.orchestrator.request_refresh()
        await run.until(lambda: (reports / "ABC-2.json").exists(), timeout=30)
        await run.until(lambda: not run.orchestrator.state.running, timeout=30)
    finally:
        await run.stop()
    results = json.loads((reports / "ABC-1.json").read_text())
    planted = {k: v for k, v in results.items() if k.startswith("shell")}
    # A clone's own .git stays writable for commits, so a `commondir` can be written there;
    # the daemon's git then switches off whatever configuration it points to.
    landed = {k for k, v in planted.items() if v == "ok"}
    commondir = {k for k in planted if "commondir" in k}
    assert landed == (commondir if (strategy, access) == ("clone", "writable") else set())
    assert (workspace / ".git").exists() and not (workspace / ".git-away").exists()
    # The daemon's git outside, and the next ticket's agent, ran none of it.
    assert sorted(p.name for p in marks.iterdir()) == []
    assert (board.workspaces / "ABC-2" / "calc.py").read_text() == "x = 1\n"
