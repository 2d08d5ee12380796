"""The log line of each decision the core hands the daemon to perform.

One record per effect worth a line (a dispatch is logged by the performer when its worker
starts; a comment or a workspace removal by the task that writes it). Reading an effect here
never changes what is performed.
"""

from __future__ import annotations

import structlog

from symphony import core

log = structlog.get_logger("symphony.orchestrator")


def log_effect(effect: core.Effect) -> None:
    """Write the effect's record, if it has one."""
    if isinstance(effect, core.TransitionDone):
        log.info(
            "ticket moved" if effect.confirmed else "move abandoned",
            issue_id=effect.issue_id,
            issue_identifier=effect.identifier,
            stage=effect.from_stage,
            outcome=effect.outcome,
            state=effect.target,
        )
    elif isinstance(effect, core.TransitionRetry):
        log.warning(
            "move failed, retrying",
            issue_id=effect.issue_id,
            issue_identifier=effect.identifier,
            state=effect.target,
            attempt=effect.attempt,
            delay_s=round(effect.delay_s, 3),
            error=effect.error,
        )
    elif isinstance(effect, core.StopWorker):
        log.info(
            "stopping run",
            issue_id=effect.issue_id,
            issue_identifier=effect.identifier,
            reason=effect.reason.value,
            detail=effect.detail,
        )
    elif isinstance(effect, core.AgentLimited | core.AgentResumed):
        _log_limit(effect)
    elif isinstance(effect, core.HostMarkedDown):
        log.warning(
            "host marked down",
            host=effect.host,
            failures=effect.failures,
            cooloff_s=effect.cooloff_s,
            reason=effect.error,
        )
    elif isinstance(effect, core.RetryScheduled):
        entry = effect.entry
        log.info(
            "retrying" if entry.kind is core.RetryKind.FAILURE else "continuing",
            issue_id=entry.issue_id,
            issue_identifier=entry.identifier,
            attempt=entry.attempt,
            delay_s=round(effect.delay_s, 3),
            error=entry.error,
        )
    elif isinstance(effect, core.Released):
        log.info(
            "released",
            issue_id=effect.issue_id,
            issue_identifier=effect.identifier,
            reason=effect.reason,
        )


def _log_limit(effect: core.AgentLimited | core.AgentResumed) -> None:
    if isinstance(effect, core.AgentResumed):
        log.info("agent resumed", agent=effect.agent_kind, paused_s=round(effect.paused_s, 1))
        return
    log.warning(
        "agent limited",
        agent=effect.pause.agent_kind,
        issue_identifier=effect.identifier or None,
        until=effect.pause.until.isoformat(timespec="seconds"),
        reset_named=effect.pause.named,
        reason=effect.pause.describe(),
    )
