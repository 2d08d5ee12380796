"""WORKFLOW.md loading, typed settings and strict prompt rendering (spec §5, §6, §12, §17.1)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from symphony.base.fences import plain
from symphony.base.issue import ISSUE_TEMPLATE_SHAPE, BlockerRef
from symphony.config.fields import ConfigError, resolve_secret
from symphony.config.load import load_settings
from symphony.config.prompt import (
    TEMPLATE_PARSE_ERROR,
    TEMPLATE_RENDER_ERROR,
    TEMPLATE_UNKNOWN_FILTER,
    TEMPLATE_UNKNOWN_VARIABLE,
    PromptError,
    check_template,
    continuation_prompt,
    render_material,
    render_prompt,
)
from symphony.config.workflow import (
    MISSING_WORKFLOW_FILE,
    WORKFLOW_FRONT_MATTER_NOT_A_MAP,
    WORKFLOW_PARSE_ERROR,
    WorkflowError,
    read_workflow,
)
from symphony.tracker.contract import UNSUPPORTED_TRACKER_KIND, TrackerError
from tests.factories import make_issue


def write(tmp_path: Path, text: str, name: str = "WORKFLOW.md") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MINIMAL = (
    "---\ntracker:\n  kind: local\n  provider:\n    path: board\n---\nDo {{ issue.identifier }}\n"
)


# Workflow file


def test_missing_workflow_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError) as err:
        read_workflow(tmp_path / "WORKFLOW.md")
    assert err.value.category == MISSING_WORKFLOW_FILE
    assert str(tmp_path / "WORKFLOW.md") in err.value.message


def test_invalid_yaml_front_matter_is_a_typed_error_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "---\ntracker:\n  kind: [local\n---\nbody\n")
    with pytest.raises(WorkflowError) as err:
        read_workflow(path)
    assert err.value.category == WORKFLOW_PARSE_ERROR
    assert "line" in err.value.message


def test_list_front_matter_is_not_a_map_error(tmp_path: Path) -> None:
    path = write(tmp_path, "---\n- a\n- b\n---\nbody\n")
    with pytest.raises(WorkflowError) as err:
        read_workflow(path)
    assert err.value.category == WORKFLOW_FRONT_MATTER_NOT_A_MAP


def test_unclosed_front_matter_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError) as err:
        read_workflow(write(tmp_path, "---\ntracker: {}\nbody without end\n"))
    assert err.value.category == WORKFLOW_PARSE_ERROR


def test_file_without_front_matter_is_all_prompt_and_empty_config(tmp_path: Path) -> None:
    workflow = read_workflow(write(tmp_path, "\n  Just a prompt.  \n"))
    assert workflow.config == {} and workflow.prompt_template == "Just a prompt."


def test_front_matter_and_trimmed_body_are_split(tmp_path: Path) -> None:
    workflow = read_workflow(write(tmp_path, MINIMAL))
    assert workflow.config["tracker"]["kind"] == "local"
    assert workflow.prompt_template == "Do {{ issue.identifier }}"


def test_explicit_workflow_path_is_used(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL, name="custom.md")
    assert load_settings(path, {}).workflow_path == path


# Settings


def test_defaults_apply_when_optional_values_are_missing(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL), {})
    assert settings.polling.interval_ms == 30_000
    assert settings.workspace.root == Path(tempfile.gettempdir()) / "symphony_workspaces"
    assert settings.hooks.timeout_ms == 60_000 and settings.hooks.after_create is None
    assert settings.agent.max_concurrent_agents == 10
    assert settings.agent.max_turns == 20
    assert settings.agent.max_retry_backoff_ms == 300_000
    assert dict(settings.agent.max_concurrent_agents_by_state) == {}
    assert settings.agents["codex"].command == "codex app-server"
    assert settings.agents["codex"].turn_timeout_ms == 3_600_000
    assert settings.agents["codex"].read_timeout_ms == 5_000
    assert settings.agents["codex"].stall_timeout_ms == 300_000
    assert settings.tracker.active_states == ("Todo", "In Progress")
    assert settings.tracker.terminal_states == ("Done", "Cancelled", "Closed")
    assert settings.tracker.required_labels == ()


def test_missing_tracker_kind_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tracker\.kind is required"):
        load_settings(write(tmp_path, "---\npolling:\n  interval_ms: 5\n---\nx\n"), {})


def test_unknown_tracker_kind_is_rejected_naming_the_supported_ones(tmp_path: Path) -> None:
    with pytest.raises(TrackerError) as err:
        load_settings(write(tmp_path, "---\ntracker:\n  kind: jira\n---\nx\n"), {})
    assert err.value.category == UNSUPPORTED_TRACKER_KIND
    assert "local" in err.value.message


def test_tracker_kind_that_looks_like_a_path_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TrackerError):
        load_settings(write(tmp_path, "---\ntracker:\n  kind: ../evil\n---\nx\n"), {})


def test_provider_keeps_adapter_owned_keys_verbatim(tmp_path: Path) -> None:
    text = MINIMAL.replace("path: board", "path: board\n    custom_key: {a: 1}\n    token: $T")
    settings = load_settings(write(tmp_path, text), {"T": "secret"})
    assert settings.tracker.provider["custom_key"] == {"a": 1}
    assert settings.tracker.provider["token"] == "$T"  # resolution belongs to the adapter


def test_relative_workspace_root_resolves_against_the_workflow_folder(tmp_path: Path) -> None:
    text = MINIMAL.replace("---\nDo", "workspace:\n  root: ./ws/../spaces\n---\nDo")
    assert load_settings(write(tmp_path, text), {}).workspace.root == tmp_path / "spaces"


def test_workspace_root_expands_env_vars_and_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    text = MINIMAL.replace("---\nDo", "workspace:\n  root: $WS_BASE/x\n---\nDo")
    assert load_settings(write(tmp_path, text), {"WS_BASE": "/srv/ws"}).workspace.root == Path(
        "/srv/ws/x"
    )
    text = MINIMAL.replace("---\nDo", "workspace:\n  root: ~/spaces\n---\nDo")
    assert load_settings(write(tmp_path, text), {}).workspace.root == tmp_path / "home" / "spaces"


def test_workspace_root_naming_an_unset_variable_is_an_error(tmp_path: Path) -> None:
    text = MINIMAL.replace("---\nDo", "workspace:\n  root: ${NOPE}/x\n---\nDo")
    with pytest.raises(ConfigError, match=r"\$NOPE"):
        load_settings(write(tmp_path, text), {})


def test_secret_reference_resolves_and_empty_counts_as_missing() -> None:
    assert resolve_secret("$TOKEN", {"TOKEN": "abc"}) == "abc"
    assert resolve_secret("${TOKEN}", {"TOKEN": "abc"}) == "abc"
    assert resolve_secret("$TOKEN", {"TOKEN": ""}) is None
    assert resolve_secret("$TOKEN", {}) is None
    assert resolve_secret("literal", {}) == "literal"


def test_codex_command_is_kept_as_a_shell_string(tmp_path: Path) -> None:
    text = MINIMAL.replace("---\nDo", 'codex:\n  command: codex app-server --x "$HOME" ~\n---\nDo')
    settings = load_settings(write(tmp_path, text), {})
    assert settings.agents["codex"].command == 'codex app-server --x "$HOME" ~'


def test_per_state_limits_normalize_names_and_ignore_invalid_entries(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "---\nDo",
        "agent:\n  max_concurrent_agents_by_state:\n    ' In Progress ': 2\n    Todo: 0\n"
        "    Review: abc\n    Done: -1\n    QA: '3'\n---\nDo",
    )
    limits = load_settings(write(tmp_path, text), {}).agent.max_concurrent_agents_by_state
    assert dict(limits) == {"in progress": 2, "qa": 3}


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("agent:\n  max_turns: 0", r"agent\.max_turns"),
        ("agent:\n  max_turns: lots", r"agent\.max_turns"),
        ("hooks:\n  timeout_ms: -5", r"hooks\.timeout_ms"),
        ("polling:\n  interval_ms: true", r"polling\.interval_ms"),
        ("codex:\n  command: ''", r"codex\.command"),
        ("agent: [1, 2]", r"agent must be a map"),
        ("agent:\n  kind: gemini", r"agent\.kind is 'gemini', which symphony does not drive"),
        ("agent:\n  kind: 3", r"agent\.kind must name an agent"),
    ],
)
def test_invalid_values_fail_validation_naming_the_field(
    tmp_path: Path, section: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=value):
        load_settings(write(tmp_path, MINIMAL.replace("---\nDo", f"{section}\n---\nDo")), {})


def test_required_labels_are_normalized(tmp_path: Path) -> None:
    text = MINIMAL.replace("  provider:", "  required_labels: [' Agent ', Backend]\n  provider:")
    assert load_settings(write(tmp_path, text), {}).tracker.required_labels == ("agent", "backend")


def test_empty_prompt_body_falls_back_to_the_default_prompt(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, MINIMAL.replace("Do {{ issue.identifier }}\n", "")), {}
    )
    assert settings.prompt_template == "You are working on an issue from the configured tracker."


# Prompt


def test_prompt_renders_issue_fields_and_attempt() -> None:
    issue = make_issue(
        "ABC-7", labels=("a", "b"), blocked_by=(BlockerRef("1", "ABC-1", "Todo"),), priority=2
    )
    template = (
        "{{ issue.identifier }} {{ issue.title }} p{{ issue.priority }}"
        "{% for l in issue.labels %} #{{ l }}{% endfor %}"
        "{% for b in issue.blocked_by %} after {{ b.identifier }}{% endfor %}"
        "{% if attempt %} retry {{ attempt }}{% endif %}"
    )
    rendered = plain(render_material(template, issue, None))
    assert rendered == "ABC-7 ticket title: Title of ABC-7 p2 #a #b after ABC-1"
    assert render_prompt(template, issue, 3).endswith(" retry 3")


def test_the_description_is_fenced_under_the_name_of_who_opened_the_ticket() -> None:
    template = "{{ issue.description }} / {{ issue.author }}"
    opened = make_issue(description="Fix it.", author="alice")
    assert plain(render_material(template, opened, None)) == (
        "ticket description by @alice: Fix it. / alice"
    )
    unknown = make_issue(description="Fix it.")
    assert plain(render_material(template, unknown, None)) == "ticket description: Fix it. / "


def test_prompt_reading_a_field_the_daemon_does_not_provide_is_refused_before_rendering() -> None:
    with pytest.raises(PromptError) as err:
        check_template("Fix it.\n\n{{ issue.titel }}", first_line=12)
    assert err.value.category == TEMPLATE_UNKNOWN_VARIABLE
    message = err.value.message
    assert "prompt line 14" in message and "`issue.titel`" in message
    assert "did you mean `title`?" in message and "issue.identifier" in message


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("{{ tracker }}", "`tracker`"),
        ("{{ issue.blocked_by[0].identifer }}", "`issue.blocked_by[0].identifer`"),
        ("{{ issue.labels.names }}", "`issue.labels` is a list"),
        ("{{ issue.title.text }}", "`issue.title` is a plain value"),
        ("{% if attempt %}{{ attempt.count }}{% endif %}", "`attempt` is a plain value"),
    ],
)
def test_every_unknown_variable_path_is_refused(template: str, shown: str) -> None:
    with pytest.raises(PromptError) as err:
        check_template(template)
    assert err.value.category == TEMPLATE_UNKNOWN_VARIABLE and shown in err.value.message


def test_prompt_reading_only_what_the_daemon_provides_passes_the_check() -> None:
    check_template(
        "{{ issue.title | upcase }} {{ issue.labels.first }} {{ issue.labels.size }}"
        "{% for b in issue.blocked_by %}{{ b.identifier }}{{ forloop.index }}"
        "{{ issue.labels[forloop.index0] }}{% endfor %}"
        "{{ issue.blocked_by[0].state }} {{ issue.native_ref.number }} {{ issue.url.size }}"
        "{% assign n = attempt | plus: 1 %}{{ n }}"
    )


def test_prompt_rendering_fails_on_unknown_variable() -> None:
    with pytest.raises(PromptError) as err:
        render_prompt("{{ issue.nope }}", make_issue(), None)
    assert err.value.category == TEMPLATE_UNKNOWN_VARIABLE


def test_a_provided_value_that_is_null_at_render_time_is_still_a_render_error() -> None:
    with pytest.raises(PromptError) as err:
        render_prompt("{{ issue.native_ref.number }}", make_issue(), None)
    assert err.value.category == TEMPLATE_RENDER_ERROR


def test_prompt_rendering_fails_on_unknown_filter() -> None:
    with pytest.raises(PromptError) as err:
        render_prompt("{{ issue.title | upcse }}", make_issue(), None)
    assert err.value.category == TEMPLATE_UNKNOWN_FILTER
    assert "upcse" in err.value.message and "did you mean `upcase`?" in err.value.message


def test_template_shape_matches_what_issues_hand_to_templates() -> None:
    assert set(ISSUE_TEMPLATE_SHAPE) == set(make_issue().to_template())


def test_unknown_keys_of_known_sections_are_reported_with_the_nearest_key(
    tmp_path: Path,
) -> None:
    text = MINIMAL.replace(
        "---\nDo", "polling: {intervl_ms: 1000}\npollng: 3\nx-other-tool: {a: 1}\n---\nDo"
    ).replace("path: board", "path: board\n    pth: x")
    settings = load_settings(write(tmp_path, text), {})
    assert settings.polling.interval_ms == 30_000  # ignored, as the spec says, but reported
    warnings = "\n".join(settings.warnings)
    assert "polling.intervl_ms is not a setting" in warnings
    assert "did you mean `interval_ms`?" in warnings
    assert "pollng" in warnings and "did you mean `polling`?" in warnings
    assert "tracker.provider.pth" in warnings and "did you mean `path`?" in warnings
    assert "x-other-tool" in warnings and len(settings.warnings) == 4


def test_prompt_line_is_where_the_template_starts_in_the_file(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL.replace("---\nDo", "---\n\n\nDo")), {})
    assert settings.prompt_line == 9


def test_prompt_with_broken_syntax_is_a_parse_error() -> None:
    with pytest.raises(PromptError) as err:
        render_prompt("{% if issue.title %}unclosed", make_issue(), None)
    assert err.value.category == TEMPLATE_PARSE_ERROR


@pytest.mark.parametrize(
    ("template", "line", "said"),
    [
        ("Work on it.\n\n{% foo %}\n", 11, "unexpected tag 'foo'"),
        ("Work on it.\n{% if issue.title %}\nunclosed\n", 10, "expected tag endif"),
        ("One.\nTwo.\n{{ issue.title | }}\nThree.\n", 11, "expected"),
    ],
)
def test_a_prompt_syntax_error_names_its_line_in_workflow_md(
    template: str, line: int, said: str
) -> None:
    with pytest.raises(PromptError) as err:
        check_template(template, first_line=9, source="WORKFLOW.md")
    assert err.value.category == TEMPLATE_PARSE_ERROR
    assert err.value.message.startswith(f"prompt line {line} of WORKFLOW.md: {said}")


def test_continuation_prompt_is_guidance_not_the_original_prompt() -> None:
    text = continuation_prompt(make_issue("ABC-7", state="In Progress"), 2, 5)
    assert "ABC-7" in text and "2 of at most 5" in text and "In Progress" in text


def test_explicitly_empty_active_states_is_an_error(tmp_path: Path) -> None:
    text = MINIMAL.replace("  provider:", "  active_states: []\n  provider:")
    with pytest.raises(ConfigError, match="at least one state"):
        load_settings(write(tmp_path, text), {})


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("/", "the file system root"),
        (".", "the folder of WORKFLOW.md"),
        ("..", "a folder above WORKFLOW.md"),
        ("$HOME", "your home folder"),
        ('"~"', "your home folder"),
        ("linked", "the folder of WORKFLOW.md"),
    ],
)
def test_workspace_root_that_could_hold_a_persons_folders_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str, why: str
) -> None:
    home = tmp_path / "home"
    project = home / "src" / "project"
    project.mkdir(parents=True)
    (project / "linked").symlink_to(project)
    monkeypatch.setenv("HOME", str(home))
    text = MINIMAL.replace("---\nDo", f"workspace:\n  root: {root}\n---\nDo")
    with pytest.raises(ConfigError) as err:
        load_settings(write(project, text), {"HOME": str(home)})
    assert why in err.value.message and "workspace.root" in err.value.message


def test_workspace_root_inside_the_workflow_folder_is_accepted(tmp_path: Path) -> None:
    text = MINIMAL.replace("---\nDo", "workspace:\n  root: .symphony/workspaces\n---\nDo")
    settings = load_settings(write(tmp_path, text), {})
    assert settings.workspace.root == tmp_path / ".symphony" / "workspaces"


def test_every_credential_the_workflow_names_is_one_the_daemon_masks(tmp_path: Path) -> None:
    text = (
        "---\ntracker:\n  kind: local\n  provider:\n    path: board\n"
        "    webhook_secret: $HOOK_SECRET\n"
        "server:\n  auth_token: $SERVER_TOKEN\n"
        "agent:\n  env:\n    OPENAI_API_KEY: $OPENAI_KEY\n    EDITOR: vim\n"
        "notify:\n  channels:\n    - {kind: webhook, url: 'https://hooks.test/x', "
        "secret: literal-signing-secret}\n"
        "---\nDo {{ issue.identifier }}\n"
    )
    environ = {
        "HOOK_SECRET": "hook-secret-value",
        "SERVER_TOKEN": "server-token-value-long",
        "OPENAI_KEY": "openai-key-value",
    }
    settings = load_settings(write(tmp_path, text), environ)
    assert set(settings.credentials) == {
        "hook-secret-value", "server-token-value-long", "openai-key-value",
        "literal-signing-secret",
    }  # fmt: skip
    assert "hook-secret-value" not in repr(settings)  # kept out of every repr


def test_an_unchanged_settled_workflow_file_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "WORKFLOW.md"
    path.write_text("---\ntracker: {kind: local}\n---\nFirst {{ issue.identifier }}\n")
    old = time.time() - 60
    os.utime(path, (old, old))
    reads: list[Path] = []
    real = Path.read_bytes

    def counted(self: Path) -> bytes:
        reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counted)
    first = read_workflow(path)
    assert read_workflow(path) is first and len(reads) == 1  # stat says nothing changed
    # Same size, other bytes, an older time put back: the change time still tells.
    path.write_text("---\ntracker: {kind: local}\n---\nOther {{ issue.identifier }}\n")
    os.utime(path, (old, old))
    changed = read_workflow(path)
    assert changed.prompt_template.startswith("Other") and len(reads) == 2
    # A file written in the last two seconds is read every time: a second write in the same
    # clock tick would leave its stat as it was.
    path.write_text("---\ntracker: {kind: local}\n---\nThird {{ issue.identifier }}\n")
    read_workflow(path)
    read_workflow(path)
    assert len(reads) == 4
