"""What the core asks the daemon to do: start or stop a worker, remove a workspace, write a
transition, post a comment. Plain values; the daemon performs them and reports back.
"""

from __future__ import annotations

from dataclasses import dataclass

from symphony.base.hosts import LOCAL
from symphony.base.issue import Issue
from symphony.core.state import AgentPause, RetryEntry, RunKind, StopReason


@dataclass(frozen=True, slots=True)
class StartWorker:
    """Start a worker that runs the ticket's agent in its workspace: a first run, a retry, a
    continuation or a fix."""

    issue: Issue
    attempt: int | None
    stage: str | None = None
    turns_used: int = 0
    """Turns already started in `stage` (the progress guard counts across attempts)."""
    resume_thread_id: str | None = None
    last_message: str | None = None
    agent_kind: str = "codex"
    """Which agent runs it (`agent_kind_for`)."""
    host: str = LOCAL
    """Where it runs (`worker.ssh_hosts`), its workspace there."""
    review: str | None = None
    """What the run addresses (`{{ review }}`): a review, failed checks, a conflict."""
    hold_state: str | None = None
    """A fix run: the review state its ticket stays in meanwhile."""
    label: str = "first run"
    """What the run is, with its count and cap (`core.reruns.label_of`)."""
    run_kind: RunKind = RunKind.FIRST
    """What started it: a thread it continues is told why it went quiet."""


@dataclass(frozen=True, slots=True)
class StopWorker:
    """Stop the ticket's run (its worker is cancelled) for `reason`; its claim and slot stay until
    the worker has exited."""

    issue_id: str
    identifier: str
    reason: StopReason
    detail: str


@dataclass(frozen=True, slots=True)
class RemoveWorkspace:
    """Remove a ticket's workspace on `host` (its `before_remove` hook first): the ticket turned
    terminal."""

    identifier: str
    host: str = LOCAL


@dataclass(frozen=True, slots=True)
class HostMarkedDown:
    """An SSH host failed to connect `failures` times in a row: no new work for `cooloff_s`."""

    host: str
    failures: int
    cooloff_s: float
    error: str


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """The ticket's next run (`entry`: a retry, a continuation, a run after a limit) is due in
    `delay_s`; for the log and the activity."""

    entry: RetryEntry
    delay_s: float


@dataclass(frozen=True, slots=True)
class Released:
    """The daemon let go of the ticket (its claim dropped): `reason` says why, for the log and the
    activity."""

    issue_id: str
    identifier: str
    reason: str


@dataclass(frozen=True, slots=True)
class PerformTransition:
    """Write the pending transition of `issue_id` to the tracker (comments, move, read-back)."""

    issue_id: str
    identifier: str
    target: str
    attempt: int


@dataclass(frozen=True, slots=True)
class TransitionDone:
    """A transition was confirmed, or given up because a person moved the ticket meanwhile."""

    issue_id: str
    identifier: str
    from_stage: str
    target: str
    outcome: str
    confirmed: bool


@dataclass(frozen=True, slots=True)
class TransitionRetry:
    """Writing a transition failed: it is tried again (try `attempt`) after `delay_s`, the ticket
    still claimed; for the log and the activity."""

    issue_id: str
    identifier: str
    target: str
    attempt: int
    delay_s: float
    error: str


@dataclass(frozen=True, slots=True)
class PostComment:
    """Post a comment on the ticket once: `kind` and `key` make its marker, so a repeat is a
    no-op (the budget warning)."""

    issue: Issue
    kind: str
    key: str
    body: str


@dataclass(frozen=True, slots=True)
class ReadPullRequest:
    """Read the ticket's pull request (`core.follow.on_pull_read` judges the answer)."""

    issue_id: str
    identifier: str
    number: int


@dataclass(frozen=True, slots=True)
class MergePullRequest:
    """Merge the ticket's pull request at `head_sha` (`core.follow.on_merge_answered`)."""

    issue_id: str
    identifier: str
    number: int
    head_sha: str
    method: str
    why: str
    """The policy's reasons, for the activity and the ticket's comment."""


@dataclass(frozen=True, slots=True)
class AgentLimited:
    """An agent kind was paused (or its pause renewed) by its provider's limit."""

    pause: AgentPause
    identifier: str
    """The ticket whose run met it."""


@dataclass(frozen=True, slots=True)
class AgentResumed:
    """An agent kind's pause lifted: tickets start on it again."""

    agent_kind: str
    paused_s: float


Effect = (
    StartWorker
    | AgentLimited
    | AgentResumed
    | HostMarkedDown
    | PostComment
    | StopWorker
    | RemoveWorkspace
    | RetryScheduled
    | Released
    | PerformTransition
    | TransitionDone
    | TransitionRetry
    | ReadPullRequest
    | MergePullRequest
)
