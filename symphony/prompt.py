"""Strict Liquid rendering of the workflow prompt: an unknown variable or filter is an error."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from liquid import BoundTemplate, Environment, StrictUndefined
from liquid.exceptions import LiquidError

from symphony.errors import SymphonyError
from symphony.issue import ANYTHING, ISSUE_TEMPLATE_SHAPE, VALUE, Issue, TemplateShape

TEMPLATE_PARSE_ERROR = "template_parse_error"
TEMPLATE_RENDER_ERROR = "template_render_error"
TEMPLATE_UNKNOWN_VARIABLE = "template_unknown_variable"
TEMPLATE_UNKNOWN_FILTER = "template_unknown_filter"

_ENV = Environment(undefined=StrictUndefined, strict_filters=True)

PROMPT_VARIABLES: Mapping[str, TemplateShape] = {"issue": ISSUE_TEMPLATE_SHAPE, "attempt": VALUE}
"""Everything the daemon hands a prompt template; a template reading anything else is refused
when the workflow is loaded, not at each dispatch."""

CONTINUATION_GUIDANCE = (
    "Continue working on {identifier}. This is turn {turn} of at most {max_turns} in this "
    'session; the ticket is still in state "{state}". Pick up where you left off and move the '
    "ticket to its hand-off state when the work is done."
)


class PromptError(SymphonyError):
    """The template could not be parsed or rendered for this issue."""


@lru_cache(maxsize=8)
def _compile(template: str) -> BoundTemplate:
    return _ENV.from_string(template)


@lru_cache(maxsize=8)
def check_template(template: str, *, first_line: int = 1) -> None:
    """Parse the template and check, without rendering, that it reads only variables the daemon
    provides (`PROMPT_VARIABLES`) through filters that exist.

    Raises `template_parse_error`, `template_unknown_variable` or `template_unknown_filter`;
    `first_line` is the line of WORKFLOW.md the template starts on, so messages can name lines.
    """
    try:
        compiled = _compile(template)
        analysis = compiled.analyze()
    except LiquidError as exc:
        raise PromptError(TEMPLATE_PARSE_ERROR, _first_line(exc)) from None
    for uses in analysis.globals.values():
        for use in uses:
            problem = _shape_problem(list(use.segments), PROMPT_VARIABLES)
            if problem is not None:
                line = first_line + template.count("\n", 0, use.span.index)
                raise PromptError(
                    TEMPLATE_UNKNOWN_VARIABLE, f"prompt line {line} of WORKFLOW.md: {problem}"
                )
    for name, spans in analysis.filters.items():
        if name not in _ENV.filters:
            line = first_line + template.count("\n", 0, spans[0].index)
            hint = _suggest(name, _ENV.filters)
            raise PromptError(
                TEMPLATE_UNKNOWN_FILTER,
                f"prompt line {line} of WORKFLOW.md: there is no filter `{name}`{hint}",
            )


def _shape_problem(segments: list[Any], fields: Mapping[str, TemplateShape]) -> str | None:
    """Why reading `segments` (root first) finds nothing in the variables, or None if it may."""
    shape: TemplateShape = fields
    path = ""
    for segment in segments:
        if not isinstance(segment, str | int):
            return None  # an index computed at render time: nothing to check statically
        if shape == ANYTHING:
            return None
        shown = (
            f"{path}[{segment}]"
            if isinstance(segment, int)
            else (f"{path}.{segment}" if path else segment)
        )
        if isinstance(shape, Mapping):
            if isinstance(segment, str) and segment in shape:
                shape = shape[segment]
            elif segment == "size":
                shape = VALUE
            else:
                where = f"`{path}`" if path else "the prompt"
                available = ", ".join(f"{path}.{k}" if path else k for k in shape)
                return (
                    f"`{shown}` is not something the daemon provides to {where}"
                    f"{_suggest(str(segment), shape)} (available: {available})"
                )
        elif isinstance(shape, tuple):
            if isinstance(segment, int) or segment in ("first", "last"):
                shape = shape[0]
            elif segment == "size":
                shape = VALUE
            else:
                return f"`{shown}`: `{path}` is a list (use an index, first, last or size)"
        elif segment == "size":
            shape = VALUE
        else:
            return f"`{shown}`: `{path}` is a plain value with no fields"
        path = shown
    return None


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def render_prompt(template: str, issue: Issue, attempt: int | None) -> str:
    """The first-turn prompt for `issue`; `attempt` is None on the first run."""
    check_template(template)
    try:
        rendered: str = _compile(template).render(issue=issue.to_template(), attempt=attempt)
        return rendered
    except LiquidError as exc:
        raise PromptError(TEMPLATE_RENDER_ERROR, _first_line(exc)) from None


def continuation_prompt(issue: Issue, turn: int, max_turns: int) -> str:
    """Guidance for a later turn on the same thread, which already holds the full prompt."""
    return CONTINUATION_GUIDANCE.format(
        identifier=issue.identifier, turn=turn, max_turns=max_turns, state=issue.state
    )


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
