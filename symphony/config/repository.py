"""Where a ticket's code goes after its stage succeeds: the code host (`repository:`), what a
stage publishes there (`stages.<name>.publish`), how the daemon follows a published pull request
(`follow:`) and when it merges one (`merge:`).

The model and its parser, one block each, validated with the setting named. The repository's
token is the daemon's own credential: it is resolved here, kept out of `repr`, and its variable
is named so no agent, hook or gate environment ever carries it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from symphony.config.fields import (
    INVALID_CONFIG,
    ConfigError,
    env_reference,
    integer,
    optional_text,
    resolve_path,
    resolve_secret,
)

REPOSITORY_KEYS = ("kind", "slug", "api_url", "token", "remote", "path", "checks")
CHECK_KEYS = ("name", "run", "timeout_ms", "required")
PUBLISH_KEYS = ("draft", "title", "base", "labels")
FOLLOW_KEYS = (
    "interval_ms",
    "checks",
    "on_checks_failed",
    "max_check_fixes",
    "max_conflict_fixes",
    "max_reworks",
    "on_changes_requested",
    "on_conflict",
    "on_merged",
    "on_closed",
    "pending_timeout_ms",
)
MERGE_KEYS = ("policy", "method", "require_label")

DEFAULT_TITLE = "{{ issue.identifier }}: {{ issue.title }}"
FIX = "fix"
"""`follow.on_checks_failed` / `on_conflict`: a fix run in the ticket's workspace."""
DEFAULT_MAX_CHECK_FIXES = 3
DEFAULT_MAX_CONFLICT_FIXES = 2
DEFAULT_MAX_REWORKS = 5
DEFAULT_PENDING_TIMEOUT_MS = 3_600_000
DEFAULT_CHECK_TIMEOUT_MS = 600_000

E = TypeVar("E", bound=enum.StrEnum)


class CodeHostKind(enum.StrEnum):
    GITHUB = "github"
    GITLAB = "gitlab"
    LOCAL = "local"
    """A folder of pull request files beside a bare repository, with commands as its checks:
    the whole loop without an account."""


_DEFAULT_API = {
    CodeHostKind.GITHUB: "https://api.github.com",
    CodeHostKind.GITLAB: "https://gitlab.com/api/v4",
}
_DEFAULT_TOKEN = {CodeHostKind.GITHUB: "$GITHUB_TOKEN", CodeHostKind.GITLAB: "$GITLAB_TOKEN"}


@dataclass(frozen=True, slots=True)
class CheckCommand:
    """One check of the `local` code host: a shell command run in a clean clone of a pull
    request's head commit; exit 0 passes."""

    name: str
    run: str
    timeout_ms: int = DEFAULT_CHECK_TIMEOUT_MS
    required: bool = True


@dataclass(frozen=True, slots=True)
class RepositorySettings:
    """`repository:`: the code host the daemon pushes branches and opens pull requests on, and the
    daemon's own token for it."""

    kind: CodeHostKind
    slug: str
    """GitHub: `owner/name`; GitLab: the project path (`group/sub/project`) or numeric id;
    local: the folder of pull request files (absolute)."""
    api_url: str
    token: str = field(repr=False)
    token_env: str | None
    """The variable the token came from (removed from every child's environment), or None when
    WORKFLOW.md holds it literally or the host needs none (local)."""
    remote: str = "origin"
    """The worktree's remote the daemon pushes to, or a URL; local: the bare repository's path
    (absolute)."""
    closes_tickets: bool = False
    """The tracker is this same repository or project: a pull request body says `Closes <the
    ticket>`, and the host closes the ticket when it merges."""
    checks: tuple[CheckCommand, ...] = ()
    """local only: the commands standing in for CI."""


@dataclass(frozen=True, slots=True)
class PublishSettings:
    """What a stage publishes when it succeeds: its branch, pushed, and a pull request."""

    draft: bool = False
    title: str = DEFAULT_TITLE
    """A strict Liquid template over `issue`, checked when the workflow is loaded."""
    base: str | None = None
    """The pull request's base branch; None: the repository's default branch."""
    labels: tuple[str, ...] = ()


class ChecksScope(enum.StrEnum):
    REQUIRED = "required"
    ALL = "all"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class FollowSettings:
    """What the daemon does with a published ticket's open pull request."""

    interval_ms: int | None = None
    """How often open pull requests are read; None: at every poll (`polling.interval_ms`)."""
    checks: ChecksScope = ChecksScope.REQUIRED
    on_checks_failed: str = FIX
    """`fix`, or the state a ticket whose checks failed moves to."""
    max_check_fixes: int = DEFAULT_MAX_CHECK_FIXES
    """Fix runs for failed checks, counted until the checks are green again."""
    max_conflict_fixes: int = DEFAULT_MAX_CONFLICT_FIXES
    """Fix runs for a conflict with the base, counted until the branch merges again."""
    max_reworks: int = DEFAULT_MAX_REWORKS
    """Runs that address a review's requested changes (a reviewer bot that never approves
    cannot keep a ticket running)."""
    on_changes_requested: str | None = None
    on_conflict: str = FIX
    on_merged: str | None = None
    on_closed: str | None = None
    """Where a ticket goes when a person closes its pull request unmerged; None: the
    workflow's `escalation_state`. Its publishing ends there: no new pull request."""
    pending_timeout_ms: int = DEFAULT_PENDING_TIMEOUT_MS
    """A check still pending this long after the head commit was first read is a comment."""

    def states(self) -> tuple[str, ...]:
        """The tracker states these settings move tickets to."""
        named = (
            self.on_checks_failed,
            self.on_changes_requested,
            self.on_conflict,
            self.on_merged,
            self.on_closed,
        )
        return tuple(dict.fromkeys(s for s in named if s is not None and s != FIX))


