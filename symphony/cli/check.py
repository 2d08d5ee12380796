"""`symphony check`: what the daemon would do with this workflow, before it does anything.

It prints the effective settings and every warning, the stage machine (stage mode) with each
state the daemon moves tickets to checked against the tracker where the tracker can list its
states, and one verdict per active ticket from the plan the scheduler itself follows, rendering
each ticket's prompt on the way. It reads the tracker (and, with a merge policy, the base
branches' rules from the code host) and writes nothing. Exit status 1 means a
dispatch or a transition would fail as things stand.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from symphony.agents.registry import backend, model_hosts
from symphony.base.errors import SymphonyError
from symphony.base.issue import Issue, normalize_state
from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.cli.preflight import preflight_warnings, used_agent_kinds
from symphony.cli.workflows import each, fleet_of, load, members_of, single
from symphony.codehost.contract import CodeHost, CodeHostError, create_code_host
from symphony.config.kubernetes import DaemonAddress, KubernetesSettings
from symphony.config.prompt import StageContext, render_prompt
from symphony.config.repository import (
    CodeHostKind,
    MergePolicy,
    PublishSettings,
    RepositorySettings,
)
from symphony.config.sandbox import Network, SandboxKind
from symphony.config.sections import Settings
from symphony.config.telemetry import TelemetrySettings
from symphony.config.tracker import TrackerSettings
from symphony.core.claims import claim_fates
from symphony.core.dispatch import explain_dispatch, observe_review_queue
from symphony.core.state import SchedulerState
from symphony.core.trust import describe
from symphony.gateway.access import (
    gateway_refusal,
    model_access,
    pods_through_gateway,
    through_gateway,
)
from symphony.hosts.kubernetes.claims import Claims, ClaimsFailed, describe_claims
from symphony.hosts.kubernetes.kubectl import Kubectl
from symphony.hosts.kubernetes.pods import PodFailed, Pods, describe_pods
from symphony.hosts.sandbox.probe import sandbox_problem
from symphony.hosts.ssh import SshHost
from symphony.memory import memory_of
from symphony.telemetry import traces_endpoint
from symphony.tracker.contract import Tracker, TrackerError, resolve_states, tracker_adapter
from symphony.workspace.environment import remote_environment

if TYPE_CHECKING:
    from symphony.store import Store

T = TypeVar("T")


async def report(
    settings: Settings,
    tracker: Tracker,
    code_hosts: Callable[[RepositorySettings], CodeHost] = create_code_host,
) -> int:
    """Print the report; returns the exit status (0, or 1 when something would fail)."""
    try:
        merge_notes = await _merge_rules(settings, code_hosts)
        resolved = await resolve_states(settings.tracker, tracker)
        candidates = await tracker.fetch_issues_by_states(resolved.active_states)
        known = await tracker.tracker_states() if settings.machine is not None else None
        in_review: list[Issue] = []
        if settings.machine is not None and settings.agent.max_in_review is not None:
            in_review = await tracker.fetch_issues_by_states(
                settings.machine.review_states(resolved.terminal_states)
            )
        claims = await _claims(settings, tracker, resolved)
    finally:
        await tracker.aclose()
    settings = dataclasses.replace(settings, tracker=resolved)
    _print_settings(settings)
    _notify(settings)
    for line in _trust(settings):
        print(f"trust         {line}")
    kind = settings.agent.kind
    print(f"agent         {kind}: {settings.session_settings(kind).command}")
    print("\n".join(model_access(settings, used_agent_kinds(settings), os.environ)))
    for warning in preflight_warnings(settings):
        print(f"warning: {warning}")
    for note in merge_notes:
        print(note)
    errors = _sandboxes(settings)
    errors += await _forwards(settings)
    errors += await _pods(settings)
    for line in claims:
        print(line)
    errors += _machine(settings, known)
    state = _daemon_claims(settings)
    if settings.agent.max_in_review is not None and settings.machine is not None:
        waiting = observe_review_queue(state, in_review, settings)
        full = waiting >= settings.agent.max_in_review
        print(
            f"review queue  {waiting} ticket(s) wait for review, at most "
            f"{settings.agent.max_in_review} (agent.max_in_review)"
            + ("; new tickets wait" if full else "")
        )
    print(f"\n{len(candidates)} ticket(s) in active states:")
    errors += _verdicts(settings, candidates, state)
    for error in errors:
        print(f"error: {error}")
    if errors:
        print(f"\n{len(errors)} problem(s): a dispatch or a transition would fail.")
        return 1
    return 0


def _print_reruns(settings: Settings) -> None:
    """The caps on automatic runs, the runaway guard and the rate-limit headroom."""
    agent = settings.agent
    print(
        f"re-runs       at most {agent.max_continuations} continuations, {agent.max_retries} "
        f"retries after errors, {agent.max_stall_restarts} stall restarts; no ticket runs more "
        f"than {agent.max_runs_per_ticket} times within {agent.runaway_window_s:g} s "
        "(agent.max_runs_per_ticket, agent.runaway_window)"
    )
    if agent.rate_limit_headroom is not None:
        print(f"headroom      no new run once a provider window is {agent.rate_limit_headroom}% "
              "used (agent.rate_limit_headroom)")  # fmt: skip


def _print_settings(settings: Settings) -> None:
    """The effective settings, a line each (never a secret)."""
    t = settings.tracker
    print(f"workflow      {settings.workflow_path}")
    print(f"tracker       {t.kind}")
    print(f"active        {', '.join(t.active_states)}")
    print(f"terminal      {', '.join(t.terminal_states)}")
    if t.required_labels:
        print(f"labels        {', '.join(t.required_labels)}")
    print(f"workspaces    {settings.workspace.root}")
    worktrees = settings.workspace.worktrees
    if worktrees is not None:
        base = worktrees.base or "its default branch"
        print(f"worktrees     of {worktrees.repository} from {base}, on {worktrees.branch}")
    repository = settings.repository
    if repository is not None and repository.kind is CodeHostKind.LOCAL:
        checks = ", ".join(check.name for check in repository.checks) or "none"
        print(
            f"repository    local: pull requests in {repository.slug}, branches in "
            f"{repository.remote}; checks: {checks}"
        )
    elif repository is not None:  # its token is never printed
        print(
            f"repository    {repository.kind} {repository.slug} ({repository.api_url}), "
            f"pushed to {repository.remote}"
        )
    memory = memory_of(settings, SecretMasker())  # counted here, never shown
    if memory is not None:
        count = len(memory.notes())
        print(
            f"memory        {count} note{'s' if count != 1 else ''} in {memory.folder}, "
            f"{memory.settings.budget_chars} chars a prompt"
        )
    worker = settings.worker
    if worker.hosts:
        shown = ", ".join(
            f"{h.name} ({worker.capacity(h) or settings.agent.max_concurrent_agents} at once"
            + (f", in {h.workspace_root}" if h.workspace_root else "")
            + ")"
            for h in worker.hosts
        )
        print(f"ssh hosts     {shown}")
    if worker.kubernetes is not None:
        print(f"kubernetes    {_describe_kubernetes(worker.kubernetes)}")
        print(f"daemon        {_describe_daemon(worker.kubernetes)}")
    print(f"poll every    {settings.polling.interval_ms} ms")
    print(f"concurrency   {settings.agent.max_concurrent_agents}")
    print(f"overlap       {settings.agent.overlap} (agent.overlap)")
    _print_reruns(settings)
    print(f"traces        {_describe_telemetry(settings.telemetry, os.environ)}")
    if settings.server.port is not None or settings.server.auth_token is not None:
        print(
            "actions       "
            + ("on: the review page and the actions API take server.auth_token"
               if settings.server.auth_token else "off: set server.auth_token to act from /review")
        )  # fmt: skip


def _describe_telemetry(telemetry: TelemetrySettings, environ: Mapping[str, str]) -> str:
    """Where runs' traces go and what the agents export (the address without its user or
    query, which may hold a key; the export headers are never shown)."""
    url = traces_endpoint(environ, telemetry.endpoint)
    if url is None:
        return "off (telemetry.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT names a collector)"
    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    said = [f"to {shown}{parts.path}"]
    if not telemetry.agents:
        said.append("agents export nothing of their own (telemetry.agents: false)")
    elif telemetry.agent_headers:
        said.append("agents export their own spans into each run's trace, with the headers")
    else:
        said.append("agents export their own spans into each run's trace, without the headers")
    if telemetry.capture_text:
        said.append("turn spans carry prompts and replies (telemetry.capture_text)")
    return "; ".join(said)


async def _forwards(settings: Settings) -> list[str]:
    """Whether each worker host carries the forwards its agents need: the tool server for
    claude and ACP agents, the model gateway for agents that hold an API key. A host whose
    sshd forbids forwarding fails every such run."""
    kinds = used_agent_kinds(settings)
    over_mcp = [k for k in kinds if backend(k).tools_over_mcp]
    keyed = through_gateway(settings, kinds, os.environ)
    if not settings.worker.hosts or not (over_mcp or keyed):
        return []
    needs = [f"{k} takes tools over MCP" for k in over_mcp]
    needs += [f"{k} calls its model through the gateway" for k in keyed]
    root = str(settings.workspace.root)
    hosts = [SshHost(h, settings.worker.ssh, os.environ, root) for h in settings.worker.hosts]
    probes = await asyncio.gather(*(host.probe_forward() for host in hosts))
    shown, errors = [], []
    for host, probe in zip(hosts, probes, strict=True):
        if probe.returncode == 0:
            shown.append(f"{host.name} ok")
        elif probe.forward_refused:
            shown.append(f"{host.name} refused")
            errors.append(
                f"{host.name} refuses remote port forwarding (its sshd's AllowTcpForwarding), "
                f"so runs there cannot start ({'; '.join(needs)})"
            )
        else:
            shown.append(f"{host.name} not checked ({probe.reason()})")
    print(f"forward       {', '.join(shown)} ({'; '.join(needs)})")
    return errors


def _machine(settings: Settings, known: Sequence[str] | None) -> list[str]:
    machine = settings.machine
    if machine is None:
        return []
    print(f"\nstages (escalation: {machine.escalation_state}):")
    for stage in machine.stages:
        print(
            f"  {stage.name:<12} {', '.join(stage.states):<24} -> done: {stage.on_success}; "
            f"blocked: {stage.on_blocked}; stuck after {stage.max_total_turns} turns: "
            f"{stage.on_stuck}; agent: {stage.agent or settings.agent.kind}"
        )
        print(
            f"  {'':<12} at {stage.on_success} a person's approve moves it to "
            f"{stage.on_approved}, request changes to {stage.on_changes_requested}"
        )
        if stage.verify:
            print(
                f"  {'':<12} verify: {', '.join(g.name for g in stage.verify)}; after "
                f"{stage.max_fix_turns} fix turn(s) still failing: {stage.on_verify_failed}"
            )
        if stage.publish is not None and settings.repository is not None:
            print(f"  {'':<12} {_publish_line(settings, stage.publish)}")
        sandbox = settings.sandbox_for(stage)
        if sandbox.enabled or settings.sandbox.enabled:
            print(f"  {'':<12} sandbox: {sandbox.describe()}")
    following = any(stage.publish is not None for stage in machine.stages)
    if following:
        print(f"  {'':<12} {_follow_line(settings)}")
    extra = settings.follow.states() if following else ()
    needed = (*machine.states, *machine.targets(), *extra)
    if known is None:
        print("  the tracker accepts any state name (labels are created at start where needed)")
        return []
    have = {normalize_state(state) for state in known}
    missing = list(dict.fromkeys(s for s in needed if normalize_state(s) not in have))
    return [
        f"the tracker has no state {state!r} (it has: {', '.join(known)}); add it there or "
        "change the stages"
        for state in missing
    ]


def _trust(settings: Settings) -> list[str]:
    """Whose comments and reviews an agent reads as trusted (`trust:`), and the rest."""
    members = tracker_adapter(settings.tracker.kind).members
    repository = settings.repository
    if repository is not None and repository.kind is not CodeHostKind.LOCAL:
        members += f"; on pull requests, the {repository.kind} repository's own people"
    return describe(settings.trust, members)


def _notify(settings: Settings) -> None:
    """Who is told of what, and where the messages link to."""
    notify = settings.notify
    if not notify.channels:
        print("notify        none (notify.channels tells a person when a review waits)")
        return
    for channel in notify.channels:
        print(f"notify        {channel.name}: {channel.describe()}")
    link = notify.review_url or (
        f"http://{settings.server.host}:{settings.server.port}"
        if settings.server.port else None
    )  # fmt: skip
    print(
        f"notify links  {link}/review" if link else
        "notify links  none: set notify.review_url (or server.port) for links to the review page"
    )  # fmt: skip


def _pod_egress(settings: Settings) -> list[str]:
    """What `network: model` lets out of a run's pod, per sandbox and agent kind: DNS and the
    hosts' addresses, which are resolved when each run's pod is made."""
    stages = settings.machine.stages if settings.machine is not None else ()
    runs = [("sandbox", settings.sandbox, settings.agent.kind)]
    runs += [(f"stages.{s.name}.sandbox", settings.sandbox_for(s), s.agent or settings.agent.kind)
             for s in stages]  # fmt: skip
    env = remote_environment(os.environ, settings, ())
    cluster = settings.worker.kubernetes
    daemon = cluster.daemon if cluster is not None else None
    keyed = daemon is not None and pods_through_gateway(settings, os.environ)
    to_daemon = (
        f"; and the daemon's ports {daemon.tool_port}, {daemon.gateway_port}"
        if daemon is not None else ""
    )  # fmt: skip
    lines = []
    for where, sandbox, kind in dict.fromkeys(runs):
        if not sandbox.enabled or sandbox.network is not Network.MODEL:
            if daemon is not None and sandbox.enabled and sandbox.network is Network.NONE:
                lines.append(f"{where} ({kind}): nothing but the daemon's ports "
                             f"{daemon.tool_port}, {daemon.gateway_port}")  # fmt: skip
            continue
        listed = sandbox.allow_hosts
        hosts = listed if listed is not None else () if keyed else model_hosts(kind, env)
        shown = ", ".join(str(h) if h.port is not None else f"{h}:443" for h in hosts)
        if keyed and listed is None:
            shown = "no model host (the agents call their model through the daemon's gateway)"
        lines.append(
            f"{where} ({kind}): DNS and {shown or 'nothing else'}, at the addresses "
            f"resolved when each run's pod is made (the NetworkPolicy lets out addresses)"
            + to_daemon
        )
    return lines


def _sandboxes(settings: Settings) -> list[str]:
    """The workflow's sandbox, and why one it uses cannot start on this machine."""
    print(f"sandbox       {settings.sandbox.describe()}" + (
        "" if settings.sandbox.enabled else " (agents, hooks and gates run as this user)"
    ))  # fmt: skip
    used = [settings.sandbox]
    if settings.machine is not None:
        used += [settings.sandbox_for(stage) for stage in settings.machine.stages]
    enabled = [s for s in used if s.enabled]
    if enabled:
        limits = enabled[0]
        print(
            f"sandbox limit {limits.memory_mb} MB of memory, {limits.pids} processes "
            + ("(podman: the container's cgroup)" if limits.kind is SandboxKind.PODMAN
               else "(bwrap: rlimits RLIMIT_DATA and RLIMIT_NPROC, no cgroup)")
        )  # fmt: skip
    if settings.worker.kubernetes is not None:
        for line in _pod_egress(settings):
            print(f"pod egress    {line}")
    errors: list[str] = []
    if enabled and settings.worker.hosts:
        print("sandbox where built on each worker host, from its own folders (its bwrap or "
              "podman must be installed there)")  # fmt: skip
        return errors
    for kind, image in dict.fromkeys((s.kind, s.image) for s in enabled):
        problem = sandbox_problem(kind, image)
        if problem is not None:
            errors.append(f"sandbox.kind {kind.value} cannot start: {problem}")
    return errors


