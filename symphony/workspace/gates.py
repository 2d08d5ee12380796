"""Running a stage's verification gates in a ticket's workspace.

Each gate runs like a hook (`sh -lc`, in the workspace, in its own process group, with its
timeout or `hooks.timeout_ms`), and unlike a hook also has whatever it left running ended when
it exits: a test server a gate started must not outlive it, nor hold the daemon. The caller
runs gates only between turns, never while the agent works in the workspace. They run on the
ticket's host (`symphony.hosts`), where its workspace is. Every gate of the
round runs, in order, even after one failed, so the agent learns all that is wrong at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from symphony.base.secrets import SecretMasker
from symphony.config.stages import Gate
from symphony.core.verification import GateOutcome, GateResult, GateRound
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST

log = structlog.get_logger(__name__)

BYTES_PER_CHAR = 4
"""Output is read as bytes; this many per character of the limit keeps any UTF-8 text whole."""


async def run_gates(
    gates: Sequence[Gate],
    *,
    cwd: Path,
    env: Mapping[str, str],
    default_timeout_ms: int,
    output_chars: int,
    masker: SecretMasker,
    host: Host = LOCAL_HOST,
) -> GateRound:
    """Run each gate on `host`, in the workspace, in order; output is masked with `masker`."""
    results = []
    for gate in gates:
        timeout_ms = gate.timeout_ms or default_timeout_ms
        ran = await host.run_script(
            gate.run,
            cwd=cwd,
            env={**env, "SYMPHONY_GATE": gate.name},
            timeout_ms=timeout_ms,
            tail_bytes=output_chars * BYTES_PER_CHAR,
            end_group=True,
        )
        outcome: GateOutcome = (
            "passed" if ran.ok else "timed_out" if ran.outcome == "timed_out" else "failed"
        )
        # Masked before it is cut: a cut must never leave half a secret in view.
        output = masker.mask(ran.output)[-output_chars:]
        result = GateResult(
            gate.name,
            gate.run,
            outcome,
            ran.exit_code,
            round(ran.duration_s, 3),
            ran.detail,
            output,
        )
        fields = {
            "gate": gate.name,
            "outcome": outcome,
            "exit_code": ran.exit_code,
            "duration_ms": int(ran.duration_s * 1000),
        }
        if result.passed:
            log.info("gate passed", **fields)
        else:
            log.warning("gate failed", reason=ran.detail, output=output, **fields)
        results.append(result)
    return GateRound(tuple(results))
