"""Verification gates run for real: exit codes, output tails, timeouts that end the whole
process group, background children that must not hold the daemon, masked secrets."""

from __future__ import annotations

import os
import time
from pathlib import Path

from symphony.base.fences import plain
from symphony.base.secrets import SecretMasker
from symphony.config.stages import Gate
from symphony.core.verification import (
    GateRound,
    Verification,
    describe_failures,
    fence,
    fix_prompt,
)
from symphony.workspace.gates import run_gates
from tests.harness import is_alive, wait_until


async def gates(
    tmp_path: Path, *gates: Gate, output_chars: int = 4000, masker: SecretMasker | None = None
) -> GateRound:
    return await run_gates(
        gates,
        cwd=tmp_path,
        env=dict(os.environ),
        default_timeout_ms=10_000,
        output_chars=output_chars,
        masker=masker or SecretMasker(),
    )


async def test_every_gate_runs_in_order_and_a_failure_keeps_its_code_and_output_end(
    tmp_path: Path,
) -> None:
    round_ = await gates(
        tmp_path,
        Gate("tests", "seq 1 3000; echo 'FAILED test_calc.py::test_add'; exit 3"),
        Gate("lint", "echo $SYMPHONY_GATE > ran-second; true"),
    )
    tests, lint = round_.results
    assert (tests.outcome, tests.exit_code, tests.detail) == ("failed", 3, "exited with status 3")
    assert tests.output.endswith("FAILED test_calc.py::test_add\n")
    assert len(tests.output) == 4000  # the end of 14,000 characters
    assert lint.passed and (tmp_path / "ran-second").read_text() == "lint\n"
    assert not round_.passed and round_.failures == (tests,)


async def test_a_hanging_gate_is_killed_at_its_timeout_with_its_process_group(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    round_ = await gates(
        tmp_path,
        Gate("hangs", "sleep 60 & echo $! > child; sleep 60", timeout_ms=300),
    )
    (result,) = round_.results
    assert result.outcome == "timed_out" and result.detail == "timed out after 300 ms"
    assert time.monotonic() - started < 5
    child = int((tmp_path / "child").read_text())
    assert wait_until(lambda: not is_alive(child))


async def test_a_background_child_holding_the_output_neither_hangs_nor_outlives_the_gate(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    round_ = await gates(tmp_path, Gate("server", "sleep 60 & echo $! > child; echo started"))
    assert round_.passed and round_.results[0].output == "started\n"
    assert time.monotonic() - started < 5
    assert wait_until(lambda: not is_alive(int((tmp_path / "child").read_text())))


async def test_a_child_that_left_the_gates_process_group_does_not_outlive_the_gate(
    tmp_path: Path,
) -> None:
    script = "setsid sleep 60 > /dev/null 2>&1 & echo $! > child; echo started"
    round_ = await gates(tmp_path, Gate("server", script))
    assert round_.passed
    assert wait_until(lambda: not is_alive(int((tmp_path / "child").read_text())))


async def test_a_gate_that_cannot_start_fails_with_the_reason(tmp_path: Path) -> None:
    round_ = await gates(tmp_path / "gone", Gate("tests", "true"))
    (result,) = round_.results
    assert result.outcome == "failed" and result.detail.startswith("could not start")


async def test_a_secret_a_gate_prints_is_masked_in_its_output(tmp_path: Path) -> None:
    masker = SecretMasker()
    masker.set(["tok_supersecret_42"])
    leaky = Gate("leaky", "echo token=tok_supersecret_42; exit 1")
    round_ = await gates(tmp_path, leaky, masker=masker)
    assert round_.results[0].output == "token=[redacted]\n"


async def test_the_fix_prompt_names_the_failed_gates_and_carries_their_output(
    tmp_path: Path,
) -> None:
    round_ = await gates(
        tmp_path,
        Gate("tests", "echo 'assert 2 == 3'; exit 1"),
        Gate("lint", "true"),
    )
    prompt = fix_prompt("ABC-1", round_, 1, 2)
    assert "`tests` failed. This is fix turn 1 of at most 2." in prompt
    assert "Gate `tests` (`echo 'assert 2 == 3'; exit 1`) exited with status 1" in prompt
    assert "its output:\n\noutput of gate tests: assert 2 == 3\n" in plain(prompt)
    assert "```\nassert 2 == 3\n```" in describe_failures(round_)  # for people
    assert "`lint`" not in prompt
    # A round trip through JSON (the store keeps verification with its transition).
    verification = Verification((round_,))
    assert Verification.from_json(verification.to_json()) == verification


def test_output_with_backticks_cannot_close_its_code_block() -> None:
    assert fence("a ``` b") == "````\na ``` b\n````"
    assert fence("plain") == "```\nplain\n```"
