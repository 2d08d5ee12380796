"""Strict Liquid rendering of the workflow prompt: an unknown variable or filter is an error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.fences import RunMarks, by, framed, new_marks, quoted
from symphony.base.issue import ANYTHING, ISSUE_TEMPLATE_SHAPE, VALUE, Issue, TemplateShape
from symphony.base.suggest import did_you_mean
from symphony.base.templating import BoundTemplate, Environment, LiquidError, StrictUndefined

if TYPE_CHECKING:
    from symphony.config.sections import Settings

TEMPLATE_PARSE_ERROR = ErrorCategory.TEMPLATE_PARSE_ERROR
TEMPLATE_RENDER_ERROR = ErrorCategory.TEMPLATE_RENDER_ERROR
TEMPLATE_UNKNOWN_VARIABLE = ErrorCategory.TEMPLATE_UNKNOWN_VARIABLE
TEMPLATE_UNKNOWN_FILTER = ErrorCategory.TEMPLATE_UNKNOWN_FILTER

_ENV = Environment(undefined=StrictUndefined, strict_filters=True)

PROMPT_VARIABLES: Mapping[str, TemplateShape] = {
    "issue": ISSUE_TEMPLATE_SHAPE,
    "attempt": VALUE,
    "memory": VALUE,
}
"""Everything the daemon hands a prompt template; a template reading anything else is refused
when the workflow is loaded, not at each dispatch. `memory` is the notes of earlier tickets
relevant to this one (`symphony.memory`), nil when there are none."""

COMMENT_SHAPE: TemplateShape = {"author": VALUE, "body": VALUE, "created_at": VALUE}
STAGE_PROMPT_VARIABLES: Mapping[str, TemplateShape] = {
    **PROMPT_VARIABLES,
    "stage": VALUE,
    "plan": VALUE,
    "comments": (COMMENT_SHAPE,),
    "review": VALUE,
}
"""What a stage prompt gets besides `issue` and `attempt`: the stage's name, the ticket's plan
(nil until one is posted), its comments, oldest first, and the review a rework addresses (nil in
a run that has no review to address)."""


@dataclass(frozen=True, slots=True)
class StageContext:
    """The stage-mode variables of one rendering."""

    stage: str
    plan: str | None
    comments: tuple[Mapping[str, Any], ...]
    review: str | None = None


CONTINUATION_GUIDANCE = (
    "Continue working on {identifier}. This is turn {turn} of at most {max_turns} in this "
    'session; the ticket is still in state "{state}". Pick up where you left off and move the '
    "ticket to its hand-off state when the work is done."
)


STAGE_CONTINUATION_GUIDANCE = (
    "Continue working on {identifier}, stage {stage}. This is turn {turn} of at most "
    "{max_turns} in this session. Pick up where you left off. When the stage's work is done, "
    "call report_outcome with outcome done (or blocked, with your open questions, if you "
    "cannot go on without a person): the daemon moves the ticket, never you."
)


class PromptError(SymphonyError):
    """The template could not be parsed or rendered for this issue."""


@lru_cache(maxsize=8)
def _compile(template: str) -> BoundTemplate:
    return _ENV.from_string(template)


@lru_cache(maxsize=16)
def check_template(
    template: str, *, first_line: int = 1, source: str = "WORKFLOW.md", stage_mode: bool = False
) -> None:
    """Parse the template and check, without rendering, that it reads only variables the daemon
    provides (`PROMPT_VARIABLES`, or `STAGE_PROMPT_VARIABLES` in stage mode) through filters
    that exist.

    Raises `template_parse_error`, `template_unknown_variable` or `template_unknown_filter`;
    `first_line` is the line of `source` the template starts on, so messages can name lines.
    """
    variables = STAGE_PROMPT_VARIABLES if stage_mode else PROMPT_VARIABLES
    _check(template, variables, first_line, source, "prompt")


TITLE_VARIABLES: Mapping[str, TemplateShape] = {"issue": ISSUE_TEMPLATE_SHAPE}
"""What a pull request's title template (`stages.<name>.publish.title`) may read."""


@lru_cache(maxsize=16)
def check_title(template: str, source: str) -> None:
    """A publish title template, checked like a prompt; `source` names the setting."""
    _check(template, TITLE_VARIABLES, 1, source, "title")


def render_title(template: str, issue: Issue) -> str:
    """The pull request title for `issue`, on one line."""
    check_title(template, "publish.title")
    try:
        rendered = _compile(template).render(issue=issue.to_template())
    except LiquidError as exc:
        raise PromptError(TEMPLATE_RENDER_ERROR, f"publish.title: {_first_line(exc)}") from None
    return " ".join(rendered.split())