async def _merge_rules(
    settings: Settings, code_hosts: Callable[[RepositorySettings], CodeHost]
) -> list[str]:
    """With a merge policy: what each base branch's rules require, read from the code host. A
    base that requires no approval is a warning: the policy merges there on green checks."""
    repository, machine = settings.repository, settings.machine
    if repository is None or machine is None or settings.merge.policy is MergePolicy.NONE:
        return []
    wanted = {s.publish.base for s in machine.stages if s.publish is not None}
    if not wanted:
        return []
    host = code_hosts(repository)
    notes: list[str] = []
    try:
        bases = sorted({base or await host.default_branch() for base in wanted})
        for base in bases:
            required = await host.approvals_required(base)
            if required == 0:
                notes.append(
                    f"warning: merge.policy {settings.merge.policy} merges into {base}, whose "
                    "rules require no approval: a pull request is merged once its checks pass, "
                    f"unreviewed (require a review on {base}, or set merge.require_label)"
                )
            elif required is None:
                notes.append(
                    f"merge rules  {base}: read from each pull request (where they require no "
                    "approval, the policy merges on green checks alone)"
                )
            else:
                notes.append(f"merge rules  {base}: {required} approval(s) required")
    except CodeHostError as exc:
        notes.append(f"warning: the rules of the base branch could not be read: {exc.message}")
    finally:
        await host.aclose()
    return notes


