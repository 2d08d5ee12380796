"""`worker:` settings and the ssh command lines built from them (no sshd needed)."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.sections import HostSpec, SshSettings
from symphony.hosts.ssh import FORWARD_PORTS, CommandResult, SshHost, encode_env, remote_pgid_of
from tests.cli_runner import Cli
from tests.harness import Board


def settings_with(tmp_path: Path, **sections: Any) -> Any:
    folder = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    board = Board(folder)
    board.write_workflow(**sections)
    return load_settings(board.workflow, {"HOME": "/home/me"})


def test_hosts_parse_with_their_limits_roots_and_ssh_options(tmp_path: Path) -> None:
    worker = {
        "ssh_hosts": [
            "build-1",
            {"host": "me@build-2", "max_agents": 3, "workspace_root": "/srv/ws"},
        ],
        "max_concurrent_agents_per_host": 2,
        "ssh": {"config_file": "ssh_config", "pass_env": ["OPENAI_API_KEY", "NPM_*"],
                "strict_host_key_checking": "accept-new"},
    }  # fmt: skip
    worker_settings = settings_with(tmp_path, worker=worker).worker
    assert worker_settings.hosts == (HostSpec("build-1"), HostSpec("me@build-2", 3, "/srv/ws"))
    assert [worker_settings.capacity(h) for h in worker_settings.hosts] == [2, 3]
    assert worker_settings.ssh.config_file == tmp_path / "w0" / "ssh_config"
    assert worker_settings.ssh.pass_env == ("OPENAI_API_KEY", "NPM_*")
    assert settings_with(tmp_path).worker.hosts == ()  # no hosts: everything runs here


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ({"ssh_hosts": "build-1"}, "worker.ssh_hosts must be a list"),
        ({"ssh_hosts": ["a b"]}, "must be a host name"),
        ({"ssh_hosts": ["-oProxyCommand=x"]}, "must be a host name"),
        ({"ssh_hosts": ["local"]}, "cannot be 'local'"),
        ({"ssh_hosts": ["a", "a"]}, "names a host twice"),
        ({"ssh_hosts": [{"host": "a", "workspace_root": "ws"}]}, "absolute path"),
        ({"ssh_hosts": [{"host": "a", "max_agents": 0}]}, "at least 1"),
        ({"ssh_hosts": [{"host": "a", "cores": 4}]}, "unknown key(s) cores"),
        ({"ssh": {"strict_host_key_checking": "maybe"}}, "yes, accept-new or no"),
        ({"ssh": {"pass_env": ["not a name"]}}, "pass_env must be a list"),
    ],
)
def test_bad_worker_settings_are_refused_naming_the_setting(
    tmp_path: Path, worker: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_with(tmp_path, worker=worker)
    assert message in str(raised.value)


def test_worktrees_and_agents_over_mcp_are_accepted_with_hosts(tmp_path: Path) -> None:
    hosts = {"ssh_hosts": ["build-1"]}
    worktree = {"root": "ws", "strategy": "worktree", "repository": "/srv/repo"}
    settings = settings_with(tmp_path, worker=hosts, workspace=worktree)
    assert settings.workspace.worktrees is not None and settings.worker.hosts
    # Agents that take their tools over MCP run there: the tool server is forwarded.
    assert settings_with(tmp_path, worker=hosts, agent={"kind": "claude"}).worker.hosts


def test_an_agent_s_connection_alone_carries_the_tool_server_to_a_loopback_port_there() -> None:
    host = SshHost(HostSpec("build-1"), SshSettings(), {}, "/srv/ws")
    forwarded, port = host.with_forward(4711)
    assert port in FORWARD_PORTS
    argv = list(forwarded.agent_launch("claude", Path("/srv/ws/A-1"), {}).argv)
    assert argv[argv.index("-R") + 1] == f"127.0.0.1:{port}:127.0.0.1:4711"
    assert "ExitOnForwardFailure=yes" in argv
    assert argv.index("-R") < argv.index("--")  # an ssh option, not part of the command
    # Scripts on the same host, and the host itself, open no forward.
    assert "-R" not in host.agent_launch("claude", Path("/srv/ws/A-1"), {}).argv
    assert "-R" not in forwarded.argv("true")
    # An agent's connection is its own: the forward ends with it, and so does the run.
    assert not any("ControlMaster" in a for a in argv)
    refused = CommandResult(255, "", "Error: remote port forwarding failed for listen port 1")
    assert refused.forward_refused and not refused.unreachable
    assert CommandResult(255, "", "Connection refused").unreachable


def test_the_ssh_command_line_is_batch_mode_and_quotes_every_argument() -> None:
    host = SshHost(
        HostSpec("build-1", workspace_root="/srv/ws"),
        SshSettings(config_file=Path("/etc/sym/ssh_config"), connect_timeout_s=7),
        {"HOME": "/root", "SSH_AUTH_SOCK": "/tmp/agent", "AWS_SECRET_ACCESS_KEY": "x"},
        "/tmp/ignored",
    )
    spec = host.agent_launch("codex app-server; echo 'hi'", Path("/srv/ws/A-1"), {"K": "v\n2"})
    argv = list(spec.argv)
    assert argv[:4] == ["ssh", "-T", "-a", "-x"]
    assert "BatchMode=yes" in argv and "ConnectTimeout=7" in argv
    assert argv[argv.index("-F") + 1] == "/etc/sym/ssh_config"
    assert argv[-2] == "build-1" and argv[-3] == "--"
    words = shlex.split(argv[-1])
    assert words[:3] == ["exec", "/bin/sh", "-c"]
    assert words[4:] == ["symphony", "/srv/ws/A-1", "codex app-server; echo 'hi'", "bash", "stdin"]
    # The ssh client sees only what it needs; the remote side gets the rest on stdin.
    assert dict(spec.env) == {"HOME": "/root", "SSH_AUTH_SOCK": "/tmp/agent"}
    assert (
        spec.preamble == f"K={base64.b64encode(b'v' + bytes([10]) + b'2').decode()}\n.\n".encode()
    )
    assert host.workspace_root == "/srv/ws"


def test_the_wrapper_s_report_and_the_environment_encoding() -> None:
    assert remote_pgid_of("symphony-remote-pgid 4242") == 4242
    assert remote_pgid_of("error: symphony-remote-pgid 1") is None
    assert encode_env({"GOOD": "x", "bad name": "y", "_sy_x": "z"}) == b"GOOD=eA==\n.\n"


def test_the_readme_s_two_host_workflow_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Agents on other machines", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    example = yaml.safe_load(block)
    board = Board(tmp_path)
    board.write_workflow(**example)
    settings = load_settings(board.workflow, {"HOME": str(tmp_path)})
    assert settings.warnings == ()
    assert [h.name for h in settings.worker.hosts] == ["build-1", "build-2"]
    assert settings.worker.ssh.pass_env == ("OPENAI_API_KEY",)


def test_check_lists_the_hosts_and_does_not_look_for_the_agent_here(
    tmp_path: Path, symphony_cli: Cli
) -> None:
    board = Board(tmp_path)
    board.ticket("ABC-1")
    board.write_workflow(
        worker={"ssh_hosts": ["build-1", {"host": "build-2", "max_agents": 2}]},
        codex={"command": "codex-only-on-the-hosts app-server"},
    )
    result = symphony_cli("check", cwd=board.root)
    assert result.returncode == 0, result.stderr
    assert "ssh hosts     build-1 (4 at once), build-2 (2 at once)" in result.stdout
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert not [w for w in warnings if "codex-only-on-the-hosts" in w]  # it runs there


def test_host_key_checking_is_forced_only_when_the_workflow_sets_it() -> None:
    spec = HostSpec("build-1", workspace_root="/srv/ws")
    mine = SshHost(spec, SshSettings(), {}, "/tmp/ignored").argv("true")
    assert not any(word.startswith("StrictHostKeyChecking") for word in mine)
    forced = SshHost(spec, SshSettings(strict_host_key_checking="accept-new"), {}, "/x")
    assert "StrictHostKeyChecking=accept-new" in forced.argv("true")
