"""What a child of the daemon may see: an allowlist, never the daemon's whole environment."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import AgentSettings, ServerSettings
from symphony.workspace.environment import child_environment
from tests.factories import make_settings

DAEMON = {
    "PATH": "/usr/bin",
    "HOME": "/home/dev",
    "LANG": "C.UTF-8",
    "LC_TIME": "en_GB.UTF-8",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "DATABASE_URL": "postgres://u:p@db/prod",
    "GITHUB_TOKEN": "ghp-tracker",
    "OPENAI_API_KEY": "sk-model",
    "GOPATH": "/home/dev/go",
    "NPM_CONFIG_REGISTRY": "https://registry.example",
    "NPM_CONFIG_CACHE": "/tmp/npm",
}


def settings_with(tmp_path: Path, **agent: object) -> object:
    settings = make_settings(root=tmp_path / "ws")
    return dataclasses.replace(settings, agent=AgentSettings(**agent))  # type: ignore[arg-type]


def test_a_child_gets_the_basics_and_nothing_else_of_the_daemons_environment(
    tmp_path: Path,
) -> None:
    env = child_environment(DAEMON, make_settings(root=tmp_path / "ws"), ["GITHUB_TOKEN"], "i-1")
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
        "LANG": "C.UTF-8",
        "LC_TIME": "en_GB.UTF-8",
        "SYMPHONY_WORKFLOW_DIR": str(tmp_path),
        "SYMPHONY_INSTANCE": "i-1",
    }


def test_names_prefixes_and_values_the_workflow_gives_are_added(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        env_passthrough=("GOPATH", "NPM_CONFIG_*", "NOT_SET"),
        env={"CI": "1", "GITHUB_TOKEN": "asked-for"},
    )
    env = child_environment(DAEMON, settings, ["GITHUB_TOKEN"])  # type: ignore[arg-type]
    assert env["GOPATH"] == "/home/dev/go" and env["CI"] == "1"
    assert env["NPM_CONFIG_REGISTRY"] and env["NPM_CONFIG_CACHE"] == "/tmp/npm"
    assert "NOT_SET" not in env
    # The tracker's secret is removed last, whoever asked for it.
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env


def test_an_agent_alone_gets_its_backends_variables(tmp_path: Path) -> None:
    settings = make_settings(root=tmp_path / "ws")
    agent = child_environment(DAEMON, settings, [], extra_names=("OPENAI_API_KEY",))
    hook = child_environment(DAEMON, settings, [])
    assert agent["OPENAI_API_KEY"] == "sk-model" and "OPENAI_API_KEY" not in hook


def workflow(tmp_path: Path, agent: str) -> Path:
    path = tmp_path / "WORKFLOW.md"
    path.write_text(
        "---\ntracker:\n  kind: local\n  provider: {path: board}\n"
        f"workspace:\n  root: ws\nagent:\n{agent}---\nDo it.\n"
    )
    return path


def test_agent_env_values_are_resolved_from_the_daemons_environment(tmp_path: Path) -> None:
    path = workflow(tmp_path, "  env:\n    TOKEN: $SERVICE_TOKEN\n    DEBUG: 1\n")
    settings = load_settings(path, {"SERVICE_TOKEN": "t-1", "HOME": "/nowhere"})
    assert dict(settings.agent.env) == {"TOKEN": "t-1", "DEBUG": "1"}


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            "  env:\n    TOKEN: $UNSET_ONE\n",
            r"agent\.env\.TOKEN refers to \$UNSET_ONE, which is not set",
        ),
        ("  env: [A]\n", r"agent\.env must be a map"),
        ("  env:\n    1BAD: x\n", r"is not a variable name"),
        ("  env_passthrough: [A*B]\n", r"prefixes ending in \*"),
        ("  env_passthrough: {A: 1}\n", r"agent\.env_passthrough must be a list"),
    ],
)
def test_a_bad_environment_setting_is_a_clear_config_error(
    tmp_path: Path, agent: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(workflow(tmp_path, agent), {"HOME": "/nowhere"})


def test_the_servers_token_never_reaches_a_child_even_when_passed_through(tmp_path: Path) -> None:
    token = "server-token-of-some-length"
    settings = settings_with(tmp_path, env_passthrough=("SYMPHONY_TOKEN", "ALIAS"))
    settings = dataclasses.replace(
        settings,  # type: ignore[type-var]
        server=ServerSettings(auth_token=token),
    )
    env = child_environment(
        {**DAEMON, "SYMPHONY_TOKEN": token, "ALIAS": token},
        settings,
        [],  # type: ignore[arg-type]
    )
    assert token not in env.values()


def test_the_tracker_s_credential_reaches_no_child_under_another_name(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path, env_passthrough=("GH_*",), env={"MY_TOKEN": "ghp-tracker", "CI": "1"}
    )
    daemon = {**DAEMON, "GH_ALIAS": "ghp-tracker"}
    env = child_environment(daemon, settings, ["GITHUB_TOKEN"])  # type: ignore[arg-type]
    assert "ghp-tracker" not in env.values() and env["CI"] == "1"


def test_agent_env_naming_the_tracker_s_credential_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "WORKFLOW.md"
    for alias in ("$GITHUB_TOKEN", "${GITHUB_TOKEN}", "ghp-tracker"):
        path.write_text(
            "---\ntracker:\n  kind: github\n  provider: {repository: acme/widgets, token: "
            f"$GITHUB_TOKEN}}\nworkspace:\n  root: ws\nagent:\n  env: {{GH: '{alias}'}}\n"
            "---\nDo it.\n"
        )
        with pytest.raises(ConfigError, match=r"agent\.env\.GH is tracker\.provider\.token"):
            load_settings(path, DAEMON)