def _publish_line(settings: Settings, publish: PublishSettings) -> str:
    repository = settings.repository
    assert repository is not None
    kind = "merge request" if repository.kind is CodeHostKind.GITLAB else "pull request"
    base = publish.base or "the default branch"
    draft = "a draft " if publish.draft else "a "
    where = (
        f"file in {repository.slug}"
        if repository.kind is CodeHostKind.LOCAL
        else f"on {repository.kind} {repository.slug}"
    )
    return f"publish: push to {repository.remote}, then {draft}{kind} {where} onto {base}"


def _follow_line(settings: Settings) -> str:
    follow, merge = settings.follow, settings.merge
    if merge.policy is MergePolicy.NONE:
        policy = "never (a person merges)"
    else:
        label = f", label {merge.require_label}" if merge.require_label else ""
        policy = f"{merge.policy} by {merge.method}{label}"
    reviewed = follow.on_changes_requested or "(none)"
    machine = settings.machine
    closed = follow.on_closed or (machine.escalation_state if machine is not None else "(stays)")
    return (
        f"follow: checks ({follow.checks}) red: {follow.on_checks_failed} (at most "
        f"{follow.max_check_fixes}); changes requested: {reviewed} (at most "
        f"{follow.max_reworks} reworks); conflict: {follow.on_conflict} (at most "
        f"{follow.max_conflict_fixes}); merged: {follow.on_merged or '(stays)'}; closed: "
        f"{closed}; merge: {policy}"
    )


