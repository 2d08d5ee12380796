"""Where a ticket's code goes after its stage: `repository:`, a stage's `publish:`, `follow:`
and `merge:` as WORKFLOW.md declares them, and the daemon's token kept to the daemon."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from symphony.cli.check import report
from symphony.codehost.contract import CODE_HOST_REQUEST, CodeHostError
from symphony.config.fields import ConfigError
from symphony.config.load import load_settings
from symphony.config.prompt import (
    PromptError,
    StageContext,
    check_prompts,
    render_prompt,
    render_title,
)
from symphony.config.repository import (
    FIX,
    ChecksScope,
    CodeHostKind,
    MergeMethod,
    MergePolicy,
)
from symphony.workspace.environment import child_environment, remote_environment
from tests.factories import make_issue
from tests.fakes.code_host import MemoryCodeHost
from tests.fakes.tracker import MemoryTracker

TOKEN = "ghp_daemon_only_0123456789"

HEAD = """---
tracker:
  kind: local
  provider: {path: board}
agent:
  env: {LEAKED: $GITHUB_TOKEN, KEPT: plain}
  env_passthrough: [GITHUB_TOKEN, HOME]
"""

PUBLISHING = """stages:
  implement:
    states: [Ready, Rework]
    on_success: Human Review
    publish:
      title: "{{ issue.identifier }}: {{ issue.title | upcase }}"
      base: main
      labels: [agent]
"""


def workflow(tmp_path: Path, *blocks: str, stages: str = PUBLISHING) -> Path:
    (tmp_path / "board").mkdir(exist_ok=True)
    path = tmp_path / "WORKFLOW.md"
    path.write_text(HEAD + "".join(blocks) + stages + "---\nWork on {{ issue.identifier }}.\n")
    return path


REPOSITORY = """repository:
  kind: github
  slug: acme/widgets
"""


def test_a_github_repository_takes_its_documented_defaults(tmp_path: Path) -> None:
    settings = load_settings(workflow(tmp_path, REPOSITORY), {"GITHUB_TOKEN": TOKEN})
    repository = settings.repository
    assert repository is not None
    assert (repository.kind, repository.slug, repository.remote) == (
        CodeHostKind.GITHUB,
        "acme/widgets",
        "origin",
    )
    assert repository.api_url == "https://api.github.com"
    assert repository.token == TOKEN and repository.token_env == "GITHUB_TOKEN"
    assert TOKEN not in repr(repository)
    assert settings.follow.checks is ChecksScope.REQUIRED
    assert settings.follow.on_checks_failed == FIX and settings.follow.max_check_fixes == 3
    assert settings.merge.policy is MergePolicy.NONE and settings.merge.method is MergeMethod.SQUASH
    assert settings.machine is not None
    publish = settings.machine.stages[0].publish
    assert publish is not None and publish.base == "main" and publish.labels == ("agent",)
    assert not publish.draft


def test_follow_and_merge_blocks_are_read_and_their_states_mapped_by_the_tracker(
    tmp_path: Path,
) -> None:
    follow = """follow:
  interval_ms: 60000
  checks: all
  on_checks_failed: Rework
  max_check_fixes: 1
  on_changes_requested: Rework
  on_conflict: fix
  on_merged: Done
  on_closed: Cancelled
merge:
  policy: when_green_and_approved
  method: rebase
  require_label: automerge
