"""The code host side of following: the workflow's code host client, reading a pull request and
merging one, each a coroutine that never raises and answers with an event the loop judges
(`symphony.core.follow`).

`CodeHosts` keeps one client for the workflow's `repository:` and makes a new one when a reload
changes it; the old one is closed once nothing uses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import structlog

from symphony import core
from symphony.base.pulls import CheckState, PullStatus
from symphony.base.secrets import SecretMasker
from symphony.codehost.contract import (
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_REJECTED,
    CodeHost,
    CodeHostError,
    create_code_host,
)
from symphony.config.repository import MergeMethod, RepositorySettings
from symphony.config.sections import Settings
from symphony.daemon.events import FollowRequested, MergeAnswered, PullRead
from symphony.telemetry import UNTRACED, Attribute, StepTrace, span

log = structlog.get_logger("symphony.follow")

CodeHostFactory = Callable[[RepositorySettings], CodeHost]


class CodeHosts:
    def __init__(self, factory: CodeHostFactory = create_code_host) -> None:
        self._factory = factory
        self._repository: RepositorySettings | None = None
        self._host: CodeHost | None = None
        self._retired: list[CodeHost] = []

    def for_repository(self, repository: RepositorySettings | None) -> CodeHost | None:
        """The client of `repository` (None: the workflow publishes nothing)."""
        if repository != self._repository:
            if self._host is not None:
                self._retired.append(self._host)
            self._repository = repository
            self._host = self._factory(repository) if repository is not None else None
        return self._host

    async def aclose(self) -> None:
        for host in [*self._retired, *([self._host] if self._host is not None else [])]:
            try:
                await host.aclose()
            except Exception as exc:  # closing must never fail a shutdown
                log.warning("code host client did not close", reason=str(exc))
        self._retired.clear()
        self._host = self._repository = None


def _pull_attributes(effect: core.ReadPullRequest | core.MergePullRequest) -> dict[str, Attribute]:
    return {"symphony.ticket": effect.identifier, "symphony.pull.number": effect.number}


async def read(
    host: CodeHost,
    effect: core.ReadPullRequest,
    masker: SecretMasker,
    trace: StepTrace = UNTRACED,
) -> PullRead:
    """One reading of the pull request, in a `symphony.follow` span of its own trace, linked
    to the publication: what the host said of its head, checks and review, or, ended as an
    error, why it could not be read."""
    links = [trace.after] if trace.after is not None else []
    with span(trace.tracer, "symphony.follow", None, _pull_attributes(effect), links) as reading:
        answer = await _read(host, effect, masker)
        if answer.status is None:
            reading.end(error=answer.error or "not read")
        else:
            for key, value in read_attributes(answer.status).items():
                reading.set(key, value)
    return answer


def read_attributes(status: PullStatus) -> dict[str, Attribute]:
    """What a reading's span says of the pull request: its state and head, the checks on the
    head together (`green`, `red`, `pending`, `none`) and the failed ones by name, the review."""
    pull = status.pull
    found: dict[str, Attribute] = {
        "symphony.pull.url": pull.url,
        "symphony.pull.state": pull.state.value,
        "symphony.pull.checks": core.follow.verdict_of(status.checks).value,
        "symphony.pull.review": status.review_decision.value,
        "symphony.pull.threads": len(status.threads),
    }
    failed = [c.name for c in status.checks if c.state is CheckState.FAILED]
    if failed:
        found["symphony.pull.checks_failed"] = ", ".join(failed)
    if pull.head_sha:
        found["symphony.pull.head_sha"] = pull.head_sha
    if status.mergeable is not None:
        found["symphony.pull.mergeable"] = status.mergeable
    if status.merge_state:
        found["symphony.pull.merge_state"] = status.merge_state
    return found


async def _read(host: CodeHost, effect: core.ReadPullRequest, masker: SecretMasker) -> PullRead:
    try:
        status = await host.read_status(effect.number)
    except CodeHostError as exc:
        why = masker.mask(exc.message)
        log.warning(
            "pull request read failed", issue_identifier=effect.identifier,
            number=effect.number, reason=why,
        )  # fmt: skip
        return PullRead(effect.issue_id, None, why)
    except Exception as exc:  # an adapter bug costs one reading, never the daemon
        log.exception("pull request read failed unexpectedly", issue_identifier=effect.identifier)
        return PullRead(effect.issue_id, None, f"internal error: {exc!r}")
    # Everything a code host says (CI logs and annotations, reviews, threads) enters the
    # daemon here: masked, so no prompt, comment, store row or log line can relay a secret.
    return PullRead(effect.issue_id, masker.mask_fields(status))


MERGE_ATTEMPT_S = 120.0


async def merge(
    host: CodeHost,
    effect: core.MergePullRequest,
    masker: SecretMasker,
    trace: StepTrace = UNTRACED,
) -> MergeAnswered:
    """One merge call at the head commit the policy judged, in a `symphony.merge` span of its
    own trace, linked to the publication: the policy's decision and how the host answered,
    ended as an error unless it merged."""
    attributes = {
        **_pull_attributes(effect),
        "symphony.pull.head_sha": effect.head_sha,
        "symphony.merge.method": effect.method,
        "symphony.merge.decision": effect.why,
    }
    links = [trace.after] if trace.after is not None else []
    with span(trace.tracer, "symphony.merge", None, attributes, links) as merging:
        answered = await _merge(host, effect, masker)
        merging.set("symphony.merge.answer", answered.answer.value)
        if answered.answer is not core.follow.MergeAnswer.MERGED:
            merging.end(error=f"{answered.answer.value}: {answered.detail}")
    return answered


async def _merge(
    host: CodeHost, effect: core.MergePullRequest, masker: SecretMasker
) -> MergeAnswered:
    failed = core.follow.MergeAnswer.FAILED
    try:
        async with asyncio.timeout(MERGE_ATTEMPT_S):
            merged = await host.merge(effect.number, effect.head_sha, MergeMethod(effect.method))
    except CodeHostError as exc:
        why = masker.mask(exc.message)
        answer = _ANSWERS.get(exc.category, failed)
        if answer is failed:
            log.warning("merge failed; the next reading decides", reason=why)
        return MergeAnswered(effect.issue_id, answer, why)
    except TimeoutError:
        return MergeAnswered(effect.issue_id, failed, "the merge call timed out")
    except Exception as exc:
        log.exception("merge failed unexpectedly", issue_identifier=effect.identifier)
        return MergeAnswered(effect.issue_id, failed, f"internal error: {exc!r}")
    sha = f" as {merged.sha[:12]}" if merged.sha else ""
    return MergeAnswered(
        effect.issue_id, core.follow.MergeAnswer.MERGED, f"{effect.why}; merged{sha}"
    )


_ANSWERS: dict[str, core.follow.MergeAnswer] = {
    CODE_HOST_REJECTED: core.follow.MergeAnswer.REFUSED,
    CODE_HOST_HEAD_MOVED: core.follow.MergeAnswer.HEAD_MOVED,
}


def followed(
    state: core.SchedulerState,
    event: PullRead | MergeAnswered | FollowRequested,
    settings: Settings,
    now: float,
    wall: datetime,
) -> list[core.Effect]:
    """What a reading of a pull request, a merge's answer or a code host's webhook asks for
    (`core.follow` decides)."""
    if isinstance(event, FollowRequested):
        core.follow.read_now(state)
        return []
    if isinstance(event, MergeAnswered):
        return core.follow.on_merge_answered(
            state, event.issue_id, event.answer, event.detail, settings, now, wall
        )
    if event.status is None:
        core.follow.on_read_failed(state, event.issue_id, settings, now)
        return []
    return core.follow.on_pull_read(state, event.issue_id, event.status, settings, now, wall)