async def _pods(settings: Settings) -> list[str]:
    """With `worker.kubernetes`: this workflow's pods in the cluster and what a start-up would
    do with each; and a workflow whose agents would need the daemon's gateway, refused."""
    cluster = settings.worker.kubernetes
    if cluster is None:
        return []
    refused = gateway_refusal(settings, os.environ)
    instances, live = _instances(settings)
    try:
        listed = await Pods(Kubectl(cluster, os.environ), "").listed()
    except PodFailed as exc:
        print(f"pods          not listed: {exc.message}")
        return [refused] if refused else []
    lines = describe_pods(listed, instances, live)
    print(f"pods          {len(lines)} of this workflow's in namespace {cluster.namespace}")
    for line in lines:
        print(f"  {line}")
    return [refused] if refused else []


async def _claims(settings: Settings, tracker: Tracker, resolved: TrackerSettings) -> list[str]:
    """With `worker.kubernetes`: the workspace claims this workflow made (by its store's id)
    and what a start-up would do with each, as lines to print."""
    cluster = settings.worker.kubernetes
    workflow = _workflow_id(settings) if cluster is not None else None
    if cluster is None or workflow is None:
        return []
    try:
        listed = await Claims(Kubectl(cluster, os.environ), workflow).listed()
    except ClaimsFailed as exc:
        return [f"claims        not listed: {exc.message}"]
    fates: dict[str, str | None] | None = None
    states: dict[str, str] = {}
    if listed:
        try:
            found = await tracker.fetch_issues_by_ids(
                sorted({c.issue_id for c in listed if c.issue_id})
            )
        except TrackerError:
            found = None
        if found is not None:
            fates = claim_fates({c.name: c.issue_id for c in listed}, found, resolved)
            states = {issue.id: issue.state for issue in found}
    lines = describe_claims(listed, fates, states)
    head = f"claims        {len(lines)} of this workflow's in namespace {cluster.namespace}"
    return [head, *(f"  {line}" for line in lines)]


