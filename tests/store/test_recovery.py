"""Restart recovery: what a restarted daemon puts back, which old agents it stops, and the lock
that keeps a second daemon away."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from symphony import core
from symphony.base.events import AgentEvent, TokenUsage
from symphony.config.stages import StageOutcome
from symphony.core.stage_outcomes import PlannedComment, TransitionPlan
from symphony.hosts.process import INSTANCE_VARIABLE
from symphony.store import Store
from symphony.store.lock import DAEMON_RUNNING, DaemonLock, LockError
from symphony.store.recovery import orphan_groups, restore, stop_groups
from tests.factories import WALL, make_issue, make_settings
from tests.harness import is_alive, wait_until
from tests.store.test_store import NOW, busy_state


def test_a_restart_keeps_each_backoff_and_continues_interrupted_runs(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    store.save(busy_state(), mono_now=120.0, wall_now=NOW)
    later = NOW + timedelta(seconds=5)  # the restart comes 5 s after the last save
    state = core.SchedulerState()
    restore(state, store.load(later), mono_now=7.0, wall_now=later)
    retry = state.retry_attempts["id-B-1"]
    # Due 20 s after the save, so 15 s after the restart: not at once.
    assert (retry.attempt, retry.kind) == (3, core.RetryKind.FAILURE)
    assert retry.due_at == pytest.approx(7.0 + 15.0)
    run = state.retry_attempts["id-A-1"]
    assert (run.kind, run.attempt, run.due_at) == (core.RetryKind.CONTINUATION, 1, 7.0)
    assert run.resume_thread_id == "thr-1"
    move = state.transitions["id-C-1"]
    assert move.due_at == 7.0 and not move.in_flight and move.key == "plan-3"
    assert {"id-A-1", "id-A-2", "id-B-1", "id-C-1"} <= state.claimed
    assert state.ticket_totals["id-A-1"].total_tokens == 15 and state.totals.total_tokens == 15
    assert state.transition_seq == 3


@pytest.mark.parametrize("resumed", [True, False])
def test_a_continued_thread_counts_only_what_grew_beyond_its_totals_at_the_restart(
    resumed: bool,
) -> None:
    state = core.SchedulerState()
    state.retry_attempts["id-A-1"] = core.RetryEntry(
        "id-A-1", "A-1", 2, 0.0, core.RetryKind.CONTINUATION, resume_thread_id="thr-1",
        resume_tokens=(900, 100, 1000, 0),
    )  # fmt: skip
    state.claimed.add("id-A-1")
    (start,) = core.on_retries_refreshed(
        state, [state.retry_attempts["id-A-1"]], [make_issue("A-1")], make_settings(), 1.0, WALL
    )
    assert isinstance(start, core.StartWorker) and start.resume_thread_id == "thr-1"
    started = AgentEvent("session_started", message="resumed" if resumed else None)
    core.on_agent_event(state, "id-A-1", started, 2.0, WALL)
    if resumed:  # the thread's totals go on from 1000: 60 are new
        usage = TokenUsage(input_tokens=950, output_tokens=110, total_tokens=1060)
    else:  # a new thread after all: it counts from zero
        usage = TokenUsage(input_tokens=50, output_tokens=10, total_tokens=60)
    core.on_agent_event(state, "id-A-1", AgentEvent("token_usage", usage=usage), 3.0, WALL)
    assert state.totals.total_tokens == 60 and state.ticket_totals["id-A-1"].total_tokens == 60


async def test_agents_an_earlier_daemon_started_are_found_and_stopped() -> None:
    env = {**os.environ, INSTANCE_VARIABLE: "old-instance"}
    script = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    agent = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    unrelated = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert wait_until(lambda: os.getpgid(agent.pid) in orphan_groups(["old-instance"]))
        groups = orphan_groups(["old-instance"])
        assert groups == {agent.pid}  # the unrelated process is never touched
        assert orphan_groups(["another-instance"]) == set()
        assert await stop_groups(groups, grace_s=1.0) == 1
        agent.wait(5)
        assert wait_until(lambda: orphan_groups(["old-instance"]) == set())
        assert is_alive(unrelated.pid)
    finally:
        for proc in (agent, unrelated):
            proc.kill()
            proc.wait()


def test_no_proc_folder_means_nothing_is_signalled(tmp_path: Path) -> None:
    assert orphan_groups(["old"], proc=tmp_path / "nowhere") == set()


def test_a_second_daemon_is_refused_with_the_pid_holding_the_lock(tmp_path: Path) -> None:
    first = DaemonLock(tmp_path / "state.db.lock")
    first.acquire("WORKFLOW.md")
    with pytest.raises(LockError) as err:
        DaemonLock(tmp_path / "state.db.lock").acquire("WORKFLOW.md")
    assert err.value.category == DAEMON_RUNNING and f"pid {os.getpid()}" in err.value.message
    first.release()
    again = DaemonLock(tmp_path / "state.db.lock")
    again.acquire("WORKFLOW.md")  # released: free again
    again.release()


def test_a_lock_left_by_a_killed_daemon_never_blocks_a_restart(tmp_path: Path) -> None:
    lock = tmp_path / "state.db.lock"
    code = (
        "import sys, os, signal; sys.path.insert(0, sys.argv[2]);"
        "from symphony.store.lock import DaemonLock; from pathlib import Path;"
        "DaemonLock(Path(sys.argv[1])).acquire('w'); os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code, str(lock), str(Path.cwd())], check=False)
    assert lock.read_text().strip().isdigit()  # the dead daemon's pid is still written there
    DaemonLock(lock).acquire("w")


def test_a_daemon_that_loses_the_race_names_the_winner_not_a_dead_holder(tmp_path: Path) -> None:
    lock = tmp_path / "state.db.lock"
    stale = 4_194_305  # above Linux's largest pid_max: a holder that cannot be alive
    lock.write_text(f"{stale}\n")  # left by a daemon long gone, longer than our pid
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the winner has the lock, not yet its pid
    timer = threading.Timer(0.2, lambda: os.pwrite(fd, f"{os.getpid()}\n".encode(), 0))
    timer.start()
    try:
        with pytest.raises(LockError) as err:
            DaemonLock(lock).acquire("WORKFLOW.md")
    finally:
        timer.join()
        os.close(fd)
    assert f"pid {os.getpid()}" in err.value.message and str(stale) not in err.value.message


def test_wall_times_of_the_outbox_are_kept_exactly(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "state.db")
    state = busy_state()
    store.save(state, 120.0, NOW)
    saved = store.load(NOW)
    (move,) = saved.transitions
    assert move.due_at == NOW + timedelta(seconds=10) and move.due_at.tzinfo is not None


def test_a_restart_keeps_every_count_a_persons_stop_and_a_queued_cancel(tmp_path: Path) -> None:
    """A kill -9 right after a person cancelled a running ticket: the next daemon writes the
    cancel at once instead of continuing the run; the ledger's counts and the hold survive."""
    store, _ = Store.open(tmp_path / "state.db")
    state = core.SchedulerState()
    settings = make_settings(active=("Todo",))
    running, held = make_issue("A-1"), make_issue("B-1", updated_at=WALL)
    core.select_dispatches(state, [running], settings, 0.0, WALL)
    said = (PlannedComment("review_action", "ada cancelled it"),)
    cancel = TransitionPlan("review", StageOutcome.CANCELLED, "Cancelled", said, by="ada")
    state.queued_moves[running.id] = (running, cancel)
    state.ledgers[running.id].counts["conflict fix"] = 2
    state.held[held.id] = ("todo", WALL)
    store.save(state, mono_now=1.0, wall_now=NOW)
    store.close()
    again, _ = Store.open(tmp_path / "state.db")
    restored = core.SchedulerState()
    restore(restored, again.load(NOW), mono_now=5.0, wall_now=NOW)
    assert running.id not in restored.retry_attempts  # the run is not continued
    move = restored.transitions[running.id]
    assert (move.plan.target, move.plan.by, move.due_at) == ("Cancelled", "ada", 5.0)
    assert restored.ledgers[running.id].counts == {"conflict fix": 2}
    assert restored.ledgers[running.id].history == state.ledgers[running.id].history
    assert restored.held == {held.id: ("todo", WALL)}
    assert core.select_dispatches(restored, [held], settings, 6.0, WALL) == []