class MergePolicy(enum.StrEnum):
    NONE = "none"
    WHEN_GREEN_AND_APPROVED = "when_green_and_approved"


class MergeMethod(enum.StrEnum):
    SQUASH = "squash"
    MERGE = "merge"
    REBASE = "rebase"


@dataclass(frozen=True, slots=True)
class MergeSettings:
    """`merge:`: whether the daemon merges a followed pull request itself, and how."""

    policy: MergePolicy = MergePolicy.NONE
    method: MergeMethod = MergeMethod.SQUASH
    require_label: str | None = None
    """Only tickets or pull requests carrying this label are merged."""


def parse_repository(
    raw: object, environ: Mapping[str, str], base_dir: Path
) -> RepositorySettings | None:
    """The `repository:` block, or None when the workflow has none. Paths (local) are read as
    every path setting is (`$VAR` and `~` expanded, relative to `base_dir`, the WORKFLOW.md
    folder)."""
    if raw is None:
        return None
    body = _map(raw, "repository")
    kind = _enum(body, "repository.kind", CodeHostKind, None)
    if kind is CodeHostKind.LOCAL:
        return _local_repository(body, base_dir, environ)
    if body.get("checks") is not None:
        raise ConfigError(
            INVALID_CONFIG,
            f"repository.checks is for kind local only; {kind} runs its own checks (CI)",
        )
    slug = optional_text(body, "repository.slug")
    if slug is None:
        example = "acme/widgets" if kind is CodeHostKind.GITHUB else "group/project"
        raise ConfigError(INVALID_CONFIG, f"repository.slug is required (for example {example})")
    if kind is CodeHostKind.GITHUB and slug.count("/") != 1:
        raise ConfigError(INVALID_CONFIG, f"repository.slug must be owner/name, got {slug!r}")
    api_url = (optional_text(body, "repository.api_url") or _DEFAULT_API[kind]).rstrip("/")
    if not api_url.startswith(("https://", "http://")):
        raise ConfigError(INVALID_CONFIG, f"repository.api_url must be an http(s) URL: {api_url}")
    token_raw = body.get("token", _DEFAULT_TOKEN[kind])
    token = resolve_secret(token_raw, environ)
    token_env = env_reference(token_raw)
    if token is None:
        where = f"${token_env}" if token_env else "repository.token"
        raise ConfigError(
            INVALID_CONFIG,
            f"repository.token is not set ({where}): the daemon pushes and opens pull requests "
            "with it",
        )
    return RepositorySettings(
        kind=kind,
        slug=slug,
        api_url=api_url,
        token=token,
        token_env=token_env,
        remote=optional_text(body, "repository.remote") or "origin",
    )


