"""Workspace keys, root containment, hook lifecycle and removal (spec §4.2, §9, §15, §17.2)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from symphony.config.sandbox import Network, SandboxKind, SandboxSettings
from symphony.config.sections import HooksSettings
from symphony.hosts import Host
from symphony.hosts.local import LocalHost
from symphony.hosts.sandbox.host import SandboxRun
from symphony.workspace.local import (
    OUTPUT_TAIL_BYTES,
    Workspace,
    WorkspaceError,
    WorkspaceManager,
    workspace_key,
)
from tests.harness import is_alive, wait_until

ALLOWED_KEY = re.compile(r"[A-Za-z0-9._-]+")


def manager(tmp_path: Path, *, env: dict[str, str] | None = None, **hooks: Any) -> WorkspaceManager:
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OUT": str(tmp_path / "out")}
    return WorkspaceManager(
        tmp_path / "root", HooksSettings(**hooks), env={**base_env, **(env or {})}
    )


def hash16(identifier: str) -> str:
    return hashlib.sha256(identifier.encode()).hexdigest()[:16]


def hook_events(logs: list[MutableMapping[str, Any]], hook: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e.get("hook") == hook and "outcome" in e]


# Workspace keys (spec §4.2, §9.5 invariant 3)


@pytest.mark.parametrize("identifier", ["ABC-123", "proj.x_1", "A", "..."])
def test_identifier_of_allowed_characters_keeps_its_key_exactly(identifier: str) -> None:
    assert workspace_key(identifier) == identifier


def test_sanitized_key_replaces_disallowed_characters_and_appends_original_hash() -> None:
    key = workspace_key("ABC/12 3")
    assert key == f"ABC_12_3-{hash16('ABC/12 3')}"
    assert ALLOWED_KEY.fullmatch(key)


def test_identifiers_that_sanitize_alike_get_distinct_keys() -> None:
    identifiers = ["A/1", "A:1", "A 1", "A#1", "A_1"]
    keys = [workspace_key(i) for i in identifiers]
    assert len(set(keys)) == len(identifiers)
    assert all(ALLOWED_KEY.fullmatch(k) for k in keys)
    assert workspace_key("A_1") == "A_1"


def test_workspace_key_is_deterministic() -> None:
    assert workspace_key("team/ABC-1") == workspace_key("team/ABC-1")


def test_non_ascii_characters_are_replaced_and_hashed() -> None:
    key = workspace_key("ÄBC-1")
    assert key == f"_BC-1-{hash16('ÄBC-1')}"


def test_identifier_with_lone_surrogate_still_gets_a_key() -> None:
    key = workspace_key("A\ud800")
    assert key.startswith("A_-")
    assert ALLOWED_KEY.fullmatch(key)


@pytest.mark.parametrize(("identifier", "prefix"), [(".", "_-"), ("..", "__-")])
def test_dot_identifiers_never_name_root_or_its_parent(
    tmp_path: Path, identifier: str, prefix: str
) -> None:
    key = workspace_key(identifier)
    assert key.startswith(prefix)
    assert key not in (".", "..")
    path = manager(tmp_path).path_for(identifier)
    assert path.parent == tmp_path / "root"


def test_empty_identifier_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError) as err:
        workspace_key("")
    assert err.value.category == "invalid_workspace_path"
    with pytest.raises(WorkspaceError):
        manager(tmp_path).path_for("")


async def test_dotdot_identifier_stays_inside_root(tmp_path: Path) -> None:
    ws = await manager(tmp_path).prepare("../../etc")
    assert ws.path.parent == tmp_path / "root"
    assert ws.path.name == ws.key == f".._.._etc-{hash16('../../etc')}"
    assert ws.path.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


# Paths and creation (spec §9.1, §9.2)


def test_workspace_path_is_deterministic_per_identifier(tmp_path: Path) -> None:
    first = manager(tmp_path).path_for("ABC-1")
    assert first == manager(tmp_path).path_for("ABC-1") == tmp_path / "root" / "ABC-1"


def test_relative_root_is_made_absolute_and_normalized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    workspaces = WorkspaceManager(Path("a/../ws"), HooksSettings(), env={})
    assert workspaces.root == tmp_path / "ws"
    assert workspaces.path_for("X-1") == tmp_path / "ws" / "X-1"


async def test_missing_workspace_and_root_are_created(tmp_path: Path) -> None:
    workspaces = WorkspaceManager(tmp_path / "deep" / "root", HooksSettings(), env={})
    ws = await workspaces.prepare("ABC-1")
    assert ws == Workspace(
        path=tmp_path / "deep" / "root" / "ABC-1", key="ABC-1", created_now=True, identifier="ABC-1"
    )
    assert ws.path.is_dir()


async def test_existing_workspace_directory_is_reused_untouched(tmp_path: Path) -> None:
    workspaces = manager(tmp_path)
    first = await workspaces.prepare("ABC-1")
    (first.path / "work.txt").write_text("keep me")
    again = await workspaces.prepare("ABC-1")
    assert again.path == first.path
    assert not again.created_now
    assert (again.path / "work.txt").read_text() == "keep me"


async def test_existing_file_at_workspace_path_fails_and_is_kept(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ABC-1").write_text("user data")
    with pytest.raises(WorkspaceError) as err:
        await manager(tmp_path).prepare("ABC-1")
    assert err.value.category == "workspace_not_owned"
    assert (tmp_path / "root" / "ABC-1").read_text() == "user data"


# Ownership: only directories symphony created are used or deleted


async def test_folder_symphony_did_not_create_is_never_used_as_a_workspace(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "root" / "victim"
    victim.mkdir(parents=True)
    (victim / "thesis.tex").write_text("years of work")
    workspaces = manager(tmp_path, after_create='echo ran > "$OUT"')
    with pytest.raises(WorkspaceError) as err:
        await workspaces.prepare("victim")
    assert err.value.category == "workspace_not_owned"
    assert "did not create" in err.value.message and "Move it out" in err.value.message
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert not (tmp_path / "out").exists()


async def test_folder_symphony_did_not_create_is_left_in_place_and_logged_once(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "root" / "victim"
    victim.mkdir(parents=True)
    (victim / "thesis.tex").write_text("years of work")
    workspaces = manager(tmp_path, before_remove='echo ran > "$OUT"')
    with capture_logs() as logs:
        assert not await workspaces.remove("victim")
        assert not await workspaces.remove("victim")
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert not (tmp_path / "out").exists()
    warnings = [e for e in logs if "did not create" in e["event"]]
    assert len(warnings) == 1 and warnings[0]["workspace"] == str(victim)


async def test_folder_put_where_a_removed_workspace_was_is_not_mistaken_for_it(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    os.rename(ws.path, tmp_path / "moved-away")
    ws.path.mkdir()  # a person's folder at the same path: a different directory
    (ws.path / "mine.txt").write_text("keep")
    assert not await workspaces.remove("ABC-1")
    assert (ws.path / "mine.txt").read_text() == "keep"
    with pytest.raises(WorkspaceError) as err:
        await workspaces.prepare("ABC-1")
    assert err.value.category == "workspace_not_owned"


async def test_workspace_replaced_by_its_own_after_create_hook_stays_ours(tmp_path: Path) -> None:
    # A hook that deletes the directory and clones into its path, as `git clone` setups do.
    script = 'cd .. && rm -rf "$SYMPHONY_WORKSPACE" && mkdir "$SYMPHONY_WORKSPACE"'
    workspaces = manager(tmp_path, after_create=script)
    ws = await workspaces.prepare("ABC-1")
    assert not (await workspaces.prepare("ABC-1")).created_now
    assert await workspaces.remove("ABC-1")
    assert not ws.path.exists()


async def test_marks_live_beside_the_workspace_so_an_empty_directory_is_handed_to_hooks(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, after_create='ls -A > "$OUT"')
    ws = await workspaces.prepare("ABC-1")
    assert (tmp_path / "out").read_text() == ""
    # A clean of the working tree by the agent cannot remove the proof of ownership.
    for entry in ws.path.iterdir():
        entry.unlink()
    assert await workspaces.remove("ABC-1")


async def test_creation_interrupted_before_its_mark_was_stamped_is_recovered(
    tmp_path: Path,
) -> None:
    from symphony.workspace.marks import OwnershipMarks

    root = tmp_path / "root"
    root.mkdir()
    OwnershipMarks(root).write_pending("ABC-1", "ABC-1")
    (root / "ABC-1").mkdir()  # then the daemon died
    workspaces = manager(tmp_path, after_create='echo ran > "$OUT"')
    ws = await workspaces.prepare("ABC-1")
    assert ws.created_now and (tmp_path / "out").read_text().strip() == "ran"
    assert await workspaces.remove("ABC-1")


async def test_removal_of_a_workspace_deleted_by_hand_forgets_its_mark(tmp_path: Path) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    ws.path.rmdir()
    assert not await workspaces.remove("ABC-1")
    assert not (tmp_path / "root" / ".symphony-owned" / "ABC-1").exists()
    assert (await workspaces.prepare("ABC-1")).created_now


async def test_a_root_holds_workspaces_of_ours_only_while_a_mark_is_there(tmp_path: Path) -> None:
    workspaces = manager(tmp_path)
    assert not workspaces.holds_any()  # no root yet
    (tmp_path / "root" / "notes").mkdir(parents=True)  # a person's folder
    (tmp_path / "root" / ".symphony-owned").mkdir()
    (tmp_path / "root" / ".symphony-owned" / ".ABC-1.x.tmp").write_text("{}")  # a torn write
    assert not workspaces.holds_any()
    await workspaces.prepare("ABC-1")
    assert workspaces.holds_any()
    assert await workspaces.remove("ABC-1")
    assert not workspaces.holds_any()


def test_the_marks_folder_name_is_never_a_workspace_key() -> None:
    for name in (".symphony-owned", ".SYMPHONY-OWNED"):
        key = workspace_key(name)
        assert key.casefold() != ".symphony-owned" and key.startswith(name + "-")


async def test_root_that_is_a_file_fails_creation(tmp_path: Path) -> None:
    (tmp_path / "root").write_text("not a dir")
    with pytest.raises(WorkspaceError) as err:
        await manager(tmp_path).prepare("ABC-1")
    assert err.value.category == "workspace_create_failed"


async def test_root_behind_a_symlink_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "root").symlink_to(tmp_path / "real")
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    workspaces.check_agent_cwd(ws)
    assert (tmp_path / "real" / "ABC-1").is_dir()


# Containment and symlinks (spec §9.5 invariant 2, §15.2)


async def test_symlinked_workspace_escaping_root_is_rejected(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ABC-1").symlink_to(outside)
    workspaces = manager(tmp_path, after_create="touch created")
    with pytest.raises(WorkspaceError) as err:
        workspaces.path_for("ABC-1")
    assert err.value.category == "invalid_workspace_path"
    with pytest.raises(WorkspaceError) as err:
        await workspaces.prepare("ABC-1")
    assert err.value.category == "invalid_workspace_path"
    assert list(outside.iterdir()) == []


async def test_dangling_symlink_escaping_root_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ABC-1").symlink_to(tmp_path / "nowhere")
    with pytest.raises(WorkspaceError) as err:
        await manager(tmp_path).prepare("ABC-1")
    assert err.value.category == "invalid_workspace_path"
    assert not (tmp_path / "nowhere").exists()


async def test_symlink_to_the_root_itself_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ABC-1").symlink_to(tmp_path / "root")
    with pytest.raises(WorkspaceError) as err:
        await manager(tmp_path).prepare("ABC-1")
    assert err.value.category == "invalid_workspace_path"


async def test_symlink_to_a_directory_inside_root_is_not_used(tmp_path: Path) -> None:
    # Symphony never makes links, so a link at a workspace path is someone else's.
    (tmp_path / "root" / "shared").mkdir(parents=True)
    (tmp_path / "root" / "ABC-1").symlink_to(tmp_path / "root" / "shared")
    with pytest.raises(WorkspaceError) as err:
        await manager(tmp_path).prepare("ABC-1")
    assert err.value.category == "workspace_not_owned"


async def test_agent_cwd_check_accepts_the_prepared_workspace(tmp_path: Path) -> None:
    workspaces = manager(tmp_path)
    workspaces.check_agent_cwd(await workspaces.prepare("team/ABC-1"))


@pytest.mark.parametrize(
    "make_workspace",
    [
        pytest.param(lambda t: Workspace(t / "outside", "outside", False), id="outside-root"),
        pytest.param(lambda t: Workspace(t / "root", "root", False), id="root-itself"),
        pytest.param(lambda t: Workspace(t / "root" / "..", "..", False), id="dotdot-key"),
        pytest.param(lambda t: Workspace(t / "root" / "B-2", "ABC-1", False), id="key-mismatch"),
        pytest.param(lambda t: Workspace(Path("root/ABC-1"), "ABC-1", False), id="relative"),
        pytest.param(lambda t: Workspace(t / "root" / "a/b", "a/b", False), id="nested"),
        pytest.param(lambda t: Workspace(t / "root" / "gone", "gone", False), id="missing"),
    ],
)
async def test_agent_cwd_check_rejects_paths_that_are_not_the_workspace(
    tmp_path: Path, make_workspace: Callable[[Path], Workspace]
) -> None:
    workspaces = manager(tmp_path)
    await workspaces.prepare("ABC-1")
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "a" / "b").mkdir(parents=True)
    with pytest.raises(WorkspaceError) as err:
        workspaces.check_agent_cwd(make_workspace(tmp_path))
    assert err.value.category == "invalid_workspace_path"


async def test_agent_cwd_check_rejects_workspace_replaced_by_escaping_symlink(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    ws.path.rmdir()
    (tmp_path / "outside").mkdir()
    ws.path.symlink_to(tmp_path / "outside")
    with pytest.raises(WorkspaceError) as err:
        workspaces.check_agent_cwd(ws)
    assert err.value.category == "invalid_workspace_path"


async def test_before_run_refuses_a_workspace_outside_root_without_running_hook(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    workspaces = manager(tmp_path, before_run="touch ran")
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(Workspace(outside, "outside", False))
    assert err.value.category == "invalid_workspace_path"
    assert not (outside / "ran").exists()


# Hooks (spec §5.3.4, §9.4, §15.4)


async def test_after_create_runs_only_when_workspace_is_new(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, after_create='echo created >> "$OUT"')
    assert (await workspaces.prepare("ABC-1")).created_now
    assert not (await workspaces.prepare("ABC-1")).created_now
    assert (tmp_path / "out").read_text() == "created\n"


GIT_INIT = (
    "git init -q . && git -c user.name=t -c user.email=t@localhost commit -q --allow-empty -m base"
)


async def test_the_commit_a_new_git_workspace_starts_at_is_remembered_as_its_base(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, after_create=GIT_INIT)
    created = await workspaces.prepare("ABC-1")
    head = subprocess.run(
        ["git", "-C", str(created.path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert created.base == head and len(head) == 40
    subprocess.run(
        ["git", "-C", str(created.path), "-c", "user.name=t", "-c", "user.email=t@localhost",
         "commit", "-q", "--allow-empty", "-m", "work"],
        check=True,
    )  # fmt: skip
    # Reused after the agent committed: the base is still where the work started.
    assert (await workspaces.prepare("ABC-1")).base == head
    # Not a git work tree: no base.
    assert (await manager(tmp_path / "plain", after_create="true").prepare("X-1")).base is None


async def test_failed_after_create_removes_new_directory_and_raises_hook_failed(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, after_create="mkdir -p partial/clone && exit 3")
    with pytest.raises(WorkspaceError) as err:
        await workspaces.prepare("ABC-1")
    assert err.value.category == "hook_failed"
    assert "status 3" in err.value.message
    assert not (tmp_path / "root" / "ABC-1").exists()
    # The next attempt starts fresh and runs after_create again.
    with pytest.raises(WorkspaceError):
        await workspaces.prepare("ABC-1")


async def test_timed_out_after_create_removes_new_directory_and_raises_hook_timeout(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, after_create="touch partial; sleep 30", timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as err:
        await workspaces.prepare("ABC-1")
    assert time.monotonic() - started < 5
    assert err.value.category == "hook_timeout"
    assert not (tmp_path / "root" / "ABC-1").exists()


async def test_cancelled_after_create_kills_the_hook_and_removes_new_directory(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "child.pid"
    workspaces = manager(
        tmp_path,
        env={"PIDFILE": str(pidfile)},
        after_create='sleep 30 & echo $! > "$PIDFILE"; wait',
        timeout_ms=30_000,
    )
    task = asyncio.create_task(workspaces.prepare("ABC-1"))
    for _ in range(250):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    child = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_until(lambda: not is_alive(child), 3)
    assert not (tmp_path / "root" / "ABC-1").exists()


async def test_reused_workspace_is_not_reset_when_before_run_fails(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="exit 1")
    ws = await workspaces.prepare("ABC-1")
    (ws.path / "work.txt").write_text("keep me")
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(ws)
    assert err.value.category == "hook_failed"
    again = await workspaces.prepare("ABC-1")
    assert (again.path / "work.txt").read_text() == "keep me"


async def test_before_run_runs_before_each_attempt(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run='echo run >> "$OUT"')
    ws = await workspaces.prepare("ABC-1")
    await workspaces.before_run(ws)
    await workspaces.before_run(ws)
    assert (tmp_path / "out").read_text() == "run\nrun\n"


async def test_before_run_timeout_aborts_the_attempt(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="sleep 30", timeout_ms=200)
    ws = await workspaces.prepare("ABC-1")
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(ws)
    assert err.value.category == "hook_timeout"
    assert time.monotonic() - started < 5


async def test_hanging_hook_is_killed_at_timeout_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The child ignores SIGTERM, so only the SIGKILL to the whole group can end it.
    script = (
        'sh -c \'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 30\' & '
        'while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; sleep 30'
    )
    workspaces = manager(tmp_path, env={"PIDFILE": str(pidfile)}, before_run=script, timeout_ms=300)
    ws = await workspaces.prepare("ABC-1")
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(ws)
    assert time.monotonic() - started < 5
    assert err.value.category == "hook_timeout"
    child = int(pidfile.read_text())
    assert wait_until(lambda: not is_alive(child), 3)


async def test_hook_ignoring_sigterm_is_killed_after_a_short_grace(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="trap '' TERM; sleep 30", timeout_ms=200)
    ws = await workspaces.prepare("ABC-1")
    started = time.monotonic()
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(ws)
    assert err.value.category == "hook_timeout"
    assert time.monotonic() - started < 5


async def test_cancellation_during_the_kill_grace_still_kills_the_hook(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    workspaces = manager(
        tmp_path,
        env={"PIDFILE": str(pidfile)},
        before_run="trap '' TERM; sleep 30 & echo $! > \"$PIDFILE\"; wait",
        timeout_ms=200,
    )
    ws = await workspaces.prepare("ABC-1")
    task = asyncio.create_task(workspaces.before_run(ws))
    await asyncio.sleep(0.5)  # past the timeout, inside the SIGTERM grace
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int(pidfile.read_text())
    assert wait_until(lambda: not is_alive(child), 3)


async def test_background_process_left_by_hook_does_not_delay_completion(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    workspaces = manager(
        tmp_path,
        env={"PIDFILE": str(pidfile)},
        before_run='sleep 30 & echo $! > "$PIDFILE"; echo done',
        timeout_ms=10_000,
    )
    ws = await workspaces.prepare("ABC-1")
    started = time.monotonic()
    try:
        await workspaces.before_run(ws)
        assert time.monotonic() - started < 5
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


async def test_hooks_run_in_the_workspace_with_the_given_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYMPHONY_TEST_HOST_ONLY", "leaked")
    script = (
        '{ pwd -P; echo "$SYMPHONY_WORKSPACE"; echo "$SYMPHONY_ISSUE_IDENTIFIER"; '
        'echo "$SYMPHONY_WORKSPACE_ROOT"; echo "$SYMPHONY_HOOK"; echo "$GIVEN"; '
        'echo "${SYMPHONY_TEST_HOST_ONLY-unset}"; } > "$OUT"'
    )
    workspaces = manager(tmp_path, env={"GIVEN": "from-manager"}, before_run=script)
    ws = await workspaces.prepare("team/ABC 1")
    await workspaces.before_run(ws)
    lines = (tmp_path / "out").read_text().splitlines()
    assert lines == [
        os.path.realpath(ws.path),
        str(ws.path),
        "team/ABC 1",
        str(tmp_path / "root"),
        "before_run",
        "from-manager",
        "unset",
    ]


async def test_hook_stdin_is_empty(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run='cat > "$OUT"', timeout_ms=5_000)
    ws = await workspaces.prepare("ABC-1")
    await workspaces.before_run(ws)
    assert (tmp_path / "out").read_text() == ""


async def test_each_hook_sees_its_own_name(tmp_path: Path) -> None:
    script = 'echo "$SYMPHONY_HOOK" >> "$OUT"'
    workspaces = manager(
        tmp_path, after_create=script, before_run=script, after_run=script, before_remove=script
    )
    ws = await workspaces.prepare("ABC-1")
    await workspaces.before_run(ws)
    await workspaces.after_run(ws)
    await workspaces.remove("ABC-1")
    assert (tmp_path / "out").read_text().split() == [
        "after_create",
        "before_run",
        "after_run",
        "before_remove",
    ]


async def test_hook_that_cannot_start_fails_the_attempt(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="true")
    ws = await workspaces.prepare("ABC-1")
    workspaces._host = LocalHost(shell=str(tmp_path / "no-such-shell"))
    with pytest.raises(WorkspaceError) as err:
        await workspaces.before_run(ws)
    assert err.value.category == "hook_failed"
    assert "could not start" in err.value.message


@pytest.mark.parametrize(
    ("script", "timeout_ms", "outcome"),
    [("echo broken >&2; exit 7", 5_000, "failed"), ("sleep 30", 200, "timed_out")],
)
async def test_after_run_failure_and_timeout_are_logged_and_ignored(
    tmp_path: Path, script: str, timeout_ms: int, outcome: str
) -> None:
    workspaces = manager(tmp_path, after_run=script, timeout_ms=timeout_ms)
    ws = await workspaces.prepare("ABC-1")
    with capture_logs() as logs:
        await workspaces.after_run(ws)
    (event,) = hook_events(logs, "after_run")
    assert event["outcome"] == outcome
    assert event["log_level"] == "warning"
    if outcome == "failed":
        assert event["exit_code"] == 7
        assert "broken" in event["output"]


async def test_after_run_on_a_vanished_workspace_is_skipped(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, after_run='echo ran >> "$OUT"')
    ws = await workspaces.prepare("ABC-1")
    ws.path.rmdir()
    with capture_logs() as logs:
        await workspaces.after_run(ws)
    assert not (tmp_path / "out").exists()
    assert any(e["event"] == "hook skipped" for e in logs)


async def test_hook_start_and_outcome_are_logged_with_context(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="echo hello; echo world >&2")
    ws = await workspaces.prepare("ABC-1")
    with capture_logs() as logs:
        await workspaces.before_run(ws)
    started = [e for e in logs if e["event"] == "hook started"]
    assert started and started[0]["hook"] == "before_run"
    (event,) = hook_events(logs, "before_run")
    assert event["workspace"] == str(ws.path)
    assert event["outcome"] == "completed"
    assert event["exit_code"] == 0
    assert isinstance(event["duration_ms"], int)
    assert event["output"] == "hello\nworld\n"
    assert "output_truncated" not in event


async def test_long_hook_output_is_logged_truncated_to_its_tail(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_run="head -c 10000 /dev/zero | tr '\\0' x; echo END")
    ws = await workspaces.prepare("ABC-1")
    with capture_logs() as logs:
        await workspaces.before_run(ws)
    (event,) = hook_events(logs, "before_run")
    assert event["output"].endswith("xxxEND\n")
    assert len(event["output"].encode()) == OUTPUT_TAIL_BYTES
    assert "10004" in event["output_truncated"]


async def test_missing_hooks_are_no_ops(tmp_path: Path) -> None:
    workspaces = manager(tmp_path)
    with capture_logs() as logs:
        ws = await workspaces.prepare("ABC-1")
        await workspaces.before_run(ws)
        await workspaces.after_run(ws)
        assert await workspaces.remove("ABC-1")
    assert not [e for e in logs if "hook" in e]


# Removal (spec §5.3.4 before_remove, §8.6)


async def test_remove_runs_before_remove_in_the_workspace_then_deletes_it(tmp_path: Path) -> None:
    workspaces = manager(tmp_path, before_remove='ls > "$OUT"')
    ws = await workspaces.prepare("ABC-1")
    (ws.path / "artifact").write_text("x")
    assert await workspaces.remove("ABC-1")
    assert (tmp_path / "out").read_text() == "artifact\n"
    assert not ws.path.exists()
    assert (tmp_path / "root").is_dir()


@pytest.mark.parametrize(("script", "timeout_ms"), [("exit 1", 5_000), ("sleep 30", 200)])
async def test_before_remove_failure_or_timeout_is_ignored_and_directory_still_deleted(
    tmp_path: Path, script: str, timeout_ms: int
) -> None:
    workspaces = manager(tmp_path, before_remove=script, timeout_ms=timeout_ms)
    ws = await workspaces.prepare("ABC-1")
    with capture_logs() as logs:
        assert await workspaces.remove("ABC-1")
    assert not ws.path.exists()
    (event,) = hook_events(logs, "before_remove")
    assert event["outcome"] in ("failed", "timed_out")


async def test_remove_of_a_missing_workspace_returns_false_without_running_hook(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, before_remove='echo ran > "$OUT"')
    assert not await workspaces.remove("ABC-1")
    assert not (tmp_path / "out").exists()


async def test_remove_never_follows_a_symlink_escaping_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (tmp_path / "root").mkdir()
    link = tmp_path / "root" / "ABC-1"
    link.symlink_to(outside)
    workspaces = manager(tmp_path, before_remove='echo ran > "$OUT"')
    with pytest.raises(WorkspaceError) as err:
        await workspaces.remove("ABC-1")
    assert err.value.category == "invalid_workspace_path"
    assert (outside / "precious").read_text() == "keep"
    assert link.is_symlink()
    assert not (tmp_path / "out").exists()


async def test_remove_leaves_a_symlink_inside_root_and_its_target_alone(tmp_path: Path) -> None:
    shared = tmp_path / "root" / "shared"
    shared.mkdir(parents=True)
    (shared / "precious").write_text("keep")
    link = tmp_path / "root" / "ABC-1"
    link.symlink_to(shared)
    assert not await manager(tmp_path).remove("ABC-1")
    assert link.is_symlink()
    assert (shared / "precious").read_text() == "keep"


async def test_remove_leaves_a_file_at_the_workspace_path_alone(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ABC-1").write_text("user data")
    assert not await manager(tmp_path).remove("ABC-1")
    assert (tmp_path / "root" / "ABC-1").read_text() == "user data"


async def test_remove_deletes_read_only_subdirectories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    cache = ws.path / "pkg" / "mod"
    cache.mkdir(parents=True)
    (cache / "file.go").write_text("x")
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    (ws.path / "pkg").chmod(stat.S_IRUSR | stat.S_IXUSR)
    # Enforce directory write permission even when the tests run as root, who bypasses it.
    real_unlink, real_rmdir = os.unlink, os.rmdir

    def guarded(real: Callable[..., None]) -> Callable[..., None]:
        def call(path: Any, *, dir_fd: int | None = None) -> None:
            parent = os.fstat(dir_fd) if dir_fd is not None else os.lstat(os.path.dirname(path))
            if not parent.st_mode & stat.S_IWUSR:
                raise PermissionError(13, "Permission denied", str(path))
            real(path, dir_fd=dir_fd)

        return call

    monkeypatch.setattr(os, "unlink", guarded(real_unlink))
    monkeypatch.setattr(os, "rmdir", guarded(real_rmdir))
    assert await workspaces.remove("ABC-1")
    monkeypatch.undo()
    assert not ws.path.exists()


async def test_remove_succeeds_when_before_remove_deletes_the_workspace_itself(
    tmp_path: Path,
) -> None:
    workspaces = manager(tmp_path, before_remove='rm -rf "$SYMPHONY_WORKSPACE"')
    ws = await workspaces.prepare("ABC-1")
    assert await workspaces.remove("ABC-1")
    assert not ws.path.exists()


async def test_remove_tolerates_files_vanishing_during_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    for name in ("a", "b", "c"):
        (ws.path / name).write_text(name)
    real_unlink = os.unlink

    def unlink_raced(path: Any, *args: Any, **kwargs: Any) -> None:
        # Someone else deletes the entry first; our own unlink then finds nothing.
        real_unlink(path, *args, **kwargs)
        raise FileNotFoundError(path)

    monkeypatch.setattr(os, "unlink", unlink_raced)
    assert await workspaces.remove("ABC-1")
    monkeypatch.undo()
    assert not ws.path.exists()


async def test_remove_reports_failure_when_deletion_is_impossible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspaces = manager(tmp_path)
    ws = await workspaces.prepare("ABC-1")
    (ws.path / "a").write_text("a")

    def unlink_denied(path: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(os, "unlink", unlink_denied)
    with pytest.raises(WorkspaceError) as err:
        await workspaces.remove("ABC-1")
    monkeypatch.undo()
    assert err.value.category == "workspace_remove_failed"


@contextlib.asynccontextmanager
async def boxed(settings: SandboxSettings, runs_root: Path) -> AsyncIterator[Host]:
    async with SandboxRun(env={"PATH": "/usr/bin:/bin"}, runs_root=runs_root) as run:
        yield await run.host(settings)


async def test_a_hook_whose_sandbox_cannot_be_made_fails_and_after_run_stays_best_effort(
    tmp_path: Path,
) -> None:
    # A file where the runs' folder should be: the sandbox refuses before any bwrap.
    runs_root = tmp_path / "runs"
    runs_root.write_text("not a folder")
    settings = SandboxSettings(kind=SandboxKind.BWRAP, network=Network.NONE)
    workspaces = WorkspaceManager(
        tmp_path / "root",
        HooksSettings(before_run="touch ran", after_run="touch ran"),
        env={"PATH": "/usr/bin:/bin"},
        hook_host=lambda: boxed(settings, runs_root),
    )
    workspace = await workspaces.prepare("ABC-1")
    with pytest.raises(WorkspaceError) as error:
        await workspaces.before_run(workspace)
    assert error.value.category == "hook_failed"
    assert "could not start: cannot prepare the sandbox:" in error.value.message
    assert str(runs_root) in error.value.message
    await workspaces.after_run(workspace)  # logged, not raised
    assert not (workspace.path / "ran").exists()
    assert runs_root.read_text() == "not a folder"  # nothing made, nothing removed
