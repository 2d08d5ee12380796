"""The tools stage mode gives every agent: `report_outcome` and `create_follow_up`.

Agents report; the daemon decides. `report_outcome` only records what the agent says (the
stage's runner keeps the last valid report of each turn); the daemon moves the ticket when the
turn has ended. `create_follow_up` splits work into new tickets on the same tracker, through the
tracker's typed `create_issue`. Both run host-side, in the daemon, like the tracker's own tools.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    is_inline,
    object_schema,
    string_schema,
)
from symphony.config.stages import Report, StageOutcome

REPORT_OUTCOME = "report_outcome"
CREATE_FOLLOW_UP = "create_follow_up"

MAX_SUMMARY_CHARS = 4_000
MAX_PLAN_CHARS = 20_000
MAX_QUESTIONS = 20
MAX_QUESTION_CHARS = 1_000
MAX_TITLE_CHARS = 200
MAX_DESCRIPTION_CHARS = 20_000
MAX_BLOCKERS = 20
MAX_URL_CHARS = 2_000
MAX_FOLLOW_UPS_PER_RUN = 5
"""Tickets one run may create: a loop of follow-ups stops here, whatever the agent does."""


def stage_tool_specs(stage: str, follow_up_states: Sequence[str]) -> list[ToolSpec]:
    states = ", ".join(follow_up_states)
    return [
        ToolSpec(
            name=REPORT_OUTCOME,
            description=(
                f"Report the outcome of stage `{stage}` of this ticket. `done` when the stage's "
                "work is finished (give a `plan` when the stage asks for one); `blocked` when "
                "you cannot go on without a person (give `open_questions`). The daemon moves "
                "the ticket when your turn ends; you never move it yourself. You may report "
                "again in the same turn: the last report counts."
            ),
            input_schema=object_schema(
                {
                    "outcome": {"type": "string", "enum": ["done", "blocked"]},
                    "summary": string_schema(MAX_SUMMARY_CHARS, "What you did, for the ticket."),
                    "plan": string_schema(MAX_PLAN_CHARS, "The plan, in Markdown."),
                    "open_questions": {
                        "type": "array",
                        "maxItems": MAX_QUESTIONS,
                        "items": string_schema(MAX_QUESTION_CHARS, "A question for a person."),
                    },
                    "pull_request": string_schema(
                        MAX_URL_CHARS, "The URL of the pull/merge request you opened, if any."
                    ),
                },
                ["outcome", "summary"],
            ),
        ),
        ToolSpec(
            name=CREATE_FOLLOW_UP,
            description=(
                "Create a new ticket on the same tracker for work that should be done "
                "separately, optionally blocked by other tickets (by identifier), so it runs "
                f"only after them. `state` is where it starts (default: the first one of: "
                f"{states})."
            ),
            input_schema=object_schema(
                {
                    "title": string_schema(MAX_TITLE_CHARS, "The new ticket's title, one line."),
                    "description": string_schema(MAX_DESCRIPTION_CHARS, "What to do, Markdown."),
                    "blocked_by": {
                        "type": "array",
                        "maxItems": MAX_BLOCKERS,
                        "items": string_schema(200, "Identifier of a ticket it waits for."),
                    },
                    "state": string_schema(100, f"One of: {states}."),
                },
                ["title", "description"],
            ),
        ),
    ]


def parse_report(arguments: Any) -> Report | ToolResult:
    """A validated report, or the failure to hand back to the agent."""
    args = _object(arguments, REPORT_OUTCOME)
    if isinstance(args, ToolResult):
        return args
    extra = sorted(set(args) - {"outcome", "summary", "plan", "open_questions", "pull_request"})
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)}")
    outcome = args.get("outcome")
    if outcome not in ("done", "blocked"):
        return invalid_arguments('\'outcome\' must be "done" or "blocked"')
    summary = _text(args, "summary", MAX_SUMMARY_CHARS, required=True)
    if isinstance(summary, ToolResult):
        return summary
    plan = _text(args, "plan", MAX_PLAN_CHARS, required=False)
    if isinstance(plan, ToolResult):
        return plan
    questions = args.get("open_questions", [])
    if not isinstance(questions, list) or len(questions) > MAX_QUESTIONS:
        return invalid_arguments(f"'open_questions' must be a list of at most {MAX_QUESTIONS}")
    if not all(
        isinstance(q, str) and q.strip() and len(q) <= MAX_QUESTION_CHARS for q in questions
    ):
        return invalid_arguments(
            f"each open question must be non-empty text of at most {MAX_QUESTION_CHARS} chars"
        )
    pull_request = _text(args, "pull_request", MAX_URL_CHARS, required=False)
    if isinstance(pull_request, ToolResult):
        return pull_request
    if pull_request is not None and not pull_request.strip().startswith(("https://", "http://")):
        return invalid_arguments("'pull_request' must be the request's http(s) URL")
    assert summary is not None
    return Report(
        StageOutcome(outcome),
        summary,
        plan,
        tuple(q.strip() for q in questions),
        pull_request.strip() if pull_request else None,
    )


def parse_follow_up(
    arguments: Any, states: Sequence[str]
) -> tuple[str, str, tuple[str, ...], str] | ToolResult:
    """(title, description, blocked_by, state) of a valid call, or the failure result."""
    args = _object(arguments, CREATE_FOLLOW_UP)
    if isinstance(args, ToolResult):
        return args
    extra = sorted(set(args) - {"title", "description", "blocked_by", "state"})
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)}")
    title = _text(args, "title", MAX_TITLE_CHARS, required=True)
    if isinstance(title, ToolResult):
        return title
    assert title is not None
    if not is_inline(title):
        return invalid_arguments("'title' must be one line of text")
    description = _text(args, "description", MAX_DESCRIPTION_CHARS, required=True)
    if isinstance(description, ToolResult):
        return description
    blocked_by = args.get("blocked_by", [])
    if not isinstance(blocked_by, list) or len(blocked_by) > MAX_BLOCKERS:
        return invalid_arguments(f"'blocked_by' must be a list of at most {MAX_BLOCKERS}")
    if not all(isinstance(b, str) and b.strip() and is_inline(b) for b in blocked_by):
        return invalid_arguments("each 'blocked_by' entry must be a ticket identifier")
    state = args.get("state", states[0])
    match = next(
        (s for s in states if isinstance(state, str) and s.casefold() == state.strip().casefold()),
        None,
    )
    if match is None:
        return invalid_arguments(f"'state' must be one of: {', '.join(states)}")
    assert description is not None
    return title, description, tuple(dict.fromkeys(b.strip() for b in blocked_by)), match


def _object(arguments: Any, name: str) -> Mapping[str, Any] | ToolResult:
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, Mapping):
        return invalid_arguments(f"{name} takes an object of named arguments")
    return arguments


def _text(
    args: Mapping[str, Any], key: str, limit: int, *, required: bool
) -> str | ToolResult | None:
    value = args.get(key)
    if value is None:
        return invalid_arguments(f"missing required argument {key!r}") if required else None
    if not isinstance(value, str) or not value.strip():
        return invalid_arguments(f"{key!r} must be non-empty text")
    if len(value) > limit:
        return invalid_arguments(f"{key!r} is longer than {limit} characters")
    if "\x00" in value:
        return invalid_arguments(f"{key!r} must not contain NUL characters")
    return value.strip()
