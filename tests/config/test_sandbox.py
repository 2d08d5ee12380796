"""`sandbox:` parsing: defaults, key-by-key merge of a stage's block, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sandbox import (
    HostPattern,
    Network,
    SandboxKind,
    SandboxSettings,
    WorkspaceAccess,
    parse_host_pattern,
    parse_sandbox,
)


def parse(
    top: object, stage: object = None, environ: dict[str, str] | None = None
) -> SandboxSettings:
    return parse_sandbox(
        top, stage, where="stages.plan.sandbox", base_dir=Path("/repo"), environ=environ or {}
    )


def test_no_block_means_no_sandbox_and_the_full_network() -> None:
    settings = parse(None)
    assert settings.kind is SandboxKind.NONE and not settings.enabled
    assert settings.network is Network.FULL
    assert settings.describe() == "none"


def test_a_kind_defaults_to_the_model_network_a_writable_workspace_and_the_limits() -> None:
    settings = parse({"kind": "bwrap"})
    assert settings.network is Network.MODEL
    assert settings.workspace is WorkspaceAccess.WRITABLE
    assert settings.allow_hosts is None  # the agent kind's own hosts
    assert (settings.memory_mb, settings.pids) == (4096, 512)
    assert settings.describe() == "bwrap, network model, workspace writable"


def test_a_stage_block_changes_only_the_keys_it_names() -> None:
    top = {"kind": "bwrap", "allow_hosts": ["api.openai.com"], "read_only": ["/opt/tools"]}
    settings = parse(top, {"network": "none", "workspace": "read-only"})
    assert settings.kind is SandboxKind.BWRAP
    assert settings.network is Network.NONE
    assert settings.workspace is WorkspaceAccess.READ_ONLY
    assert settings.allow_hosts == (HostPattern("api.openai.com"),)
    assert settings.read_only == (Path("/opt/tools"),)
    # Hooks prepare the workspace: they always get it writable.
    assert settings.for_hooks().workspace is WorkspaceAccess.WRITABLE
    assert settings.for_hooks().network is Network.NONE


def test_relative_paths_resolve_against_the_workflow_folder() -> None:
    settings = parse({"kind": "bwrap", "writable": ["cache"], "read_only": ["$TOOLS"]},
                     environ={"TOOLS": "/opt/t"})  # fmt: skip
    assert settings.writable == (Path("/repo/cache"),)
    assert settings.read_only == (Path("/opt/t"),)


def test_an_enum_key_may_come_from_the_environment_and_falls_back_when_unset() -> None:
    assert parse({"kind": "$SB"}, environ={"SB": "bwrap"}).kind is SandboxKind.BWRAP
    assert parse({"kind": "$SB"}, environ={}).kind is SandboxKind.NONE


@pytest.mark.parametrize(
    ("top", "stage", "message"),
    [
        ({"kind": "docker"}, None, "sandbox.kind must be one of none, bwrap, podman"),
        ({"kind": "bwrap"}, {"network": "some"}, "stages.plan.sandbox.network must be one of"),
        ({"kind": "bwrap"}, {"workspace": "ro"}, "workspace must be one of writable, read-only"),
        ("bwrap", None, "sandbox must be a map"),
        ({"kind": "bwrap", "allow_hosts": "x.com"}, None, "must be a list of hosts"),
        ({"kind": "bwrap", "allow_hosts": ["a b"]}, None, "is not a host"),
        ({"kind": "bwrap", "writable": ["/"]}, None, "cannot name /"),
        ({"kind": "bwrap", "memory_mb": 0}, None, "memory_mb"),
        ({"kind": "bwrap", "image": "x"}, None, "image is used only with kind: podman"),
    ],
)
def test_bad_settings_are_config_errors_that_name_the_key(
    top: object, stage: object, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse(top, stage)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("api.openai.com", "api.openai.com", None),
        ("API.Anthropic.com:443", "api.anthropic.com", 443),
        ("*.example.com", "*.example.com", None),
        ("127.0.0.1:8080", "127.0.0.1", 8080),
        ("[::1]:9", "::1", 9),
        ("::1", "::1", None),
    ],
)
def test_host_patterns(text: str, host: str, port: int | None) -> None:
    assert parse_host_pattern(text, "allow_hosts") == HostPattern(host, port)


def test_a_pattern_matches_its_host_port_and_subdomains_only() -> None:
    wildcard = HostPattern("*.example.com")
    assert wildcard.matches("api.example.com", 443)
    assert wildcard.matches("a.b.example.com", 80)
    assert not wildcard.matches("example.com", 443)
    assert not wildcard.matches("badexample.com", 443)
    pinned = HostPattern("api.openai.com", 443)
    assert pinned.matches("API.openai.com.", 443)
    assert not pinned.matches("api.openai.com", 80)
    assert HostPattern("::1", 9).matches("[::1]", 9)


def write_workflow(tmp_path: Path, front: str) -> Path:
    path = tmp_path / "WORKFLOW.md"
    path.write_text(f"---\n{front}---\nWork on {{{{ issue.identifier }}}}\n")
    return path


def test_each_stage_gets_the_workflow_sandbox_with_its_own_block_over_it(tmp_path: Path) -> None:
    path = write_workflow(tmp_path, """\