def _local_repository(
    body: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> RepositorySettings:
    """`kind: local`: `path` (the pull request files' folder, made when missing), `remote` (a
    bare repository that exists), `checks` (commands run on each head commit)."""
    for key in ("slug", "api_url", "token"):
        if body.get(key) is not None:
            raise ConfigError(INVALID_CONFIG, f"repository.{key} is not used by kind local")
    path = optional_text(body, "repository.path")
    if path is None:
        raise ConfigError(
            INVALID_CONFIG,
            "repository.path is required for kind local: the folder its pull request files "
            "are kept in (for example .symphony/pulls)",
        )
    remote = optional_text(body, "repository.remote")
    if remote is None:
        raise ConfigError(
            INVALID_CONFIG,
            "repository.remote is required for kind local: the bare repository branches are "
            "pushed to and merged in",
        )
    remote_path = resolve_path(remote, base_dir, environ, "repository.remote")
    if not ((remote_path / "HEAD").is_file() and (remote_path / "objects").is_dir()):
        raise ConfigError(
            INVALID_CONFIG,
            f"repository.remote {remote_path} is not a bare git repository (make one with "
            f"`git clone --bare <your repository> {remote_path}`)",
        )
    raw_checks = body.get("checks", [])
    if not isinstance(raw_checks, list):
        raise ConfigError(INVALID_CONFIG, "repository.checks must be a list of {name, run}")
    checks = tuple(_check_command(item, i) for i, item in enumerate(raw_checks))
    names = [check.name for check in checks]
    if len(set(names)) != len(names):
        raise ConfigError(INVALID_CONFIG, "repository.checks names must be unique")
    return RepositorySettings(
        kind=CodeHostKind.LOCAL,
        slug=str(resolve_path(path, base_dir, environ, "repository.path")),
        api_url="",
        token="",
        token_env=None,
        remote=str(remote_path),
        checks=checks,
    )


def _check_command(raw: object, index: int) -> CheckCommand:
    where = f"repository.checks[{index}]"
    body = _map(raw, where)
    unknown = sorted(set(body) - set(CHECK_KEYS))
    if unknown:
        raise ConfigError(INVALID_CONFIG, f"{where} has unknown keys: {', '.join(unknown)}")
    name, run = optional_text(body, f"{where}.name"), optional_text(body, f"{where}.run")
    if name is None or run is None:
        raise ConfigError(INVALID_CONFIG, f"{where} needs a name and a run command")
    required = body.get("required", True)
    if not isinstance(required, bool):
        raise ConfigError(INVALID_CONFIG, f"{where}.required must be true or false")
    return CheckCommand(
        name=name,
        run=run,
        timeout_ms=integer(body, f"{where}.timeout_ms", DEFAULT_CHECK_TIMEOUT_MS, 1000),
        required=required,
    )


def parse_publish(raw: object, where: str) -> PublishSettings | None:
    """A stage's `publish:` block (`where` names it); `publish: true` takes every default."""
    if raw is None or raw is False:
        return None
    if raw is True:
        return PublishSettings()
    body = _map(raw, where)
    draft = body.get("draft", False)
    if not isinstance(draft, bool):
        raise ConfigError(INVALID_CONFIG, f"{where}.draft must be true or false")
    labels = body.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) and x.strip() for x in labels):
        raise ConfigError(INVALID_CONFIG, f"{where}.labels must be a list of label names")
    return PublishSettings(
        draft=draft,
        title=optional_text(body, f"{where}.title") or DEFAULT_TITLE,
        base=optional_text(body, f"{where}.base"),
        labels=tuple(label.strip() for label in labels),
    )


def parse_follow(raw: object) -> FollowSettings:
    body = _map(raw, "follow") if raw is not None else {}
    return FollowSettings(
        interval_ms=(
            integer(body, "follow.interval_ms", 0, 1)
            if body.get("interval_ms") is not None
            else None
        ),
        checks=_enum(body, "follow.checks", ChecksScope, ChecksScope.REQUIRED),
        on_checks_failed=optional_text(body, "follow.on_checks_failed") or FIX,
        max_check_fixes=integer(body, "follow.max_check_fixes", DEFAULT_MAX_CHECK_FIXES, 0),
        max_conflict_fixes=integer(
            body, "follow.max_conflict_fixes", DEFAULT_MAX_CONFLICT_FIXES, 0
        ),
        max_reworks=integer(body, "follow.max_reworks", DEFAULT_MAX_REWORKS, 0),
        on_changes_requested=optional_text(body, "follow.on_changes_requested"),
        on_conflict=optional_text(body, "follow.on_conflict") or FIX,
        on_merged=optional_text(body, "follow.on_merged"),
        on_closed=optional_text(body, "follow.on_closed"),
        pending_timeout_ms=integer(
            body, "follow.pending_timeout_ms", DEFAULT_PENDING_TIMEOUT_MS, 1000
        ),
    )


def parse_merge(raw: object) -> MergeSettings:
    body = _map(raw, "merge") if raw is not None else {}
    return MergeSettings(
        policy=_enum(body, "merge.policy", MergePolicy, MergePolicy.NONE),
        method=_enum(body, "merge.method", MergeMethod, MergeMethod.SQUASH),
        require_label=optional_text(body, "merge.require_label"),
    )


def check_delivery(
    repository: RepositorySettings | None,
    publishing: Sequence[str],
    raw: Mapping[str, Any],
    warnings: list[str],
) -> None:
    """Cross-checks between the blocks: publishing needs a repository; following and merging
    without a stage that publishes do nothing (said, not refused)."""
    if publishing and repository is None:
        stages = ", ".join(publishing)
        raise ConfigError(
            INVALID_CONFIG,
            f"stage {stages} publishes, but the workflow has no `repository:` to publish to",
        )
    if not publishing:
        for block in ("follow", "merge"):
            if raw.get(block) is not None:
                warnings.append(f"{block}: has no effect: no stage publishes a pull request")


def _map(raw: object, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(INVALID_CONFIG, f"{where} must be a map")
    return raw


def _enum(body: Mapping[str, Any], dotted: str, kind: type[E], default: E | None) -> E:
    value = body.get(dotted.rsplit(".", 1)[1])
    choices = " | ".join(member.value for member in kind)
    if value is None:
        if default is None:
            raise ConfigError(INVALID_CONFIG, f"{dotted} is required ({choices})")
        return default
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be one of {choices}, got {value!r}"
        ) from None
