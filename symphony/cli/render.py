"""`symphony render ID`: the prompt a ticket would get, printed."""

from __future__ import annotations

import argparse
import sys

from symphony.base.exits import EXIT_FAILED, EXIT_OK
from symphony.base.issue import Issue
from symphony.base.secrets import SecretMasker
from symphony.cli import loop
from symphony.cli.workflows import load
from symphony.config.prompt import render_prompt
from symphony.config.sections import Settings
from symphony.daemon.runner import stage_context
from symphony.memory import Ticket, memory_of
from symphony.tracker.contract import Tracker, resolve_states


def render(args: argparse.Namespace) -> int:
    """Print the prompt a ticket would get."""
    masker = SecretMasker()
    settings, tracker = load(args.workflow, masker)
    prompt = loop.run(_render_for(tracker, settings, args.issue, args.attempt, masker))
    if prompt is None:
        print(f"symphony: no ticket {args.issue!r} in {settings.tracker.kind}", file=sys.stderr)
        return EXIT_FAILED
    print(prompt)
    return EXIT_OK


async def _render_for(
    tracker: Tracker, settings: Settings, wanted: str, attempt: int | None, masker: SecretMasker
) -> str | None:
    """The first-turn prompt `wanted` (an id or identifier) would get; in stage mode that of
    its stage, with the plan and comments read from the tracker as a dispatch would."""
    try:
        issue = await _find(tracker, settings, wanted)
        if issue is None:
            return None
        stage = settings.machine.stage_for(issue.state) if settings.machine else None
        memory = memory_of(settings, masker)
        if stage is None:
            notes = memory.for_prompt(Ticket.of(issue)) if memory is not None else None
            return render_prompt(settings.prompt_template, issue, attempt, memory=notes)
        context = await stage_context(tracker, issue, stage, settings.trust)
        notes = memory.for_prompt(Ticket.of(issue, plan=context.plan)) if memory else None
        return render_prompt(stage.prompt_template, issue, attempt, context, memory=notes)
    finally:
        await tracker.aclose()


async def _find(tracker: Tracker, settings: Settings, wanted: str) -> Issue | None:
    found = await tracker.fetch_issues_by_ids([wanted])
    if found:
        return found[0]
    resolved = await resolve_states(settings.tracker, tracker)
    states = resolved.active_states + resolved.terminal_states
    if settings.machine is not None:
        states += settings.machine.checkpoint_states(resolved.terminal_states)
    for issue in await tracker.fetch_issues_by_states(states):
        if issue.identifier == wanted:
            return issue
    return None