def _check(
    template: str, variables: Mapping[str, TemplateShape], first_line: int, source: str, what: str
) -> None:
    try:
        compiled = _compile(template)
        analysis = compiled.analyze()
    except LiquidError as exc:
        line = first_line + _error_line(template, exc)
        raise PromptError(
            TEMPLATE_PARSE_ERROR, f"{what} line {line} of {source}: {_first_line(exc)}"
        ) from None
    for uses in analysis.globals.values():
        for use in uses:
            problem = _shape_problem(list(use.segments), variables)
            if problem is not None:
                line = first_line + template.count("\n", 0, use.span.index)
                raise PromptError(
                    TEMPLATE_UNKNOWN_VARIABLE, f"{what} line {line} of {source}: {problem}"
                )
    for name, spans in analysis.filters.items():
        if name not in _ENV.filters:
            line = first_line + template.count("\n", 0, spans[0].index)
            hint = did_you_mean(name, _ENV.filters)
            raise PromptError(
                TEMPLATE_UNKNOWN_FILTER,
                f"{what} line {line} of {source}: there is no filter `{name}`{hint}",
            )


def check_prompts(settings: Settings) -> None:
    """Check every template the workflow will render: the body, or each stage's prompt."""
    if settings.machine is None:
        check_template(settings.prompt_template, first_line=settings.prompt_line)
        return
    for stage in settings.machine.stages:
        try:
            check_template(
                stage.prompt_template,
                first_line=stage.prompt_line,
                source=stage.prompt_source,
                stage_mode=True,
            )
        except PromptError as exc:
            raise PromptError(exc.category, f"stage {stage.name}: {exc.message}") from None
        if stage.publish is not None:
            check_title(stage.publish.title, f"stages.{stage.name}.publish.title")


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
                    f"{did_you_mean(str(segment), shape)} (available: {available})"
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


def render_prompt(
    template: str,
    issue: Issue,
    attempt: int | None,
    stage: StageContext | None = None,
    *,
    memory: str | None = None,
    marks: RunMarks | None = None,
) -> str:
    """The first-turn prompt for `issue`, framed (`symphony.base.fences.framed`) with the
    run's `marks` (fresh ones when not given); `attempt` is None on the first run."""
    rendered = render_material(template, issue, attempt, stage, memory=memory)
    return framed(rendered, marks or new_marks())


def render_material(
    template: str,
    issue: Issue,
    attempt: int | None,
    stage: StageContext | None = None,
    *,
    memory: str | None = None,
) -> str:
    """The template rendered, every text from outside the workflow in it still marked as a
    quoted piece for the run to seal. `stage` carries the stage-mode variables (`stage`,
    `plan`, `comments` whose bodies are quoted already, `review`), `memory` the notes chosen
    for it."""
    check_template(template, stage_mode=stage is not None)
    variables: dict[str, Any] = {
        "issue": material_of(issue),
        "attempt": attempt,
        "memory": quoted(memory, "notes from earlier tickets") if memory else memory,
    }
    if stage is not None:
        variables.update(
            stage=stage.stage,
            plan=quoted(stage.plan, "plan on the ticket") if stage.plan else stage.plan,
            comments=[dict(c) for c in stage.comments],
            review=stage.review,
        )
    try:
        rendered: str = _compile(template).render(**variables)
        return rendered
    except LiquidError as exc:
        raise PromptError(TEMPLATE_RENDER_ERROR, _first_line(exc)) from None


def material_of(issue: Issue) -> dict[str, Any]:
    """`issue` for a prompt template: its title and description quoted, so that
    `{{ issue.description }}` yields a fenced block."""
    values = issue.to_template()
    values["title"] = quoted(issue.title, "ticket title")
    if issue.description:
        values["description"] = quoted(issue.description, by("ticket description", issue.author))
    return values


def continuation_prompt(issue: Issue, turn: int, max_turns: int) -> str:
    """Guidance for a later turn on the same thread, which already holds the full prompt."""
    return CONTINUATION_GUIDANCE.format(
        identifier=issue.identifier, turn=turn, max_turns=max_turns, state=issue.state
    )


def stage_continuation_prompt(issue: Issue, stage: str, turn: int, max_turns: int) -> str:
    """Stage mode's guidance for a later turn: report the outcome, do not move the ticket."""
    return STAGE_CONTINUATION_GUIDANCE.format(
        identifier=issue.identifier, stage=stage, turn=turn, max_turns=max_turns
    )


def _error_line(template: str, exc: LiquidError) -> int:
    """The line (from 0) of `template` where the parse error `exc` is. Liquid places most
    errors; one found only at the end (a block never closed, an expression cut short) is
    placed on the first line whose template up to there fails the same way."""
    index = exc.token.start_index if exc.token is not None else -1
    if index >= 0:
        return template.count("\n", 0, index)
    lines = template.split("\n")
    for end in range(1, len(lines) + 1):
        try:
            _ENV.from_string("\n".join(lines[:end]))
        except LiquidError as early:
            if _first_line(early) == _first_line(exc):
                return end - 1
    return len(lines) - 1


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