"""
    settings = load_settings(workflow(tmp_path, REPOSITORY, follow), {"GITHUB_TOKEN": TOKEN})
    assert settings.follow.interval_ms == 60_000 and settings.follow.checks is ChecksScope.ALL
    assert settings.follow.states() == ("Rework", "Done", "Cancelled")
    assert settings.merge.policy is MergePolicy.WHEN_GREEN_AND_APPROVED
    assert settings.merge.require_label == "automerge"
    # Rework is active and Done/Cancelled terminal: nothing new for the adapter to map.
    assert "Rework" not in settings.tracker.other_states


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ((), "stage implement publishes, but the workflow has no `repository:`"),
        (
            ("repository:\n  slug: acme/widgets\n",),
            "repository.kind is required (github | gitlab | local)",
        ),
        (("repository:\n  kind: bitbucket\n  slug: a/b\n",), "repository.kind must be one of"),
        (("repository:\n  kind: github\n  slug: widgets\n",), "must be owner/name"),
        ((REPOSITORY, "merge:\n  policy: always\n"), "merge.policy must be one of none"),
        ((REPOSITORY, "merge:\n  method: octopus\n"), "merge.method must be one of squash"),
        ((REPOSITORY, "follow:\n  checks: some\n"), "follow.checks must be one of required"),
        ((REPOSITORY, "follow:\n  max_check_fixes: -1\n"), "follow.max_check_fixes must be"),
        ((REPOSITORY + "  checks: []\n",), "repository.checks is for kind local only"),
        (("repository:\n  kind: local\n  remote: r.git\n",), "repository.path is required"),
        (("repository:\n  kind: local\n  path: pulls\n",), "repository.remote is required"),
        (
            ("repository:\n  kind: local\n  path: pulls\n  remote: nowhere.git\n",),
            "is not a bare git repository (make one with `git clone --bare",
        ),
    ],
)
def test_a_broken_block_is_refused_with_the_setting_named(
    tmp_path: Path, blocks: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(workflow(tmp_path, *blocks), {"GITHUB_TOKEN": TOKEN})


def test_a_local_repository_resolves_its_paths_and_reads_its_checks(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "remote.git")], check=True)
    local = """repository:
  kind: local
  path: .symphony/pulls
  remote: remote.git
  checks:
    - {name: no-todo, run: "! git grep TODO"}
    - {name: slow, run: make test, timeout_ms: 5000, required: false}
