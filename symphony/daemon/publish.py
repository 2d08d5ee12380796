"""Publishing a hand-off: push the ticket's branch with the daemon's credential, then open its
pull request or bring the one opened before up to date, and answer the review threads the run
addressed.

Every step is safe to repeat, which is what makes the outbox's retry after a crash correct: a
branch already at its commit pushes as a success, the pull request of a branch is found before
one is opened (`symphony.codehost.contract.publish_pull_request`), and a thread already answered
for this commit is not answered again. A push the remote refuses, or a workspace that has no
branch to publish, is `Refused` (the ticket escalates with those words); anything that may pass
on a later try (the network, the host's 5xx) is `Failed`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from symphony.base.issue import Issue
from symphony.base.pulls import PullRequest
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import (
    CODE_HOST_REJECTED,
    CodeHost,
    CodeHostError,
    PullRequestDraft,
    publish_pull_request,
)
from symphony.config.prompt import PromptError, render_title
from symphony.config.repository import CodeHostKind, RepositorySettings
from symphony.core.follow import addressed_reply
from symphony.core.injection import carries
from symphony.core.stage_outcomes import PublishIntent, RunPush
from symphony.workspace.git import LOCAL_GIT, Git, git_output
from symphony.workspace.push import PUSH_REJECTED, PushError, push_branch

log = structlog.get_logger("symphony.publish")

PUSH_USERNAME = {
    CodeHostKind.GITHUB: "x-access-token",
    CodeHostKind.GITLAB: "oauth2",
    CodeHostKind.LOCAL: "",
}
"""The user name each host expects beside a token over HTTPS (the token decides who it is);
a local bare repository asks for none."""
PUSH_TRIES = 3
PUSH_PAUSE_S = 2.0
"""A push from a workspace that ends with its run is tried again 2 s, then 4 s later."""


@dataclass(frozen=True, slots=True)
class Published:
    """The branch was pushed and its pull request opened (`opened`) or brought up to date."""

    pull: PullRequest
    opened: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """The remote or the code host said no, or there is nothing to publish: the ticket escalates
    with `why`."""

    why: str


@dataclass(frozen=True, slots=True)
class Failed:
    """Publishing failed where a later try may pass (the network, the host's 5xx): the transition is
    tried again."""

    why: str


@dataclass(frozen=True, slots=True)
class Suspected:
    """What publishing would send out carries a run's canary (`core.injection`): nothing was
    pushed; `why` names what carried it, never the canary."""

    why: str


Publication = Published | Refused | Failed | Suspected


@dataclass(frozen=True, slots=True)
class Publisher:
    """What publishing needs: the code host and its settings, the daemon's git environment
    (without the token) and the masker for what git says."""

    host: CodeHost
    repository: RepositorySettings
    git_env: Mapping[str, str]
    masker: SecretMasker
    canaries: tuple[str, ...] = ()
    """The canaries of the ticket's runs this daemon started: what it publishes must not
    carry one."""

    async def publish(
        self, workspace: Path | None, intent: PublishIntent, issue: Issue, git: Git = LOCAL_GIT
    ) -> Publication:
        """Push the workspace's branch (from where `git` runs: here or its SSH host) and
        open or update its pull request."""
        if intent.pushed is not None:
            return await self._publish_pushed(intent.pushed, intent, issue)
        if workspace is None:
            return Refused("the ticket has no workspace of symphony's to publish from")
        branch = intent.branch or await _branch(workspace, self.git_env, git)
        if branch is None:
            return Refused(f"the workspace {workspace} is on no branch (a detached HEAD)")
        if intent.base is not None and branch == intent.base:
            return Refused(f"the workspace's branch is the base branch {branch}")
        suspected = await self._carried(workspace, intent, issue, git)
        if suspected is not None:
            return suspected
        repository = self.repository
        try:
            pushed = await push_branch(
                workspace, branch, repository.remote, token=repository.token,
                username=PUSH_USERNAME[repository.kind], env=self.git_env, masker=self.masker,
                git=git, commit=intent.head,
            )  # fmt: skip
        except PushError as exc:
            kind = Refused if exc.category == PUSH_REJECTED else Failed
            return kind(exc.message)
        return await self._open(branch, pushed.sha, intent, issue)

    async def _publish_pushed(
        self, pushed: RunPush, intent: PublishIntent, issue: Issue
    ) -> Publication:
        """The pull request of the branch the run pushed itself before its workspace ended
        (a pod's run): nothing is pushed here, and what the run could not push is refused
        with its words, since there is no workspace left to push it from."""
        if pushed.suspected:
            return Suspected("the commits the run's hand-off was to push (a message or a file)")
        if pushed.refused or not pushed.branch or not pushed.sha:
            why = pushed.refused or "nothing was pushed"
            return Refused(f"the run's push from its pod, which has ended: {why}")
        if carries((title_of(intent, issue), intent.body, intent.answer), self.canaries):
            return Suspected("the pull request's title or body, or its answer to review threads")
        return await self._open(pushed.branch, pushed.sha, intent, issue)

    async def _open(
        self, branch: str, sha: str, intent: PublishIntent, issue: Issue
    ) -> Publication:
        """Open or update the pull request of `branch`, whose head the daemon made `sha`, and
        answer the threads the run addressed."""
        draft = PullRequestDraft(
            branch=branch,
            title=title_of(intent, issue),
            body=intent.body,
            base=intent.base,
            draft=intent.draft,
            labels=intent.labels,
        )
        try:
            published = await publish_pull_request(self.host, draft)
        except CodeHostError as exc:
            said = self.masker.mask(exc.message)
            return Refused(said) if exc.category == CODE_HOST_REJECTED else Failed(said)
        # What the daemon pushed is the head, whether or not the host has caught up yet.
        pull = dataclasses.replace(published.pull_request, head_sha=sha)
        if pull.base == branch:
            return Refused(f"the pull request's base is its own branch {branch}")
        await self._answer_threads(pull.number, intent.replies, sha, intent.answer)
        return Published(pull, published.opened)

    async def _carried(
        self, workspace: Path, intent: PublishIntent, issue: Issue, git: Git
    ) -> Suspected | Failed | None:
        """Whether the pull request's title or body, or the commits the push would send (their
        messages and changes: what no remote-tracking branch has yet), carry a canary."""
        if not self.canaries:
            return None
        if carries((title_of(intent, issue), intent.body, intent.answer), self.canaries):
            return Suspected("the pull request's title or body, or its answer to review threads")
        carried = await _commits_carry(workspace, intent.head, self.git_env, git, self.canaries)
        if carried is None:
            return Failed("the commits to publish could not be read")
        if carried:
            return Suspected("the pushed commits (a message or a changed file)")
        return None

    async def _answer_threads(
        self, number: int, threads: tuple[str, ...], sha: str, answer: str
    ) -> None:
        """Answer each addressed thread still open, by the id it was asked by (its own, or
        one of its aliases), with the run's answer, unless its last word is this very reply
        (an earlier try posted it). Best effort: a reply that cannot be posted costs that
        reply, not the hand-off."""
        if not threads:
            return
        reply = addressed_reply(sha, answer)
        try:
            status = await self.host.read_status(number)
            for thread in status.threads:
                said = thread.comments[-1].body.strip() if thread.comments else ""
                asked = next((i for i in (thread.id, *thread.aliases) if i in threads), None)
                if asked is not None and said != reply.strip():
                    await self.host.reply_to_thread(number, asked, reply)
        except CodeHostError as exc:
            log.warning("review threads not answered", number=number, reason=exc.message)


def title_of(intent: PublishIntent, issue: Issue) -> str:
    """The pull request's title for `issue`; the template was checked when the workflow
    loaded, so a ticket's values cannot break it, and a failure falls back to a plain one."""
    try:
        title = render_title(intent.title_template, issue)
    except PromptError:
        title = ""
    return title or f"{issue.identifier}: {issue.title}"


async def push_before_end(
    repository: RepositorySettings,
    workspace: Path,
    head: str | None,
    *,
    base: str | None,
    git: Git,
    env: Mapping[str, str],
    masker: SecretMasker,
    canaries: Sequence[str],
    tries: int = PUSH_TRIES,
    pause_s: float = PUSH_PAUSE_S,
) -> RunPush:
    """At the hand-off of a run whose workspace ends with it (a pod's), push its branch as
    publishing would (`publish` then opens the pull request from the pushed branch): the
    verified `head` (else HEAD) of the branch the workspace is on, not a base branch, after
    the commits it sends were found free of the ticket's `canaries`, with the daemon's token
    for that one command (`push_branch`, which `git` runs where the workspace is). A failure
    that may pass is tried `tries` times, `pause_s` apart: the workspace will not be there
    for the outbox's retries. Never raises: what could not be pushed is said in the result."""
    said = await git.run(workspace, "symbolic-ref", "--quiet", "--short", "HEAD", env=env)
    branch = said.out.strip() if said.returncode == 0 else ""
    if said.returncode not in (0, 1):  # 1: a detached HEAD
        return RunPush(refused=f"the workspace's branch could not be read: {said.err.strip()}")
    if not branch:
        return RunPush(refused=f"the workspace {workspace} is on no branch (a detached HEAD)")
    if base is not None and branch == base:
        return RunPush(branch, refused=f"the workspace's branch is the base branch {branch}")
    carried = await _commits_carry(workspace, head, env, git, canaries)
    if carried is None:
        return RunPush(branch, refused="the commits to publish could not be read")
    if carried:
        return RunPush(branch, suspected=True)
    for attempt in range(1, tries + 1):
        try:
            pushed = await push_branch(
                workspace, branch, repository.remote, token=repository.token,
                username=PUSH_USERNAME[repository.kind], env=env, masker=masker, git=git,
                commit=head,
            )  # fmt: skip
        except PushError as exc:
            if exc.category == PUSH_REJECTED or attempt == tries:
                log.warning("branch not pushed before the workspace ended", branch=branch,
                            reason=exc.message)  # fmt: skip
                return RunPush(branch, refused=exc.message)
            await asyncio.sleep(pause_s * attempt)
        else:
            log.info("branch pushed before the workspace ended", branch=branch, head=pushed.sha)
            return RunPush(branch, pushed.sha)
    raise AssertionError("unreachable: the last try returns")


async def _commits_carry(
    workspace: Path, head: str | None, env: Mapping[str, str], git: Git, canaries: Sequence[str]
) -> bool | None:
    """Whether the commits a push of `head` (else HEAD) would send (what no remote-tracking
    branch has yet: their messages and changes) carry one of `canaries`; None: unreadable."""
    if not canaries:
        return False
    outgoing = await git_output(
        workspace, env, "log", "-p", "--format=%B", head or "HEAD", "--not", "--remotes",
        git=git,
    )  # fmt: skip
    return None if outgoing is None else carries(outgoing, canaries)


async def _branch(workspace: Path, env: Mapping[str, str], git: Git) -> str | None:
    name = await git_output(workspace, env, "symbolic-ref", "--quiet", "--short", "HEAD", git=git)
    return name.strip() or None if name is not None else None
