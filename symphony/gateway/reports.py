"""What the model gateway and the daemon say to each other: the daemon's admission of a call
(`Admit`) and the gateway's report of one (`WireReport`). Kept apart from the server, which
the daemon loads only for the first agent that holds an API key, while its event loop knows
these reports from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from symphony.base.limits import ProviderLimit
from symphony.base.wire import WireUsage
from symphony.core.gateway import Refusal

Admit = Callable[[str, str], Refusal | None]
"""Whether the run of an issue (on an agent kind) may call its model now (the daemon's
decision, `symphony.core.gateway.refusal`); None: it may."""


@dataclass(frozen=True, slots=True)
class WireReport:
    """What the gateway saw of one call of a run: the usage its provider reported, the limit
    it refused the call with, or that the gateway refused it (`refused`)."""

    issue_id: str
    usage: WireUsage | None = None
    limit: ProviderLimit | None = None
    refused: bool = False


Report = Callable[[WireReport], None]
