"""The evidence a hand-off carries: what the daemon itself saw, not what the agent claims.

When a stage with `evidence` succeeds, the daemon posts one comment on the ticket (edited in
place on later hand-offs) and writes the same bundle as JSON into the workspace
(`.symphony/evidence.json`). It holds each gate of the last verification round with command,
exit code and duration, the workspace's git facts (branch, commits and diff stat against the
base, uncommitted changes), the pull request the agent names, turns, tokens and agent time, the
agent's summary and open questions, and how many fix turns and hand-offs it took.

`workspace_facts` reads git in the workspace (I/O, in the worker); `build_evidence` and
`render_evidence` are pure, so the scheduling core assembles the bundle with its own records.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from symphony.core.costs import usd
from symphony.core.verification import Verification
from symphony.workspace.git import git_output, is_own_work_tree, run_git

if TYPE_CHECKING:
    from symphony.config.stages import Report

EVIDENCE_DIR = ".symphony"
EVIDENCE_FILE = "evidence.json"
MAX_COMMITS = 20
MAX_DIFF_STAT_CHARS = 4_000
MAX_CONFLICT_FILES = 20
MAX_OTHER_BRANCHES = 20
"""Other open tickets' branches checked for conflicts at one hand-off, at most."""


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
) -> dict[str, Any]:
    """The evidence of one hand-off, JSON-safe."""
    gates = None
    if verification is not None and verification.rounds:
        gates = {
            "passed": verification.passed,
            "rounds": len(verification.rounds),
            "fix_turns": verification.fix_turns,
            "results": [
                {k: v for k, v in result.to_json().items() if k != "output"}
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
        lines += [
            "",
            "All gates passed"
            + (f" after {fixes} fix turn{'s' if fixes != 1 else ''}." if fixes else " at once."),
            "",
        ]
    workspace = evidence.get("workspace")
    if workspace:
        lines += _workspace_lines(workspace)
    if evidence.get("pull_request"):
        lines += [f"Pull request (as the agent reports it): {evidence['pull_request']}", ""]
    tokens = evidence["tokens"]
    ran = evidence.get("agent")
    if ran:
        ran = f"{ran} ({evidence['model']})" if evidence.get("model") else ran
    lines += [
        (f"Agent: {ran}. " if ran else "")
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


# The workspace's git facts (I/O)


async def workspace_facts(
    path: Path, *, base_ref: str | None, start_commit: str | None, env: Mapping[str, str]
) -> WorkspaceFacts | None:
    """What git says about the workspace, or None when it is not a git work tree."""
    if not await is_own_work_tree(path, env):
        return None
    head = (await git_output(path, env, "rev-parse", "--verify", "--quiet", "HEAD") or "").strip()
    branch = (await git_output(path, env, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    status = await git_output(path, env, "status", "--porcelain", "--untracked-files=all") or ""
    uncommitted = sum(1 for line in status.splitlines() if line.strip())
    if base_ref is not None:
        resolved = await git_output(
            path, env, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}"
        )
        base = base_ref if resolved else None
        source = "workspace.base_ref" if resolved else f"workspace.base_ref {base_ref!r} not found"
    else:
        base = start_commit
        source = "where the workspace started" if start_commit else "start commit not recorded"
    facts = WorkspaceFacts(
        branch if branch and branch != "HEAD" else None,
        head or None,
        base,
        source,
        uncommitted=uncommitted,
    )
    if base is None or not head:
        return facts
    log = await git_output(
        path, env, "log", f"--max-count={MAX_COMMITS + 1}", "--format=%h %s", f"{base}..HEAD"
    )
    commits = [line for line in (log or "").splitlines() if line.strip()]
    total = await git_output(path, env, "rev-list", "--count", f"{base}..HEAD")
    count = int(total.strip()) if total and total.strip().isdigit() else len(commits)
    stat = await git_output(path, env, "diff", "--stat", f"{base}...HEAD") or ""
    if len(stat) > MAX_DIFF_STAT_CHARS:
        stat = stat[:MAX_DIFF_STAT_CHARS] + "\n... (diff stat cut)"
    return WorkspaceFacts(
        facts.branch,
        facts.head,
        base,
        source,
        tuple(commits[:MAX_COMMITS]),
        max(count - min(len(commits), MAX_COMMITS), 0),
        stat,
        uncommitted,
    )


async def merge_check(path: Path, onto: str, commit: str, env: Mapping[str, str]) -> MergeCheck:
    """Merge HEAD with `commit` in memory (`git merge-tree --write-tree`): nothing in the
    workspace or its repository changes. `onto` names the other side for people."""
    run = await run_git(
        "-C", str(path), "merge-tree", "--write-tree", "--name-only", "--no-messages",
        "HEAD", commit,
        env={**env, "GIT_OPTIONAL_LOCKS": "0"},
    )  # fmt: skip
    if run.returncode == 0:
        return MergeCheck(onto, True)
    lines = run.out.splitlines()
    # A conflict exits 1 after the tree's id; so does a commit git cannot find, without one.
    if run.returncode == 1 and lines and re.fullmatch(r"[0-9a-f]{40,64}", lines[0].strip()):
        files = [line.strip() for line in lines[1:] if line.strip()]
        return MergeCheck(onto, False, tuple(dict.fromkeys(files))[:MAX_CONFLICT_FILES])
    return MergeCheck(onto, None)


async def merge_checks(
    path: Path,
    *,
    base: tuple[str, str] | None,
    others: Sequence[tuple[str, Path]],
    env: Mapping[str, str],
) -> tuple[MergeCheck | None, tuple[MergeCheck, ...]]:
    """Whether HEAD merges onto `base` ((name, ref)), and which `others` ((identifier,
    workspace)) conflict with it. Another ticket's branch is seen only when both workspaces
    share one repository (`workspace.strategy: worktree`); the others are skipped."""
    onto = await merge_check(path, base[0], base[1], env) if base is not None else None
    conflicts = []
    for identifier, workspace in others[:MAX_OTHER_BRANCHES]:
        head = await git_output(workspace, env, "rev-parse", "--verify", "--quiet", "HEAD")
        if not head:
            continue
        check = await merge_check(path, identifier, head.strip(), env)
        if check.clean is False:
            conflicts.append(check)
    return onto, tuple(conflicts)


def write_evidence_file(workspace: Path, evidence: Mapping[str, Any]) -> Path | None:
    """Write the bundle to `<workspace>/.symphony/evidence.json`; None when the workspace is
    gone. The folder ignores itself in git, so an agent's `git add -A` never commits it."""
    folder = workspace / EVIDENCE_DIR
    if not workspace.is_dir():
        return None
    folder.mkdir(exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    target = folder / EVIDENCE_FILE
    temp = folder / f".{EVIDENCE_FILE}.tmp"
    temp.write_text(json.dumps(evidence, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temp.replace(target)
    return target


def read_evidence_file(workspace: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((workspace / EVIDENCE_DIR / EVIDENCE_FILE).read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    return None
