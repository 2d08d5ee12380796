"""Strict Liquid rendering of the workflow prompt: an unknown variable or filter is an error."""

from __future__ import annotations

from functools import lru_cache

from liquid import BoundTemplate, Environment, StrictUndefined
from liquid.exceptions import LiquidError, LiquidSyntaxError

from symphony.errors import SymphonyError
from symphony.issue import Issue

TEMPLATE_PARSE_ERROR = "template_parse_error"
TEMPLATE_RENDER_ERROR = "template_render_error"

_ENV = Environment(undefined=StrictUndefined, strict_filters=True)

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


def check_template(template: str) -> None:
    """Raise `template_parse_error` when the template does not parse."""
    try:
        _compile(template)
    except LiquidSyntaxError as exc:
        raise PromptError(TEMPLATE_PARSE_ERROR, _first_line(exc)) from None
    except LiquidError as exc:
        raise PromptError(TEMPLATE_PARSE_ERROR, _first_line(exc)) from None


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