tracker: {kind: local, provider: {path: board}}
sandbox: {kind: bwrap, allow_hosts: [api.openai.com]}
stages:
  plan: {states: [Todo], on_success: Plan Review, sandbox: {network: none, workspace: read-only}}
  build: {states: [In Progress], on_success: Human Review}
""")  # fmt: skip
    settings = load_settings(path, {})
    assert settings.machine is not None
    plan, build = settings.machine.stages
    assert settings.sandbox_for(plan).describe() == "bwrap, network none, workspace read-only"
    assert settings.sandbox_for(build) == settings.sandbox
    assert settings.sandbox_for(None).describe() == (
        "bwrap, network model, allows api.openai.com, workspace writable"
    )


def test_a_bad_stage_block_names_the_stage(tmp_path: Path) -> None:
    path = write_workflow(tmp_path, """\
tracker: {kind: local, provider: {path: board}}
stages:
  plan: {states: [Todo], on_success: Done, sandbox: {kind: jail}}
""")  # fmt: skip
    with pytest.raises(ConfigError, match=r"stages\.plan\.sandbox\.kind must be one of"):
        load_settings(path, {})


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("{kind: podman, network: none, image: x}", "runs on each host's own system folders"),
        ("{kind: bwrap}", "sandbox.network is model, which needs the daemon's proxy"),
    ],
)
def test_on_worker_hosts_the_sandbox_has_no_proxy_and_no_image(
    tmp_path: Path, block: str, message: str
) -> None:
    path = write_workflow(tmp_path, f"""\
tracker: {{kind: local, provider: {{path: board}}}}
worker: {{ssh_hosts: [w1]}}
sandbox: {block}
""")  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        load_settings(path, {})
    path = write_workflow(tmp_path, """\
tracker: {kind: local, provider: {path: board}}
worker: {ssh_hosts: [w1]}
sandbox: {kind: bwrap, network: none}
""")  # fmt: skip
    assert load_settings(path, {}).sandbox.kind is SandboxKind.BWRAP


def test_on_worker_hosts_an_agent_over_mcp_needs_the_network_to_reach_its_tools(
    tmp_path: Path,
) -> None:
    path = write_workflow(tmp_path, """\
tracker: {kind: local, provider: {path: board}}
worker: {ssh_hosts: [w1]}
sandbox: {kind: bwrap, network: none}
stages:
  plan: {states: [Todo], on_success: Plan Review, agent: claude}
  implement: {states: [Ready], on_success: Human Review}
""")  # fmt: skip
    with pytest.raises(ConfigError, match="shuts agent kind claude out of symphony's tools"):
        load_settings(path, {})
    # The same stage with the network its agent needs loads; codex keeps network: none.
    path = write_workflow(tmp_path, """\
tracker: {kind: local, provider: {path: board}}
worker: {ssh_hosts: [w1]}
sandbox: {kind: bwrap, network: none}
stages:
  plan: {states: [Todo], on_success: Plan Review, agent: claude, sandbox: {network: full}}
  implement: {states: [Ready], on_success: Human Review}
""")  # fmt: skip
    assert load_settings(path, {}).worker.hosts