def _workflow_id(settings: Settings) -> str | None:
    """The id the workflow's store keeps for it (None: no store yet, or none kept)."""
    found, _ = _read_store(settings, lambda store: store.workflow_id())
    return found


def _read_store(settings: Settings, read: Callable[[Store], T]) -> tuple[T | None, str | None]:
    """What `read` finds in the workflow's store, opened read-only beside a running daemon, or
    why it could not be read; (None, None) when there is no store yet (nor is its code
    loaded)."""
    if settings.state is None or not settings.state.path.is_file():
        return None, None
    import sqlite3

    from symphony.store import Store, StoreError

    try:
        store = Store.read_only(settings.state.path)
        if store is None:
            return None, None
        try:
            return read(store), None
        finally:
            store.close()
    except (StoreError, sqlite3.Error) as exc:
        return None, str(exc)


def _instances(settings: Settings) -> tuple[list[str], str | None]:
    """The daemons that used the workflow's store, and the one running now (None: none)."""
    instances, _ = _read_store(settings, lambda store: store.instances())
    if not instances or settings.state is None:
        return [], None
    from symphony.store.lock import DaemonLock, LockError

    lock = DaemonLock(Path(f"{settings.state.path}.lock"))
    try:
        lock.acquire(str(settings.workflow_path))
    except LockError:
        return instances, instances[-1]
    lock.release()
    return instances, None


