"""Every file under examples/ is checked the way `symphony check` would check it, so an example
can never rot: workflows load with no warning and a template the daemon can render, ticket files
parse, scripts compile."""

from __future__ import annotations

import py_compile
import re
import shlex
from pathlib import Path

import pytest
import yaml

from symphony.cli import main as cli
from symphony.config.load import load_settings
from symphony.config.prompt import StageContext, check_prompts, render_prompt
from symphony.config.sections import HooksSettings
from symphony.tracker.contract import TrackerContext, create_tracker
from symphony_adapters.local.board import LocalBoard
from tests.quickstart import prepare_quickstart

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# What the SaaS examples read from the environment; values only need to look like credentials.
ENV = {
    "GITHUB_TOKEN": "ghp_example_token_000",
    "LINEAR_API_KEY": "lin_api_example_000",
    "GITLAB_TOKEN": "glpat-example-000",
    "KAITEN_TOKEN": "kaiten_example_000",
}

WORKFLOWS = sorted(EXAMPLES.glob("*/WORKFLOW.md"))
TICKETS = sorted(EXAMPLES.glob("**/board/*.md"))


def test_every_tracker_has_an_example() -> None:
    from symphony.cli.init import TRACKERS

    assert {path.parent.name for path in WORKFLOWS} == set(TRACKERS)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.parent.name)
async def test_example_workflow_passes_the_checks_symphony_check_makes(
    workflow: Path, tmp_path: Path
) -> None:
    settings = load_settings(workflow, {**ENV, "HOME": str(tmp_path)})
    assert settings.warnings == ()
    check_prompts(settings)
    # Every starter is a stage machine: the agent reports, the daemon moves the ticket (and,
    # with a repository, pushes and opens the pull request); no prompt tells the agent to.
    assert settings.machine is not None
    prompt = settings.prompt_template
    assert "report_outcome" in prompt
    tools = r"_move_(issue|card)|_link_(pull|merge)_request|linear_attach_url|kaiten_add_link"
    assert not re.search(tools, prompt)
    tracker = create_tracker(settings.tracker, TrackerContext(workflow.parent, ENV))
    try:
        assert tracker.agent_tools(), "agents of this example would have no tracker tools"
        if isinstance(tracker, LocalBoard):
            issues = await tracker.fetch_issues_by_states(settings.tracker.active_states)
            assert issues, "the sample board has no active ticket"
            for issue in issues:
                stage = settings.machine.stage_for(issue.state)
                assert stage is not None
                context = StageContext(stage.name, None, ())
                render_prompt(stage.prompt_template, issue, None, context)
    finally:
        await tracker.aclose()


async def test_the_quickstart_workflow_passes_the_checks_on_its_board(tmp_path: Path) -> None:
    workflow = prepare_quickstart(tmp_path)
    settings = load_settings(workflow, {})
    assert settings.warnings == () and settings.machine is not None
    check_prompts(settings)
    tracker = create_tracker(settings.tracker, TrackerContext(tmp_path, {}))
    issues = await tracker.fetch_issues_by_states(settings.tracker.active_states)
    assert len(issues) >= 3
    for issue in issues:
        stage = settings.machine.stage_for(issue.state)
        assert stage is not None
        render_prompt(stage.prompt_template, issue, None, StageContext(stage.name, None, ()))


@pytest.mark.parametrize("ticket", TICKETS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
async def test_example_ticket_files_parse(ticket: Path) -> None:
    board = LocalBoard(ticket.parent, ("Todo", "In Progress"), ("Done", "Cancelled"))
    issues = await board.fetch_issues_by_ids([ticket.stem])
    assert [issue.identifier for issue in issues] == [ticket.stem]


@pytest.mark.parametrize(
    "script", sorted(EXAMPLES.glob("**/*.py")), ids=lambda p: str(p.relative_to(EXAMPLES))
)
def test_example_scripts_compile(script: Path, tmp_path: Path) -> None:
    py_compile.compile(str(script), cfile=str(tmp_path / "out.pyc"), doraise=True)


def _unit_service_section(text: str) -> dict[str, str]:
    """The [Service] settings of a systemd unit, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    section, values = "", {}
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            values[key] = value
    return values


def test_the_systemd_unit_runs_the_daemon_with_options_it_accepts_and_stops_it_gracefully(
    tmp_path: Path,
) -> None:
    text = (EXAMPLES / "deploy" / "symphony.service").read_text()
    service = _unit_service_section(text)
    program, *args = shlex.split(service["ExecStart"])
    assert program.endswith("/symphony")
    options = cli._run_parser().parse_intermixed_args(args)  # exits on an option it lacks
    assert options.no_tui and options.logs_root == Path("/var/log/symphony")
    # SIGTERM to the daemon alone, and time for the after_run hooks before systemd kills.
    assert service["KillMode"] == "mixed" and service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > HooksSettings().timeout_ms / 1000
    assert service["Restart"] == "on-failure"
    # The WORKFLOW.md lines its comment gives put state and workspaces in StateDirectory.
    snippet = re.search(r"# In WORKFLOW.md.*?\n#\n((?:#   .*\n)+)", text)
    assert snippet is not None
    extra = yaml.safe_load("\n".join(line[4:] for line in snippet.group(1).splitlines()))
    workflow = (EXAMPLES / "local" / "WORKFLOW.md").read_text()
    front, body = workflow.split("---\n")[1:3]
    config = {**yaml.safe_load(front), **extra}
    (tmp_path / "WORKFLOW.md").write_text(f"---\n{yaml.safe_dump(config)}---\n{body}")
    state_dir = tmp_path / "var-lib-symphony"
    settings = load_settings(tmp_path / "WORKFLOW.md", {"STATE_DIRECTORY": str(state_dir)})
    assert settings.state is not None and settings.state.path == state_dir / "state.db"
    assert settings.workspace.root == state_dir / "workspaces"