"""
    settings = load_settings(workflow(tmp_path, local), {"GITHUB_TOKEN": TOKEN})
    repository = settings.repository
    assert repository is not None and repository.kind is CodeHostKind.LOCAL
    assert repository.slug == str(tmp_path / ".symphony" / "pulls")
    assert repository.remote == str(tmp_path / "remote.git")
    assert (repository.token, repository.token_env) == ("", None)
    assert [(c.name, c.timeout_ms, c.required) for c in repository.checks] == [
        ("no-todo", 600_000, True),
        ("slow", 5000, False),
    ]
    # No token: no variable is taken from a child's environment for it (an empty one was).
    env = child_environment({"PATH": "/bin", "HOME": "", "GITHUB_TOKEN": TOKEN}, settings, ())
    assert env["HOME"] == "" and env["GITHUB_TOKEN"] == TOKEN and env["KEPT"] == "plain"

    for broken, said in (
        ("    - {name: a}\n", r"repository.checks\[2\] needs a name and a run command"),
        ("    - {name: no-todo, run: x}\n", "repository.checks names must be unique"),
        ("    - {name: b, run: x, when: push}\n", r"repository.checks\[2\] has unknown keys: when"),
    ):
        with pytest.raises(ConfigError, match=said):
            load_settings(workflow(tmp_path, local + broken), {"GITHUB_TOKEN": TOKEN})


def test_a_repository_without_its_token_says_which_variable_to_set(tmp_path: Path) -> None:
    gitlab = "repository:\n  kind: gitlab\n  slug: group/sub/widgets\n"
    with pytest.raises(ConfigError, match=r"repository.token is not set \(\$GITLAB_TOKEN\)"):
        load_settings(workflow(tmp_path, gitlab), {"GITHUB_TOKEN": "other"})
    environ = {"GITHUB_TOKEN": "other", "GITLAB_TOKEN": TOKEN}
    settings = load_settings(workflow(tmp_path, gitlab), environ)
    assert settings.repository is not None
    assert settings.repository.api_url == "https://gitlab.com/api/v4"


def test_follow_without_a_publishing_stage_is_a_warning_not_an_error(tmp_path: Path) -> None:
    plain = "stages:\n  implement:\n    states: [Ready]\n    on_success: Human Review\n"
    path = workflow(tmp_path, REPOSITORY, "follow:\n  on_merged: Done\n", stages=plain)
    settings = load_settings(path, {"GITHUB_TOKEN": TOKEN})
    assert any(w.startswith("follow: has no effect") for w in settings.warnings)


def test_an_unknown_publish_key_is_reported_with_a_suggestion(tmp_path: Path) -> None:
    stages = PUBLISHING.replace("      base: main\n", "      bsae: main\n")
    path = workflow(tmp_path, REPOSITORY, stages=stages)
    settings = load_settings(path, {"GITHUB_TOKEN": TOKEN})
    assert any("publish.bsae" in w and "`base`" in w for w in settings.warnings)


def test_the_title_template_is_strict_and_renders_on_one_line(tmp_path: Path) -> None:
    settings = load_settings(workflow(tmp_path, REPOSITORY), {"GITHUB_TOKEN": TOKEN})
    check_prompts(settings)
    issue = make_issue("ABC-7", title="Fix\nthe parser")
    assert settings.machine is not None
    publish = settings.machine.stages[0].publish
    assert publish is not None
    assert render_title(publish.title, issue) == "ABC-7: FIX THE PARSER"
    broken = PUBLISHING.replace("issue.title | upcase", "ticket.title")
    settings = load_settings(workflow(tmp_path, REPOSITORY, stages=broken), {"GITHUB_TOKEN": TOKEN})
    with pytest.raises(PromptError, match=r"stages.implement.publish.title.*ticket"):
        check_prompts(settings)


def test_a_stage_prompt_reads_review_as_nil_when_there_is_none() -> None:
    template = "{% if review %}Address: {{ review }}{% else %}No review yet.{% endif %}"
    context = StageContext("implement", None, ())
    assert render_prompt(template, make_issue(), None, context).endswith("\n\nNo review yet.")
    reviewed = StageContext("implement", None, (), review="Rename x to width.")
    said = render_prompt(template, make_issue(), None, reviewed)
    assert said.endswith("\n\nAddress: Rename x to width.")


def test_the_token_reaches_no_child_under_any_name(tmp_path: Path) -> None:
    environ = {"GITHUB_TOKEN": TOKEN, "HOME": "/home/a", "PATH": "/bin"}
    settings = load_settings(workflow(tmp_path, REPOSITORY), environ)
    for env in (
        child_environment(environ, settings, ()),
        child_environment(environ, settings, (), extra_names=("GITHUB_TOKEN",)),
        remote_environment(environ, settings, ()),
    ):
        assert TOKEN not in env.values()
        assert "GITHUB_TOKEN" not in env and "LEAKED" not in env
    assert child_environment(environ, settings, ())["KEPT"] == "plain"


class KnownStates(MemoryTracker):
    """A tracker whose states are fixed (a board's columns)."""

    async def tracker_states(self) -> list[str] | None:
        return ["Ready", "Rework", "Human Review", "Needs Attention", "Done", "Cancelled"]


async def test_check_shows_publish_and_follow_and_refuses_a_state_the_tracker_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    follow = "follow:\n  on_changes_requested: Changes Requested\n  on_merged: Done\n"
    settings = load_settings(workflow(tmp_path, REPOSITORY, follow), {"GITHUB_TOKEN": TOKEN})
    assert await report(settings, KnownStates()) == 1
    out = capsys.readouterr().out
    assert "repository    github acme/widgets (https://api.github.com), pushed to origin" in out
    assert "publish: push to origin, then a pull request on github acme/widgets onto main" in out
    assert "follow: checks (required) red: fix (at most 3); changes requested: Changes" in out
    assert "conflict: fix (at most 2); merged: Done; closed: Needs Attention" in out
    assert "merge: never (a person merges)" in out
    assert "error: the tracker has no state 'Changes Requested'" in out
    assert TOKEN not in out


@pytest.mark.parametrize(
    ("approvals", "said"),
    [
        (
            0,
            "warning: merge.policy when_green_and_approved merges into main, whose rules require "
            "no approval",
        ),
        (2, "merge rules  main: 2 approval(s) required"),
        (None, "merge rules  main: read from each pull request"),
    ],
)
async def test_check_reads_what_the_base_requires_before_a_merge_policy_merges_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], approvals: int | None, said: str
) -> None:
    follow = "follow:\n  on_merged: Done\nmerge:\n  policy: when_green_and_approved\n"
    settings = load_settings(workflow(tmp_path, REPOSITORY, follow), {"GITHUB_TOKEN": TOKEN})
    host = MemoryCodeHost(base_approvals=approvals)
    assert await report(settings, KnownStates(), host) == 0
    assert said in capsys.readouterr().out


async def test_check_says_when_the_base_rules_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Unreachable(MemoryCodeHost):
        async def approvals_required(self, base: str) -> int | None:
            raise CodeHostError(CODE_HOST_REQUEST, "GitHub could not be reached")

    follow = "merge:\n  policy: when_green_and_approved\n"
    settings = load_settings(workflow(tmp_path, REPOSITORY, follow), {"GITHUB_TOKEN": TOKEN})
    assert await report(settings, KnownStates(), Unreachable()) == 0
    out = capsys.readouterr().out
    assert "warning: the rules of the base branch could not be read: GitHub could not" in out
