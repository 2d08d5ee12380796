"""The evidence a hand-off carries: what the daemon itself saw, not what the agent claims.

When a stage with `evidence` succeeds, the daemon posts one comment on the ticket (edited in
place on later hand-offs) and writes the same bundle as JSON into the workspace
(`.symphony/evidence.json`). It holds each gate of the last verification round with command,
exit code and duration, the workspace's git facts (branch, commits and diff stat against the
base, uncommitted changes), the pull request the agent names, turns, tokens and agent time, the
agent's summary and open questions, and how many fix turns and hand-offs it took.

Everything here is pure, so the scheduling core assembles the bundle with its own records; the
workspace's git facts are read by `symphony.workspace.facts` (I/O, in the worker).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from symphony.core.costs import usd
from symphony.core.verification import Verification

if TYPE_CHECKING:
    from symphony.config.stages import Report


OUTPUT_TAIL_CHARS = 2000
"""How much of each gate's last output the evidence keeps, for a reviewer."""


@dataclass(frozen=True, slots=True)
class WorkspaceFacts:
    """A git workspace as the daemon found it after the stage's last turn."""

    branch: str | None
    head: str | None
    base: str | None
    """What the changes are compared against: `workspace.base_ref`, or the start commit."""
    base_source: str
    """`workspace.base_ref`, `workspace start`, or why there is no base."""
    commits: tuple[str, ...] = ()
    """`<short sha> <subject>`, newest first, at most MAX_COMMITS."""
    more_commits: int = 0
    diff_stat: str = ""
    uncommitted: int = 0
    """Paths with changes not committed (staged, unstaged or untracked)."""
    merge: MergeCheck | None = None
    """Whether the branch merges cleanly onto the base branch as it is now; None: not checked
    (no base branch known)."""
    conflicts_with: tuple[MergeCheck, ...] = ()
    """Other open tickets whose branches conflict with this one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "head": self.head,
            "base": self.base,
            "base_source": self.base_source,
            "commits": list(self.commits),
            "more_commits": self.more_commits,
            "diff_stat": self.diff_stat,
            "uncommitted": self.uncommitted,
            "merge": self.merge.to_json() if self.merge is not None else None,
            "conflicts_with": [c.to_json() for c in self.conflicts_with],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkspaceFacts:
        merge = data.get("merge")
        return cls(
            data.get("branch"),
            data.get("head"),
            data.get("base"),
            str(data.get("base_source", "")),
            tuple(data.get("commits") or ()),
            int(data.get("more_commits") or 0),
            str(data.get("diff_stat") or ""),
            int(data.get("uncommitted") or 0),
            MergeCheck.from_json(merge) if isinstance(merge, Mapping) else None,
            tuple(
                MergeCheck.from_json(c)
                for c in data.get("conflicts_with") or ()
                if isinstance(c, Mapping)
            ),
        )


@dataclass(frozen=True, slots=True)
class MergeCheck:
    """What `git merge-tree` says of merging the ticket's branch with `onto` (the base branch,
    or another open ticket's branch, by identifier)."""

    onto: str
    clean: bool | None
    """None: git could not tell (an old git, or commits it cannot see)."""
    files: tuple[str, ...] = ()
    """The files that conflict, at most MAX_CONFLICT_FILES."""

    def to_json(self) -> dict[str, Any]:
        return {"onto": self.onto, "clean": self.clean, "files": list(self.files)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MergeCheck:
        clean = data.get("clean")
        return cls(
            str(data.get("onto", "")),
            clean if isinstance(clean, bool) else None,
            tuple(str(f) for f in data.get("files") or ()),
        )


# The bundle (pure)


def build_evidence(
    *,
    identifier: str,
    stage: str,
    target: str,
    report: Report,
    verification: Verification | None,
    facts: WorkspaceFacts | None,
    turns: int,
    tokens: tuple[int, int, int],
    agent_seconds: float,
    hand_off: int,
    cost_usd: float | None = None,
    agent: str | None = None,
    model: str | None = None,
    sandbox: str = "none",
    run: str | None = None,
) -> dict[str, Any]:
    """The evidence of one hand-off, JSON-safe. `sandbox` is the boundary the agent and the
    gates ran in, in words; `run` what the run that handed it over was (`conflict fix 1/2`)."""
    gates = None
    if verification is not None and verification.rounds:
        gates = {
            "passed": verification.passed,
            "rounds": len(verification.rounds),
            "fix_turns": verification.fix_turns,
            "results": [
                {
                    **{k: v for k, v in result.to_json().items() if k != "output"},
                    "output_tail": result.output[-OUTPUT_TAIL_CHARS:],
                }
                for result in verification.last.results
            ],
        }
    return {
        "ticket": identifier,
        "stage": stage,
        "handed_to": target,
        "hand_off": hand_off,
        "verification": gates,
        "workspace": facts.to_json() if facts is not None else None,
        "pull_request": report.pull_request,
        "agent": agent,
        "model": model,
        "sandbox": sandbox,
        "run": run,
        "turns": turns,
        "tokens": {"input": tokens[0], "output": tokens[1], "total": tokens[2]},
        "cost_usd": None if cost_usd is None else round(cost_usd, 4),
        "agent_seconds": round(agent_seconds, 1),
        "summary": report.summary,
        "open_questions": list(report.open_questions),
    }


def render_evidence(evidence: Mapping[str, Any]) -> str:
    """The evidence comment, in Markdown that reads well as plain text too."""
    lines = [
        f"**Evidence** for {evidence['ticket']}: stage `{evidence['stage']}` handed to "
        f"{evidence['handed_to']} (hand-off {evidence['hand_off']}). Everything below is what "
        "the daemon ran and read itself, except the agent's summary.",
        "",
    ]
    gates = evidence.get("verification")
    if gates:
        lines += ["| Gate | Command | Result | Exit code | Time |", "|---|---|---|---|---|"]
        for result in gates["results"]:
            code = "" if result["exit_code"] is None else str(result["exit_code"])
            lines.append(
                f"| {_cell(result['name'])} | `{_cell(result['run'])}` | {result['outcome']} "
                f"| {code} | {result['duration_s']:.1f} s |"
            )
        fixes = gates["fix_turns"]
        sandbox = evidence.get("sandbox") or "none"
        lines += [
            "",
            "All gates passed"
            + (f" after {fixes} fix turn{'s' if fixes != 1 else ''}." if fixes else " at once.")
            + (
                f" The agent and the gates ran in a sandbox: {sandbox}."
                if sandbox != "none"
                else ""
            ),
            "",
        ]
    workspace = evidence.get("workspace")
    if workspace:
        lines += _workspace_lines(workspace)
    published = evidence.get("published")
    if published:
        number, url = published["number"], published["url"]
        lines += [f"Pull request #{number}, opened by the daemon: {url}", ""]
    elif evidence.get("pull_request"):
        lines += [f"Pull request (as the agent reports it): {evidence['pull_request']}", ""]
    tokens = evidence["tokens"]
    ran = evidence.get("agent")
    if ran:
        ran = f"{ran} ({evidence['model']})" if evidence.get("model") else ran
    run = evidence.get("run")
    lines += [
        (f"Agent: {ran}. " if ran else "")
        + (f"Run: {run}. " if run else "")
        + f"Turns in this stage: {evidence['turns']}. Tokens for the ticket so far: "
        f"{tokens['total']:,} ({tokens['input']:,} in, {tokens['output']:,} out), costing "
        f"{usd(evidence.get('cost_usd'))}. Agent time: {_duration(evidence['agent_seconds'])}.",
        "",
        "**The agent's summary**",
        "",
        str(evidence["summary"]).strip(),
    ]
    questions = evidence.get("open_questions") or []
    if questions:
        lines += ["", "**Open questions**", "", *(f"- {q}" for q in questions)]
    return "\n".join(lines)


def _workspace_lines(workspace: Mapping[str, Any]) -> list[str]:
    head = (workspace.get("head") or "")[:12]
    where = f"Branch `{workspace['branch']}` at `{head}`" if workspace.get("branch") else "HEAD"
    base = workspace.get("base")
    if not base:
        return [f"{where}; no base to compare with ({workspace['base_source']}).", ""]
    commits = list(workspace.get("commits") or [])
    count = len(commits) + int(workspace.get("more_commits") or 0)
    lines = [
        f"{where}: {count} commit{'s' if count != 1 else ''} since `{base[:12]}` "
        f"({workspace['base_source']}).",
    ]
    lines += [f"- {commit}" for commit in commits]
    if workspace.get("more_commits"):
        lines.append(f"- ... and {workspace['more_commits']} more")
    stat = str(workspace.get("diff_stat") or "").rstrip()
    lines += ["", f"```\n{stat}\n```" if stat else "No changes against the base."]
    uncommitted = int(workspace.get("uncommitted") or 0)
    if uncommitted:
        lines.append(f"Not committed: {uncommitted} path{'s' if uncommitted != 1 else ''}.")
    return [*lines, *_merge_lines(workspace), ""]


def _merge_lines(workspace: Mapping[str, Any]) -> list[str]:
    merge = workspace.get("merge")
    lines = []
    if isinstance(merge, Mapping):
        onto = f"`{merge['onto']}`"
        if merge.get("clean") is True:
            lines.append(f"Merges cleanly onto {onto} as it is now (git merge-tree).")
        elif merge.get("clean") is False:
            lines.append(
                f"**Does not merge cleanly onto {onto}** as it is now: conflicts in "
                f"{_files(merge.get('files') or [])}."
            )
        else:
            lines.append(f"Whether it merges onto {onto} could not be checked.")
    others = [c for c in workspace.get("conflicts_with") or [] if isinstance(c, Mapping)]
    if others:
        lines.append(
            "Conflicts with other open tickets' branches: "
            + "; ".join(f"{c['onto']} in {_files(c.get('files') or [])}" for c in others)
            + "."
        )
    return lines


def _files(files: Sequence[str]) -> str:
    return ", ".join(f"`{f}`" for f in files) if files else "files git did not name"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"
