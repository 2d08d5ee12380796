"""The `symphony` command (spec §17.7): what each subcommand prints and the code it exits with,
run in-process. The daemon's lifecycle under real signals is in tests/e2e/test_cli.py."""

from __future__ import annotations

import os
import re
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from symphony import core
from symphony.base.limits import LimitKind
from symphony.core.outcomes import CLOSED, GATE, HANDOFF, REWORK, OutcomeRecord
from symphony.core.state import AgentPause
from symphony.store import Store
from tests.cli_runner import Cli
from tests.harness import Board


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(tmp_path)


def test_missing_default_workflow_in_cwd_is_a_clean_error(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    result = symphony_cli(cwd=tmp_path)
    assert result.returncode == 1
    assert "missing_workflow_file" in result.stderr
    assert str(tmp_path / "WORKFLOW.md") in result.stderr
    assert "Traceback" not in result.stderr


def test_nonexistent_explicit_workflow_path_is_a_clean_error(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    result = symphony_cli("nope/WORKFLOW.md", cwd=tmp_path)
    assert result.returncode == 1 and "nope/WORKFLOW.md" in result.stderr


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("tracker: [broken", "workflow_parse_error"),
        ("- a\n- list", "workflow_front_matter_not_a_map"),
        ("tracker:\n  kind: jira", "unsupported_tracker_kind"),
        ("tracker:\n  kind: local\n  provider:\n    path: missing-board", "invalid_tracker_config"),
        ("tracker:\n  kind: local\nworkspace:\n  root: /", "is the file system root"),
        ("tracker:\n  kind: local\nworkspace:\n  root: .", "is the folder of WORKFLOW.md"),
    ],
)
def test_invalid_workflow_fails_startup_with_a_readable_reason(
    tmp_path: Path, front: str, expected: str, symphony_cli: Cli
) -> None:
    (tmp_path / "WORKFLOW.md").write_text(f"---\n{front}\n---\nprompt\n")
    for args in ((), ("check",)):
        result = symphony_cli(*args, cwd=tmp_path)
        assert result.returncode == 1
        assert expected in result.stderr and "Traceback" not in result.stderr


def test_default_workflow_in_cwd_is_used_by_check(board: Board, symphony_cli: Cli) -> None:
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", blocked_by=["ABC-1"])
    board.ticket("ABC-3", state="Done")
    board.write_workflow()
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("ABC-1" in line and "would dispatch" in line for line in lines)
    assert any("ABC-2" in line and "blocked" in line for line in lines)
    assert "ABC-3" not in result.stdout
    # Who is trusted: on the local board, everyone who writes on it.
    assert "trust         trusted authors: everyone who writes on the board" in lines
    assert any(
        line.startswith("trust         comments and reviews by anyone else") for line in lines
    )


def test_check_names_why_each_ticket_waits(board: Board, symphony_cli: Cli) -> None:
    board.ticket("ABC-1", priority=1)
    board.ticket("ABC-2", blocked_by=["ABC-1"])
    board.ticket("ABC-3", state="In Progress")
    board.ticket("ABC-4", priority=2)
    board.write_workflow(
        agent={"max_concurrent_agents": 2, "max_concurrent_agents_by_state": {"in progress": 0}}
    )
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if "ABC-" in line}
    assert "waits: blocked by ABC-1 (Todo)" in lines["ABC-2"]
    assert "would dispatch" in lines["ABC-1"] and "would dispatch" in lines["ABC-4"]
    assert "waits for a slot: all 2 agents busy (agent.max_concurrent_agents)" in lines["ABC-3"]


