"""What the daemon's verification found: results of the gates a stage declares (`verify:`), and
the words that carry them to the agent (a fix turn) and to people (a comment).

An agent's "tests pass" is a claim; a gate is the daemon running the command itself in the
workspace after the agent reported done (`symphony.workspace.gates` runs them). Only a round
in which every gate passed lets the stage succeed. These are plain values, kept in the store with
the transition they lead to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from symphony.base.fences import quoted

GateOutcome = Literal["passed", "failed", "timed_out"]


@dataclass(frozen=True, slots=True)
class GateResult:
    """What one gate's command did in one round: passed, failed or timed out, with its exit and the
    end of its output."""

    name: str
    run: str
    outcome: GateOutcome
    exit_code: int | None
    duration_s: float
    detail: str
    """`exited with status 1`, `timed out after 900000 ms`, `could not start: ...`."""
    output: str = ""
    """The end of its output, secrets masked, at most the stage's `verify_output_chars`."""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "run": self.run,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "detail": self.detail,
            "output": self.output,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateResult:
        return cls(
            str(data["name"]),
            str(data["run"]),
            data["outcome"],
            data.get("exit_code"),
            float(data.get("duration_s", 0.0)),
            str(data.get("detail", "")),
            str(data.get("output", "")),
        )


@dataclass(frozen=True, slots=True)
class GateRound:
    """Every gate of the stage, run once, in order."""

    results: tuple[GateResult, ...]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def failures(self) -> tuple[GateResult, ...]:
        return tuple(result for result in self.results if not result.passed)


@dataclass(frozen=True, slots=True)
class Verification:
    """The rounds of one hand-off attempt: the first after the agent's report, then one after
    each fix turn."""

    rounds: tuple[GateRound, ...]

    @property
    def passed(self) -> bool:
        return bool(self.rounds) and self.rounds[-1].passed

    @property
    def fix_turns(self) -> int:
        return max(len(self.rounds) - 1, 0)

    @property
    def last(self) -> GateRound:
        return self.rounds[-1]

    def to_json(self) -> list[list[dict[str, Any]]]:
        return [[result.to_json() for result in round_.results] for round_ in self.rounds]

    @classmethod
    def from_json(cls, data: Any) -> Verification:
        return cls(
            tuple(
                GateRound(tuple(GateResult.from_json(result) for result in round_))
                for round_ in data
            )
        )


def fix_prompt(identifier: str, failed: GateRound, fix_turn: int, max_fix_turns: int) -> str:
    """The prompt of a fix turn: which gates failed, with the end of their output."""
    names = ", ".join(f"`{result.name}`" for result in failed.failures)
    return (
        f"You reported {identifier} done, and the daemon ran this stage's verification in your "
        f"workspace: {names} failed. This is fix turn {fix_turn} of at most {max_fix_turns}.\n\n"
        f"{describe_failures(failed, quote=True)}\n\n"
        "Fix the cause, commit, and call report_outcome again: `done` when the work is ready "
        "(the daemon runs the gates again), or `blocked` if you cannot fix it."
    )


def describe_failures(round_: GateRound, *, quote: bool = False) -> str:
    """Each failed gate: its command, what happened, and the end of its output: in a code
    block for people, or quoted as material for an agent (`quote`)."""
    parts = []
    for result in round_.failures:
        part = f"Gate `{result.name}` (`{result.run}`) {result.detail} after {_seconds(result)}."
        if result.output.strip():
            output = (
                quoted(result.output.rstrip(), f"output of gate {result.name}")
                if quote
                else fence(result.output)
            )
            part += f"\nThe end of its output:\n\n{output}"
        parts.append(part)
    return "\n\n".join(parts)


def fence(text: str) -> str:
    """`text` in a Markdown code block whose fence no line of it can close."""
    longest = max((len(run) for run in _backtick_runs(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text.rstrip()}\n{ticks}"


def _backtick_runs(text: str) -> list[str]:
    runs, current = [], ""
    for char in text:
        if char == "`":
            current += char
        elif current:
            runs.append(current)
            current = ""
    if current:
        runs.append(current)
    return runs


def _seconds(result: GateResult) -> str:
    return f"{result.duration_s:.1f} s"