def _daemon_claims(settings: Settings) -> SchedulerState:
    """What the daemon's store says it holds (runs, retries, moves, kept workspaces, the files
    of each, every ticket's runs and a person's stops), so `check` explains the holds
    `agent.overlap`, the caps, the runaway guard and a stop make; empty when there is no store
    yet or it cannot be read."""
    state = SchedulerState()
    saved, unreadable = _read_store(settings, lambda store: store.load(datetime.now(UTC)))
    if unreadable is not None:
        print(
            f"warning: the daemon's state could not be read, so holds are not shown: {unreadable}"
        )
    if saved is None:
        return state
    state.claimed.update(r.issue_id for r in saved.runs)
    state.claimed.update(r.issue_id for r in saved.retries)
    state.claimed.update(t.issue_id for t in saved.transitions)
    state.kept_workspaces.update(saved.kept_workspaces)
    state.footprints.update(saved.footprints)
    state.ledgers.update(saved.ledgers)  # the caps and the runaway guard
    state.held.update(saved.held)  # what a person stopped
    now = datetime.now(UTC)
    for kind, pause in saved.agent_pauses.items():  # what a provider's limit paused
        state.agent_pauses[kind] = pause
        if pause.until > now or not pause.named:
            print(f"limited       {pause.describe()}: no ticket starts on it until then")
    return state