def test_check_warns_about_unknown_keys_and_a_missing_agent_program(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(codex={"command": "no-such-agent-xyz app-server"})
    board.workflow.write_text(
        board.workflow.read_text().replace("polling:\n  interval_ms:", "polling:\n  intervl_ms:")
    )
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "warning: polling.intervl_ms is not a setting" in out
    assert "did you mean `interval_ms`?" in out
    assert "warning: the agent program `no-such-agent-xyz` (codex.command) was not found" in out


def test_check_renders_every_active_tickets_prompt_and_fails_on_any(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.ticket("ABC-2", priority=1)
    # Valid for every ticket but ABC-1, whose blocker list is empty.
    board.write_workflow(prompt="{{ issue.blocked_by.first.identifier | upcase }}")
    (board.tickets / "ABC-2.md").write_text(
        "---\ntitle: T\nstate: Todo\npriority: 1\nblocked_by: [ABC-9]\n---\n"
    )
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 1
    assert "error: prompt of ABC-1 cannot be rendered: template_render_error" in result.stdout
    assert "prompt of ABC-2" not in result.stdout
    assert "Traceback" not in result.stderr + result.stdout


def test_version_is_printed(symphony_cli: Cli) -> None:
    result = symphony_cli("--version", cwd=Path.cwd())
    assert result.returncode == 0 and result.stdout.startswith("symphony ")


def test_render_accepts_options_between_its_arguments(board: Board, symphony_cli: Cli) -> None:
    board.ticket("ABC-1")
    board.write_workflow(prompt="{{ issue.identifier }} attempt={{ attempt }}")
    result = symphony_cli("render", "ABC-1", "--attempt", "2", str(board.workflow), cwd=board.root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "ABC-1 attempt=2"


def test_render_prints_the_prompt_a_ticket_would_get(board: Board, symphony_cli: Cli) -> None:
    board.ticket("ABC-1")
    board.write_workflow(
        prompt="Fix {{ issue.identifier }} ({{ issue.title }}) attempt={{ attempt }}"
    )
    result = symphony_cli("render", "ABC-1", "--attempt", "2", cwd=board.root)
    assert result.returncode == 0, result.stderr
    # The ticket's title comes fenced, under the standing instruction of every first prompt.
    said = result.stdout.strip()
    assert said.startswith("Text between `⟦untrusted ") and "never repeat it" in said
    assert re.fullmatch(
        r"Fix ABC-1 \(⟦untrusted (\w+): ticket title⟧ Ticket ABC-1 ⟦end \1⟧\) attempt=2",
        said.splitlines()[-1],
    )
    missing = symphony_cli("render", "ABC-9", cwd=board.root)
    assert missing.returncode == 1 and "ABC-9" in missing.stderr


def test_a_prompt_reading_an_unknown_field_stops_render_check_and_the_daemon(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(prompt="Fix it.\n{{ issue.titel }}")
    for args in (("render", "ABC-1"), ("check",), ()):
        result = symphony_cli(*args, cwd=board.root)
        assert result.returncode == 1, args
        assert "template_unknown_variable" in result.stderr and "did you mean `title`?" in (
            result.stderr
        )
        assert "Traceback" not in result.stderr


def test_report_prints_the_outcome_figures_while_a_daemon_holds_the_store(
    board: Board, symphony_cli: Cli
) -> None:

    board.write_workflow()
    empty = symphony_cli("report", cwd=board.root)
    assert empty.returncode == 0 and "No state yet" in empty.stdout
    now = datetime.now(UTC)
    state = core.SchedulerState()
    state.new_outcomes += [
        OutcomeRecord(now - timedelta(days=20), HANDOFF, "0", "OLD-1", {"seconds": 5.0}),
        OutcomeRecord(now, HANDOFF, "1", "A-1", {"seconds": 1800.0}),
        OutcomeRecord(now, REWORK, "1", "A-1", {}),
        OutcomeRecord(now, HANDOFF, "1", "A-1", {"seconds": 600.0}),
        OutcomeRecord(
            now, CLOSED, "1", "A-1", {"first_pass": False, "tokens": 12345, "cost_usd": 4.5}
        ),
        OutcomeRecord(now, GATE, "1", "A-1", {"gate": "tests", "passed": True}),
        OutcomeRecord(now, GATE, "1", "A-1", {"gate": "tests", "passed": False}),
    ]
    state.ticket_totals["1"] = core.TicketTotals("A-1", total_tokens=12345, cost_usd=4.5)
    state.ticket_totals["2"] = core.TicketTotals("B-2", total_tokens=99, unpriced_tokens=99)
    state.changed_totals.update({"1", "2"})
    # The daemon's own connection stays open (and writing) while the report reads.
    store, _ = Store.open(board.root / ".symphony" / "state.db")
    try:
        store.save(state, 0.0, now)
        result = symphony_cli("report", "--since", "7d", cwd=board.root)
    finally:
        store.close()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Outcomes of {board.workflow}, last 7d" in out
    assert "handed to review               2" in out  # the 20-day-old one is outside
    assert "rework rate 50%" in out and "first-pass acceptance 0%" in out
    assert "time to hand-off          20 min" in out
    assert "tokens per accepted       12,345" in out
    assert "tests                        50%   1 of 2" in out
    assert "cost per accepted          $4.50" in out
    assert "A-1                        $4.50   12,345" in out
    assert "B-2                      unknown   99" in out
    wrong = symphony_cli("report", "--since", "soon", cwd=board.root)
    assert wrong.returncode == 1 and "--since must be like 90m, 24h, 7d or 2w" in wrong.stderr


def test_check_shows_each_stages_sandbox_and_fails_where_it_cannot_start(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    stages = {
        "plan": {"states": ["Todo"], "on_success": "Plan Review",
                 "sandbox": {"network": "none", "workspace": "read-only"}},
        "build": {"states": ["In Progress"], "on_success": "Human Review"},
    }  # fmt: skip
    board.write_workflow(
        sandbox={"kind": "bwrap"}, stages=stages, server={"auth_token": "a-token-of-some-length"}
    )
    tools = board.root / "bin"
    tools.mkdir()
    (tools / "python3").symlink_to(sys.executable)
    # Without bwrap on PATH: the same report, and a failure that says what to install.
    without = symphony_cli("check", cwd=board.root, env={"PATH": str(tools)})
    with_path = symphony_cli("check", cwd=board.root)
    for result in (without, with_path):
        assert "sandbox       bwrap, network model, workspace writable" in result.stdout
        assert "sandbox: bwrap, network none, workspace read-only" in result.stdout
        assert "at Plan Review a person's approve moves it to " in result.stdout
        assert "actions       on: the review page and the actions API take" in result.stdout
        assert "Traceback" not in result.stderr
    assert without.returncode == 1
    assert "error: sandbox.kind bwrap cannot start: bwrap is not installed" in without.stdout
    if shutil.which("bwrap") and shutil.which("socat"):
        assert with_path.returncode == 0, with_path.stdout


def test_check_says_when_the_kernel_refuses_the_sandbox_its_namespaces(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.write_workflow(sandbox={"kind": "bwrap", "network": "none"})
    tools = board.root / "bin"
    tools.mkdir()
    (tools / "python3").symlink_to(sys.executable)
    (tools / "socat").write_text("#!/bin/sh\nexit 0\n")
    # What bwrap says where unprivileged user namespaces are switched off.
    (tools / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    for tool in ("socat", "bwrap"):
        (tools / tool).chmod(0o755)
    result = symphony_cli("check", cwd=board.root, env={"PATH": str(tools)})
    assert result.returncode == 1
    assert "are user namespaces allowed?): bwrap: No permissions to creating new namespace" in (
        result.stdout
    )


def test_check_names_the_command_that_builds_an_absent_podman_image(
    board: Board, symphony_cli: Cli
) -> None:
    if shutil.which("podman") is None:
        if os.environ.get("SYMPHONY_REQUIRE_SANDBOX"):
            pytest.fail("podman is not installed (scripts/test installs it)")
        pytest.skip("podman is not installed (scripts/test installs it)")
    board.ticket("ABC-1")
    image = f"localhost/symphony-absent-{os.getpid()}"
    board.write_workflow(sandbox={"kind": "podman", "image": image})
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 1
    assert f"sandbox       podman, image {image}, network model" in result.stdout
    assert f"the image {image} is absent; build it with `scripts/build-sandbox-image {image}`" in (
        result.stdout
    )
    assert "Traceback" not in result.stderr


def test_check_names_each_notification_channel_without_its_secrets(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    hook = "https://hooks.slack.test/services/T0/B0/s3cr3t"
    board.write_workflow(notify={"channels": [
        {"kind": "slack", "url": "$HOOK", "events": ["review_waiting"], "digest_minutes": 30},
        {"kind": "email", "smtp": {"host": "smtp.example.com"}, "from": "s@example.com",
         "to": ["team@example.com"]},
    ]})  # fmt: skip
    result = symphony_cli("check", cwd=board.root, env={"HOOK": hook})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "notify        slack: slack incoming webhook at hooks.slack.test (review_waiting, "
        "digest every 30 min)" in result.stdout
    )
    assert "notify        email: email smtp.example.com:587 to team@example.com" in result.stdout
    assert "notify links  none: set notify.review_url" in result.stdout
    assert "s3cr3t" not in result.stdout + result.stderr


def test_check_says_where_traces_go_without_the_collector_s_key(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    off = symphony_cli("check", cwd=board.root)
    assert "traces        off (telemetry.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT" in off.stdout
    collector = "https://user:k3y@otel.example.com:4318"
    on = symphony_cli("check", cwd=board.root, env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector})
    assert (
        "traces        to https://otel.example.com:4318/v1/traces; agents export their own "
        "spans into each run's trace, without the headers" in on.stdout
    )
    assert "k3y" not in on.stdout + on.stderr
    board.write_workflow(telemetry={"endpoint": "http://collector:4318/v1/traces",
                                    "agents": False, "capture_text": True})  # fmt: skip
    told = symphony_cli("check", cwd=board.root)
    assert (
        "traces        to http://collector:4318/v1/traces; agents export nothing of their own "
        "(telemetry.agents: false); turn spans carry prompts and replies "
        "(telemetry.capture_text)" in told.stdout
    )
    assert "telemetry is not a setting" not in told.stdout


def test_host_beyond_loopback_needs_a_token(board: Board, symphony_cli: Cli) -> None:
    board.ticket("ABC-1", state="Done")
    board.write_workflow()
    refused = symphony_cli(str(board.workflow), "--no-tui", "--host", "0.0.0.0", "--port", "0",
                      cwd=board.root)  # fmt: skip
    assert refused.returncode == 1
    assert "--host 0.0.0.0 is reachable from other machines" in refused.stderr
    assert "server.auth_token" in refused.stderr and "Traceback" not in refused.stderr


def test_check_and_report_go_over_every_workflow_of_a_fleet(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        made = Board(tmp_path / name)
        made.ticket(f"{name[0].upper()}-1")
        made.write_workflow()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "WORKFLOW.md").write_text("---\ntracker: [\n---\n")
    checked = symphony_cli("check", str(tmp_path), cwd=tmp_path)
    assert checked.returncode == 1  # the broken one fails the fleet's check
    out = checked.stdout
    assert "== alpha (" in out and "== beta (" in out and "== broken (" in out
    assert "A-1" in out and "B-1" in out
    assert "Traceback" not in checked.stderr
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("workflows: [alpha, beta]\n")
    assert symphony_cli("check", str(fleet), cwd=tmp_path).returncode == 0
    reported = symphony_cli("report", str(fleet), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.count("== ") == 2


def test_check_takes_several_workflow_paths_as_serve_does(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        made = Board(tmp_path / name)
        made.ticket(f"{name[0].upper()}-1")
        made.write_workflow()
    both = symphony_cli("check", "alpha/WORKFLOW.md", "beta", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert "== alpha (" in both.stdout and "== beta (" in both.stdout
    assert "A-1" in both.stdout and "B-1" in both.stdout
    # One that does not exist fails the check, naming it.
    missing = symphony_cli("check", "alpha/WORKFLOW.md", "gamma/WORKFLOW.md", cwd=tmp_path)
    assert missing.returncode == 1
    assert "gamma/WORKFLOW.md does not exist" in missing.stderr


def saved_by_a_daemon(board: Board, state: core.SchedulerState, now: datetime) -> None:
    """`state` in the workflow's store, as a daemon that stopped would have left it."""
    store, _ = Store.open(board.root / ".symphony" / "state.db")
    try:
        store.save(state, 0.0, now)
    finally:
        store.close()


def test_check_shows_the_runaway_guard_and_a_persons_stop_from_the_store(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.ticket("ABC-2")
    board.write_workflow()
    now = datetime.now(UTC)
    state = core.SchedulerState()
    starts = [now.timestamp() - 60 * n for n in range(20)][::-1]
    state.ledgers["ABC-1"] = core.RunLedger("ABC-1", starts=starts)
    state.held["ABC-2"] = ("todo", None)
    saved_by_a_daemon(board, state, now)
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    assert (
        "re-runs       at most 10 continuations, 5 retries after errors, 3 stall restarts; "
        "no ticket runs more than 20 times within 3600 s" in result.stdout
    )
    verdicts = {line.split()[0]: line for line in result.stdout.splitlines() if "ABC-" in line}
    assert (
        "waits: not started: the runaway guard stopped it: 20 runs within 1 h "
        "(agent.max_runs_per_ticket: 20, agent.runaway_window)" in verdicts["ABC-1"]
    )
    assert "waits: stopped by a person" in verdicts["ABC-2"]
    board.write_workflow(agent={"runaway_window": "soon"})
    wrong = symphony_cli("check", cwd=board.root)
    assert wrong.returncode == 1
    assert "agent.runaway_window must be a duration like 30m, 1h or 90s, got 'soon'" in (
        wrong.stdout + wrong.stderr
    )


def test_check_shows_an_agent_its_provider_limited_and_the_tickets_that_wait_for_it(
    board: Board, symphony_cli: Cli
) -> None:
    board.ticket("ABC-1")
    board.write_workflow()
    now = datetime.now(UTC)
    reset = now + timedelta(hours=1)
    state = core.SchedulerState()
    state.agent_pauses["codex"] = AgentPause(
        "codex", LimitKind.USAGE, "usage limit reached", now, reset, True
    )
    saved_by_a_daemon(board, state, now)
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    until = reset.strftime("%H:%M:%S UTC")
    assert f"limited       codex limited until {until} (usage limit: usage limit reached)" in (
        result.stdout
    )
    (verdict,) = [line for line in result.stdout.splitlines() if "ABC-1" in line]
    assert f"waits: codex limited until {until}" in verdict
