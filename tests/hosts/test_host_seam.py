"""What the runner and the agent process ask of any host, answered by this machine and by an SSH
host without either knowing which it has."""

from __future__ import annotations

import shlex
from pathlib import Path

from symphony.config.sandbox import SandboxKind, SandboxSettings
from symphony.config.sections import HostSpec, SshSettings
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST
from symphony.hosts.sandbox.home import NO_CREDENTIALS
from symphony.hosts.ssh import FORWARD_PORTS, NO_WORKSPACE, SSH_FAILED, SshHost

URL = "http://127.0.0.1:4711/mcp"


def ssh_host() -> Host:
    return SshHost(HostSpec("build-1"), SshSettings(), {}, "/srv/ws")


def test_this_machine_carries_nothing_of_its_own_between_the_daemon_and_an_agent() -> None:
    host: Host = LOCAL_HOST
    assert host.reach(URL) == (host, URL)
    assert host.sandboxed(SandboxSettings(kind=SandboxKind.BWRAP), NO_CREDENTIALS) is None
    assert host.reported_group("symphony-remote-pgid 42") is None
    assert host.carrier_failure(SSH_FAILED, ["Connection refused"]) is None


def test_an_ssh_host_s_agent_reaches_the_tool_server_at_a_forwarded_loopback_port() -> None:
    forwarded, there = ssh_host().reach(URL)
    port = int(there.split(":")[2].split("/")[0])
    assert port in FORWARD_PORTS and there == f"http://127.0.0.1:{port}/mcp"
    argv = list(forwarded.agent_launch("claude", Path("/srv/ws/A-1"), {}).argv)
    assert argv[argv.index("-R") + 1] == f"127.0.0.1:{port}:127.0.0.1:4711"


def test_an_ssh_host_s_agent_reaches_the_tools_and_the_model_gateway_on_two_forwards() -> None:
    with_tools, tools = ssh_host().reach(URL)
    both, model = with_tools.reach("http://127.0.0.1:5050")
    assert model.startswith("http://127.0.0.1:") and model != tools.replace("/mcp", "")
    argv = list(both.agent_launch("claude", Path("/srv/ws/A-1"), {}).argv)
    forwards = [argv[i + 1] for i, word in enumerate(argv) if word == "-R"]
    there = [int(u.split(":")[2].split("/")[0]) for u in (tools, model)]
    assert forwards == [
        f"127.0.0.1:{there[0]}:127.0.0.1:4711",
        f"127.0.0.1:{there[1]}:127.0.0.1:5050",
    ]
    assert argv.count("ExitOnForwardFailure=yes") == 1


def test_an_ssh_host_builds_the_run_s_sandbox_there() -> None:
    sandboxed = ssh_host().sandboxed(SandboxSettings(kind=SandboxKind.BWRAP), NO_CREDENTIALS)
    assert sandboxed is not None
    words = shlex.split(sandboxed.agent_launch("codex", Path("/srv/ws/A-1"), {}).argv[-1])
    assert "SY_KIND=bwrap" in words[-1]  # the launcher is the wrapper's fifth argument


def test_an_ssh_host_tells_its_carrier_s_failures_from_the_agent_s() -> None:
    host = ssh_host()
    assert host.reported_group("symphony-remote-pgid 4242") == 4242
    assert host.reported_group("error: symphony-remote-pgid 1") is None
    refused = host.carrier_failure(SSH_FAILED, ["remote port forwarding failed for listen port"])
    assert refused is not None and refused.kind == "forward_refused"
    lost = host.carrier_failure(SSH_FAILED, ["Connection reset"])
    assert lost is not None and lost.kind == "unreachable" and "build-1" in lost.message
    missing = host.carrier_failure(NO_WORKSPACE, [])
    assert missing is not None and missing.kind == "no_workspace"
    assert host.carrier_failure(1, []) is None and host.carrier_failure(None, []) is None
