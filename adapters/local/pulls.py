"""`LocalPulls`: the `local` code host: pull requests as Markdown files beside a bare repository,
with shell commands standing in for CI. The whole loop after a hand-off, without an account.

Where things are:
- The branches live in the bare repository `repository.remote`: the daemon pushes there, a head
  commit is what the branch's ref names there, and a merge moves the base branch's ref there.
- Each pull request is `<repository.path>/<number>.md`: YAML front matter the daemon writes
  (`number`, `title`, `branch`, `base`, `draft`, `labels`, `state`, the check results) and a
  person edits (`review: approved | changes_requested`, `review_comment`, `reviewer`, `threads`,
  `labels`, `state: closed`) or the review page writes for a person (`submit_review`: the same
  keys, and `notes`), and the evidence as its body. The daemon changes only its own keys,
  line by line, and redoes its edit when the file changed under it (`adapters.local.atomic`), so a
  person's edit made while it writes is kept.
- The checks (`repository.checks`) run once per head commit, in a clean clone of that commit in a
  temporary folder with a minimal environment, one after another, in a task this host owns: a
  read while they run says pending; their results are written to the file (`checks:`) and read
  from there, so a restart does not run them again.

Reviews: `review: approved` approves; `changes_requested` asks for changes with
`review_comment` as the review's body; anything else (`none`) means a review is still required
(the local host always requires one). `threads` is a list of `{id, path, line, comments:
[{author, body}], resolved}`; an unresolved thread blocks a merge; `reply_to_thread` appends the
daemon's reply to its comments. A thread without an `id` is known by its position (1, 2, ...).

A merge is made in the bare repository as git would make it (`git merge-tree`, then a squash or
merge commit, or a fast-forward for `rebase`) and lands with a compare-and-swap of the base ref,
so neither a newer head nor a newer base is merged unseen. The commit it will land is written to
the file (`merging:`) first: a crash between the two is finished, not repeated, by the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from symphony.codehost.contract import (
    CHECK_OUTPUT_CHARS,
    CODE_HOST_HEAD_MOVED,
    CODE_HOST_REJECTED,
    CODE_HOST_REQUEST,
    CODE_HOST_RESPONSE,
    Check,
    CheckState,
    CodeHostError,
    LineComment,
    Merged,
    PostedReview,
    PullRequest,
    PullRequestDraft,
    PullState,
    PullStatus,
    Review,
    ReviewComment,
    ReviewDecision,
    ReviewDraft,
    ReviewThread,
    ReviewVerdict,
)
from symphony.config.repository import CheckCommand, MergeMethod, RepositorySettings

from .atomic import OutsideFolder, WriteConflict, create_file, rewrite_file
from .edit import render_scalar, set_fields
from .ticket import (
    Document,
    FrontMatterError,
    decode,
    front_text,
    load_front_matter,
    split_document,
)

_NAME = re.compile(r"^([1-9][0-9]{0,8})\.md$")
_SHA = re.compile(r"^[0-9a-f]{40,64}$")
_MAX_FILE_BYTES = 2_000_000
_IDENTITY = {
    "GIT_AUTHOR_NAME": "symphony",
    "GIT_AUTHOR_EMAIL": "symphony@localhost",
    "GIT_COMMITTER_NAME": "symphony",
    "GIT_COMMITTER_EMAIL": "symphony@localhost",
}
REPLY_AUTHOR = "symphony"
APPROVALS_REQUIRED = 1
"""A person approves every pull request in its file, whatever the base."""

_PERSON_KEYS = """\
review: none         # a reviewer sets approved, or changes_requested with a review_comment
review_comment: ""
threads: []          # review threads: [{path, line, comments: [{author, body}], resolved}]
"""


class LocalPulls:
    def __init__(self, repository: RepositorySettings) -> None:
        self.folder = Path(repository.slug)
        self.remote = Path(repository.remote)
        self.checks: tuple[CheckCommand, ...] = repository.checks
        self._env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.folder),  # no person's git settings apply to the host's own git
        }
        self._runs: dict[tuple[int, str], asyncio.Task[None]] = {}
        """The checks running on each (pull request, head commit)."""

    # The code host contract

    async def default_branch(self) -> str:
        run = await self._git("symbolic-ref", "--quiet", "--short", "HEAD")
        branch = run.out.strip() if run.returncode == 0 else ""
        if not branch:
            raise CodeHostError(CODE_HOST_RESPONSE, f"{self.remote} names no default branch")
        return branch

    async def find_pull_request(self, branch: str) -> PullRequest | None:
        found = [(number, front) for number, front in self._all() if front.get("branch") == branch]
        if not found:
            return None
        number, front = max(found, key=lambda item: item[0])
        return await self._pull(number, front)

    async def open_pull_request(self, draft: PullRequestDraft, base: str) -> PullRequest:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CodeHostError(CODE_HOST_REQUEST, f"cannot make {self.folder}: {exc}") from None
        number = max((n for n, _ in self._all()), default=0) + 1
        for _ in range(100):
            try:
                create_file(self._path(number), _new_file(number, draft, base).encode())
                break
            except FileExistsError:
                number += 1  # another writer took the number
            except OSError as exc:
                raise CodeHostError(
                    CODE_HOST_REQUEST, f"cannot write {self._path(number)}: {exc}"
                ) from None
        else:
            raise CodeHostError(CODE_HOST_REQUEST, f"no free pull request number in {self.folder}")
        return await self._pull(number, self._front(number))

    async def update_pull_request(
        self, number: int, draft: PullRequestDraft, base: str
    ) -> PullRequest:
        self._edit(number, {"title": draft.title, "base": base}, body=draft.body)
        return await self._pull(number, self._front(number))

    async def read_status(self, number: int) -> PullStatus:
        front = await self._settled(number, self._front(number))
        pull = await self._pull(number, front)
        mergeable = None
        if pull.state is PullState.OPEN:
            if pull.head_sha is None:
                raise CodeHostError(
                    CODE_HOST_RESPONSE,
                    f"pull request #{number}'s branch {pull.branch} is not in {self.remote}",
                )
            mergeable = await self._merges_cleanly(pull.base, pull.head_sha)
        review = str(front.get("review") or "none").strip().lower()
        reviewer = front_text(front.get("reviewer")) or "reviewer"
        reviews: tuple[Review, ...] = ()
        decision = ReviewDecision.REVIEW_REQUIRED
        if review in ("approved", "changes_requested"):
            decision = ReviewDecision(review)
            said = front_text(front.get("review_comment")) or ""
            # Whoever can write the pull request's file on this machine is one of its people.
            reviews = (Review(reviewer, review, said, author_member=True),)
        return PullStatus(
            pull=pull,
            mergeable=mergeable,
            review_decision=decision,
            checks=self._checks(number, pull.head_sha, front) if pull.head_sha else (),
            threads=_threads(front.get("threads")),
            reviews=reviews,
            labels=_labels(front.get("labels")),
            approvals_required=APPROVALS_REQUIRED,
        )

    async def merge(self, number: int, head_sha: str, method: MergeMethod) -> Merged:
        front = await self._settled(number, self._front(number))
        pull = await self._pull(number, front)
        if pull.state is PullState.MERGED:
            return Merged(front_text(front.get("merged_sha")))
        if pull.state is not PullState.OPEN:
            raise CodeHostError(CODE_HOST_REJECTED, f"pull request #{number} is {pull.state}")
        if pull.head_sha != head_sha:
            raise CodeHostError(
                CODE_HOST_HEAD_MOVED,
                f"{pull.branch} is at {(pull.head_sha or 'nothing')[:12]}, not {head_sha[:12]}",
            )
        base_sha = await self._rev(pull.base)
        if base_sha is None:
            raise CodeHostError(CODE_HOST_REJECTED, f"the base branch {pull.base} does not exist")
        landed = await self._merge_commit(pull, base_sha, head_sha, method)
        self._edit(number, {"merging": landed})
        moved = await self._git("update-ref", f"refs/heads/{pull.base}", landed, base_sha)
        if moved.returncode != 0:
            self._edit(number, {"merging": None})
            raise CodeHostError(
                CODE_HOST_HEAD_MOVED, f"{pull.base} moved while #{number} was being merged"
            )
        self._edit(number, {"state": PullState.MERGED.value, "merged_sha": landed, "merging": None})
        return Merged(landed)

    async def reply_to_thread(self, number: int, thread_id: str, body: str) -> None:
        def edit(raw: bytes) -> tuple[bytes, None]:
            document, front = _parsed(raw, self._path(number))
            threads = front.get("threads")
            if not isinstance(threads, list):
                raise CodeHostError(CODE_HOST_RESPONSE, f"#{number} has no review threads")
            for index, thread in enumerate(threads):
                if isinstance(thread, dict) and _thread_id(thread, index) == thread_id:
                    comments = thread.get("comments")
                    said = comments if isinstance(comments, list) else []
                    thread["comments"] = [*said, {"author": REPLY_AUTHOR, "body": body}]
                    original = load_front_matter(document.front)
                    return set_fields(document, original, {"threads": threads}).encode(), None
            raise CodeHostError(CODE_HOST_RESPONSE, f"#{number} has no thread {thread_id}")

        self._rewrite(number, edit)

    async def submit_review(self, number: int, review: ReviewDraft) -> PostedReview:
        """Into the file: a change request sets `review`, `review_comment` and `reviewer`; a
        comment review is appended to `notes`; each line comment becomes a thread of its own
        (`id` r<n>, `path`, `line`, `side`, `start_line`), its first comment the person's."""
        made: list[str] = []

        def edit(raw: bytes) -> tuple[bytes, None]:
            document, front = _parsed(raw, self._path(number))
            threads = front.get("threads")
            threads = list(threads) if isinstance(threads, list) else []
            made.clear()
            for comment in review.comments:
                made.append(f"r{len(threads) + 1}")
                threads.append(_line_thread(made[-1], comment, review.by or REPLY_AUTHOR))
            updates: dict[str, Any] = {"threads": threads}
            if review.verdict is ReviewVerdict.REQUEST_CHANGES:
                asked = ReviewDecision.CHANGES_REQUESTED.value
                updates |= {"review": asked, "review_comment": review.body}
                updates["reviewer"] = review.by or None
            elif review.body.strip():
                notes = front.get("notes")
                said = {"author": review.by or REPLY_AUTHOR, "body": review.body}
                updates["notes"] = [*(notes if isinstance(notes, list) else []), said]
            original = load_front_matter(document.front)
            return set_fields(document, original, updates).encode(), None

        self._rewrite(number, edit)
        return PostedReview(tuple(made))

    async def approvals_required(self, base: str) -> int | None:
        return APPROVALS_REQUIRED

    async def aclose(self) -> None:
        running = [task for task in self._runs.values() if not task.done()]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(BaseException):
                await task
        self._runs.clear()

    async def checks_settled(self) -> None:
        """Wait for every check run started so far to end (`aclose` cancels them instead)."""
        for task in list(self._runs.values()):
            with contextlib.suppress(Exception):
                await task

    # The pull request files

    def _path(self, number: int) -> Path:
        return self.folder / f"{number}.md"

    def _all(self) -> list[tuple[int, dict[str, Any]]]:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CodeHostError(CODE_HOST_REQUEST, f"cannot list {self.folder}: {exc}") from None
        found = []
        for name in names:
            matched = _NAME.match(name)
            if matched is None:
                continue
            number = int(matched.group(1))
            with contextlib.suppress(CodeHostError):  # a broken file is said when it is read
                found.append((number, self._front(number)))
        return found

    def _front(self, number: int) -> dict[str, Any]:
        path = self._path(number)
        try:
            with path.open("rb") as stream:
                raw = stream.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            raise _no_file(number, path) from None
        except OSError as exc:
            raise CodeHostError(CODE_HOST_REQUEST, f"cannot read {path}: {exc}") from None
        if len(raw) > _MAX_FILE_BYTES:
            raise CodeHostError(CODE_HOST_RESPONSE, f"{path} is over {_MAX_FILE_BYTES} bytes")
        return _parsed(raw, path)[1]

    def _edit(self, number: int, updates: Mapping[str, Any], *, body: str | None = None) -> None:
        def edit(raw: bytes) -> tuple[bytes, None]:
            document, front = _parsed(raw, self._path(number))
            if body is not None:
                document = dataclasses.replace(document, body=_body(body, document.newline))
            return set_fields(document, front, updates).encode(), None

        self._rewrite(number, edit)

    def _rewrite(self, number: int, edit: Callable[[bytes], tuple[bytes, None]]) -> None:
        path = self._path(number)
        try:
            rewrite_file(path, edit, within=self.folder)
        except FileNotFoundError:
            raise _no_file(number, path) from None
        except (WriteConflict, OutsideFolder, OSError) as exc:
            raise CodeHostError(CODE_HOST_REQUEST, f"cannot write {path}: {exc}") from None

    async def _pull(self, number: int, front: Mapping[str, Any]) -> PullRequest:
        branch, base = front_text(front.get("branch")), front_text(front.get("base"))
        if branch is None or base is None:
            raise CodeHostError(CODE_HOST_RESPONSE, f"{self._path(number)} names no branch or base")
        return PullRequest(
            number=number,
            url=self._path(number).as_uri(),
            branch=branch,
            base=base,
            state=self._state(number, front),
            title=front_text(front.get("title")) or "",
            draft=front.get("draft") is True,
            head_sha=await self._rev(branch),
        )

    def _state(self, number: int, front: Mapping[str, Any]) -> PullState:
        said = str(front.get("state") or "open").strip().lower()
        try:
            return PullState(said)
        except ValueError:
            raise CodeHostError(
                CODE_HOST_RESPONSE,
                f"{self._path(number)}: state must be open, merged or closed, not {said!r}",
            ) from None

    async def _settled(self, number: int, front: dict[str, Any]) -> dict[str, Any]:
        """Finish a merge a crash interrupted: the commit it was landing is on the base (the
        pull request is merged), or it is not (the merge never happened)."""
        landing = front_text(front.get("merging"))
        if landing is None or self._state(number, front) is not PullState.OPEN:
            return front
        base = front_text(front.get("base")) or ""
        landed = await self._git("merge-base", "--is-ancestor", landing, f"refs/heads/{base}")
        if landed.returncode == 0:
            updates = {"state": PullState.MERGED.value, "merged_sha": landing, "merging": None}
        else:
            updates = {"merging": None}
        self._edit(number, updates)
        return {**front, **updates}

    # git in the bare repository

    async def _git(self, *args: str) -> _Run:
        return await _run(
            ["git", "--git-dir", str(self.remote), *args], env={**self._env, **_IDENTITY}
        )

    async def _rev(self, branch: str) -> str | None:
        run = await self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        sha = run.out.strip()
        return sha if run.returncode == 0 and _SHA.match(sha) else None

    async def _merges_cleanly(self, base: str, head: str) -> bool | None:
        base_sha = await self._rev(base)
        if base_sha is None:
            return None
        run = await self._git("merge-tree", "--write-tree", "--no-messages", base_sha, head)
        if run.returncode == 0:
            return True
        return False if run.returncode == 1 else None

    async def _merge_commit(
        self, pull: PullRequest, base_sha: str, head_sha: str, method: MergeMethod
    ) -> str:
        """The commit the base moves to; nothing is changed yet."""
        if method is MergeMethod.REBASE:
            behind = await self._git("merge-base", "--is-ancestor", base_sha, head_sha)
            if behind.returncode != 0:
                raise CodeHostError(
                    CODE_HOST_REJECTED,
                    f"{pull.branch} is not up to date with {pull.base}: the local code host "
                    "rebases only by fast-forward (use method squash or merge)",
                )
            return head_sha
        tree = await self._git("merge-tree", "--write-tree", "--no-messages", base_sha, head_sha)
        tree_id = tree.out.strip().splitlines()[0] if tree.out.strip() else ""
        if tree.returncode == 1:
            raise CodeHostError(CODE_HOST_REJECTED, f"{pull.branch} conflicts with {pull.base}")
        if tree.returncode != 0 or not _SHA.match(tree_id):
            raise CodeHostError(CODE_HOST_RESPONSE, f"git merge-tree failed: {tree.err.strip()}")
        if method is MergeMethod.SQUASH:
            parents = ["-p", base_sha]
            message = f"{pull.title} (#{pull.number})"
        else:
            parents = ["-p", base_sha, "-p", head_sha]
            message = f"Merge pull request #{pull.number} from {pull.branch}\n\n{pull.title}"
        made = await self._git("commit-tree", tree_id, *parents, "-m", message)
        sha = made.out.strip()
        if made.returncode != 0 or not _SHA.match(sha):
            raise CodeHostError(CODE_HOST_RESPONSE, f"git commit-tree failed: {made.err.strip()}")
        return sha

    # The stand-in CI

    def _checks(self, number: int, head: str, front: Mapping[str, Any]) -> tuple[Check, ...]:
        if not self.checks:
            return ()
        recorded = front.get("checks")
        if isinstance(recorded, Mapping) and recorded.get("head") == head:
            results = recorded.get("results")
            by_name = {
                item.get("name"): item
                for item in (results if isinstance(results, list) else [])
                if isinstance(item, Mapping)
            }
            if all(command.name in by_name for command in self.checks):
                return tuple(_check(command, by_name[command.name]) for command in self.checks)
        running = self._runs.get((number, head))
        if running is None or running.done():
            self._runs = {key: task for key, task in self._runs.items() if not task.done()}
            self._runs[(number, head)] = asyncio.get_running_loop().create_task(
                self._run_checks(number, head), name=f"local checks #{number}"
            )
        return tuple(
            Check(command.name, CheckState.PENDING, required=command.required)
            for command in self.checks
        )

    async def _run_checks(self, number: int, head: str) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="symphony-checks-"))
        try:
            results = await self._check_head(head, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(CodeHostError):  # a file gone meanwhile: nothing to report to
            self._edit(number, {"checks": {"head": head, "results": results}})

    async def _check_head(self, head: str, scratch: Path) -> list[dict[str, str]]:
        source, home = scratch / "source", scratch / "home"
        home.mkdir()
        cloned = await _run(
            ["git", "clone", "--quiet", "--no-checkout", str(self.remote), str(source)],
            env=self._env, timeout_s=300.0,
        )  # fmt: skip
        if cloned.returncode == 0:
            cloned = await _run(
                ["git", "-C", str(source), "checkout", "--quiet", "--detach", head], env=self._env
            )
        if cloned.returncode != 0:
            said = cloned.err.strip() or "git did not finish"
            return [
                {"name": c.name, "state": "failed", "output": f"could not check out {head}: {said}"}
                for c in self.checks
            ]
        env = {"PATH": self._env["PATH"], "LANG": "C.UTF-8", "HOME": str(home), "CI": "true"}
        results = []
        for command in self.checks:
            passed, output = await _run_check(command, source, env)
            result = {"name": command.name, "state": "passed" if passed else "failed"}
            if not passed:
                result["output"] = output[-CHECK_OUTPUT_CHARS:]
            results.append(result)
        return results


@dataclass(frozen=True, slots=True)
class _Run:
    """How one command (git in the bare repository, or a check) ended, and what it printed."""

    returncode: int | None
    """None: it could not start, or ran past its time and was stopped."""
    out: str
    err: str


async def _run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout_s: float = 60.0,
    merged_output: bool = False,
) -> _Run:
    """Run a command to its end or `timeout_s`, then end its whole process group; never asks
    for input (git does not prompt)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd, env={**env, "GIT_TERMINAL_PROMPT": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merged_output else asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return _Run(None, "", f"could not start: {exc}")
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return _Run(None, "", f"took over {timeout_s:.0f} s and was stopped")
    return _Run(
        proc.returncode, out.decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")
    )


async def _run_check(command: CheckCommand, cwd: Path, env: Mapping[str, str]) -> tuple[bool, str]:
    """Run one check in `cwd`: (passed, what it printed)."""
    run = await _run(
        ["sh", "-c", command.run],
        env=env, cwd=cwd, timeout_s=command.timeout_ms / 1000, merged_output=True,
    )  # fmt: skip
    if run.returncode == 0:
        return True, run.out
    if run.returncode is None:
        return False, run.err
    return False, f"{run.out.rstrip()}\n(exit {run.returncode})".lstrip()


def _check(command: CheckCommand, result: Mapping[str, Any]) -> Check:
    """A recorded result; anything but `passed` fails (a person's edit cannot pass a check)."""
    if result.get("state") == "passed":
        return Check(command.name, CheckState.PASSED, required=command.required)
    output = front_text(result.get("output")) or "(no output)"
    return Check(command.name, CheckState.FAILED, required=command.required, output=output)


def _new_file(number: int, draft: PullRequestDraft, base: str) -> str:
    labels = json.dumps(list(draft.labels), ensure_ascii=False)
    front = (
        f"number: {number}\n"
        f"title: {render_scalar(draft.title)}\n"
        f"branch: {render_scalar(draft.branch)}\n"
        f"base: {render_scalar(base)}\n"
        f"state: open         # open | merged | closed (set closed to close it unmerged)\n"
        f"draft: {json.dumps(draft.draft)}\n"
        f"labels: {labels}\n"
        f"{_PERSON_KEYS}"
    )
    return f"---\n{front}---\n{_body(draft.body, chr(10))}"


def _no_file(number: int, path: Path) -> CodeHostError:
    return CodeHostError(CODE_HOST_RESPONSE, f"pull request #{number} has no file {path}")


def _body(text: str, newline: str) -> str:
    lines = text.strip().splitlines()
    return newline.join(lines) + newline if lines else ""


def _parsed(raw: bytes, path: Path) -> tuple[Document, dict[str, Any]]:
    try:
        document = split_document(decode(raw))
        return document, load_front_matter(document.front)
    except FrontMatterError as exc:
        raise CodeHostError(CODE_HOST_RESPONSE, f"{path}: {exc.reason}") from None


def _threads(raw: object) -> tuple[ReviewThread, ...]:
    if not isinstance(raw, list):
        return ()
    threads = []
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping) or item.get("resolved") is True:
            continue
        comments = item.get("comments")
        said = []
        for comment in comments if isinstance(comments, list) else [comments]:
            if isinstance(comment, Mapping):
                body = front_text(comment.get("body"))
                author = front_text(comment.get("author")) or "reviewer"
            else:
                body, author = front_text(comment), "reviewer"
            if body is not None:
                said.append(ReviewComment(author, body, author_member=True))
        line = item.get("line")
        threads.append(
            ReviewThread(
                id=_thread_id(item, index),
                path=front_text(item.get("path")),
                line=line if isinstance(line, int) and not isinstance(line, bool) else None,
                diff_hunk=None,
                comments=tuple(said),
            )
        )
    return tuple(threads)


def _line_thread(thread_id: str, comment: LineComment, author: str) -> dict[str, Any]:
    thread: dict[str, Any] = {"id": thread_id, "path": comment.path, "line": comment.line,
                              "side": comment.side.value}  # fmt: skip
    if comment.start_line is not None and comment.start_line < comment.line:
        thread["start_line"] = comment.start_line
    return thread | {"comments": [{"author": author, "body": comment.body}], "resolved": False}


def _thread_id(thread: Mapping[str, Any], index: int) -> str:
    return front_text(thread.get("id")) or str(index + 1)


def _labels(raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return ()
    return tuple(label for label in (front_text(item) for item in raw) if label is not None)