def _verdicts(settings: Settings, candidates: Sequence[Issue], state: SchedulerState) -> list[str]:
    machine = settings.machine
    failures: list[str] = []
    for issue, wait in explain_dispatch(state, candidates, settings, datetime.now(UTC)):
        verdict = "would dispatch" if wait is None else f"waits: {wait}"
        stage = machine.stage_for(issue.state) if machine is not None else None
        where = f"{issue.state} ({stage.name})" if stage is not None else issue.state
        priority = issue.priority if issue.priority is not None else "-"
        print(f"  {issue.identifier:<16} {where:<22} p{priority:<3} {verdict}  {issue.title}")
        try:
            if stage is None:
                render_prompt(settings.prompt_template, issue, None)
            else:
                # No plan or comments are read here: a stage prompt must also render without.
                render_prompt(
                    stage.prompt_template, issue, None, StageContext(stage.name, None, ())
                )
        except SymphonyError as exc:
            failures.append(f"prompt of {issue.identifier} cannot be rendered: {exc}")
    return failures


def check_command(args: argparse.Namespace) -> int:
    """`symphony check [WORKFLOW ...]`: each workflow validated, with its next poll shown."""

    def one(path: Path) -> int:
        settings, tracker = load(path, SecretMasker())
        return loop.run(report(settings, tracker))

    paths: list[Path] = args.workflows or [Path("WORKFLOW.md")]
    if len(paths) > 1:
        return each(members_of(paths), one)
    members = fleet_of(paths[0])
    return one(single(paths[0])) if members is None else each(members, one)


def _describe_daemon(k8s: KubernetesSettings) -> str:
    """Where the pods reach the daemon, and what of it listens beyond loopback for them."""
    daemon: DaemonAddress | None = k8s.daemon
    if daemon is None:
        return (
            "not reached from pods: its tool server and model gateway listen on loopback only "
            "(worker.kubernetes.daemon_address names where pods reach it)"
        )
    to = (
        "its pods " + ", ".join(f"{k}={v}" for k, v in daemon.pod_labels)
        + f" in namespace {daemon.namespace or k8s.namespace}"
        if daemon.pod_labels
        else f"the addresses {daemon.address} resolves to when each run's pod is made"
    )  # fmt: skip
    return (
        f"pods reach it at {daemon.address}: the tool server listens on "
        f"{daemon.listen}:{daemon.tool_port} and the model gateway on "
        f"{daemon.listen}:{daemon.gateway_port}, beyond loopback, each opened only by a live "
        f"run's token; the pods' policy lets out to {to} on those ports"
    )


def _describe_kubernetes(k8s: KubernetesSettings) -> str:
    return (
        f"pods of {k8s.image} in namespace {k8s.namespace}"
        f" (context {k8s.context or 'current'}), "
        + ", ".join(f"{name} {value}" for name, value in k8s.resources)
        + f", at most {k8s.max_pods or 'unlimited'} at once, workspace {k8s.workspace}"
        + (
            f" ({k8s.workspace_size} a ticket, storage class "
            f"{k8s.workspace_storage_class or 'the cluster default'})"
            if k8s.workspace_claim
            else ""
        )
        + (f", service account {k8s.service_account}" if k8s.service_account else ", no token")
        + f", requests time out after {k8s.request_timeout_ms / 1000:g} s"
    )
