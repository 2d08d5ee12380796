"""A person's review posted on GitLab: the note once, then one diff discussion per line comment
positioned on the merge request's diff_refs (new_line on the head's side, old_line on a removed
line), each answerable afterwards; the note's body held to the published notes operation and
each discussion to GitLab's documented text position."""

from __future__ import annotations

import hashlib
from pathlib import Path

from symphony.codehost.contract import DiffSide, LineComment, ReviewDraft, ReviewVerdict
from tests.adapters.gitlab.test_contract import operation, request_schema
from tests.adapters.gitlab.test_merge_requests import TOKEN, fake_project, host, published
from tests.adapters.gitlab.test_merge_requests_contract import openapi

COMMENTS = (
    LineComment("app/parse.py", 12, "Name this after what it returns."),
    LineComment("app/parse.py", 30, "These lines repeat the loop above.", start_line=28),
    LineComment("README.md", 4, "The old wording was right.", side=DiffSide.LEFT),
)
DRAFT = ReviewDraft(ReviewVerdict.REQUEST_CHANGES, "Changes requested by Ada.", None, COMMENTS)
POSITION_FIELDS = {"position_type", "base_sha", "start_sha", "head_sha", "old_path", "new_path",
                   "old_line", "new_line", "line_range"}  # fmt: skip
"""GitLab's documented `position` of a text diff note (`POST .../discussions`)."""


async def test_three_line_comments_become_three_diff_discussions_and_the_note_one_note() -> None:
    fake = fake_project()
    gitlab = host(fake)
    iid = await published(fake, gitlab)
    posted = await gitlab.submit_review(iid, DRAFT)

    assert fake.notes == [(iid, "Changes requested by Ada.")]
    made = fake.record(iid).discussions
    assert [d.id for d in made] == list(posted.threads)
    positions = [d.notes[0]["position"] for d in made]
    assert [(p["new_path"], p["new_line"], p["old_line"]) for p in positions] == [
        ("app/parse.py", 12, None),
        ("app/parse.py", 30, None),
        ("README.md", None, 4),
    ]
    assert all(p["head_sha"] == fake.record(iid).sha for p in positions)
    assert made[1].notes[0]["body"] == "These lines repeat the loop above."
    code = hashlib.sha1(b"app/parse.py").hexdigest()
    assert positions[1]["line_range"] == {
        "start": {"line_code": f"{code}_28_28", "type": "new", "new_line": 28},
        "end": {"line_code": f"{code}_30_30", "type": "new", "new_line": 30},
    }
    assert "line_range" not in positions[0] and "line_range" not in positions[2]
    sent = [r.body for r in fake.requests if r.method == "POST" and r.path.endswith("discussions")]
    assert all(set(b) == {"body", "position"} and set(b["position"]) <= POSITION_FIELDS
               for b in sent)  # fmt: skip

    status = await gitlab.read_status(iid)
    assert [(t.path, t.line) for t in status.threads] == [
        ("app/parse.py", 12),
        ("app/parse.py", 30),
        ("README.md", 4),
    ]
    for thread in posted.threads:
        await gitlab.reply_to_thread(iid, thread, "Addressed in abc1234: renamed.")
    assert all(d.notes[-1]["body"] == "Addressed in abc1234: renamed." for d in made)


async def test_the_note_follows_the_published_notes_operation(tracker_schemas: Path) -> None:
    spec = openapi(tracker_schemas)
    fake = fake_project()
    gitlab = host(fake)
    iid = await published(fake, gitlab)
    await gitlab.submit_review(iid, DRAFT)
    note = next(r for r in fake.requests if r.method == "POST" and r.path.endswith("/notes"))
    _, op = operation(spec, note.method, note.path)
    schema = request_schema(spec, op)
    assert set(note.body) <= set(schema["properties"])
    assert set(schema.get("required", [])) <= set(note.body)


async def test_a_range_on_the_old_side_names_old_lines_and_a_wrong_range_is_refused() -> None:
    fake = fake_project()
    gitlab = host(fake)
    iid = await published(fake, gitlab)
    removed = LineComment("a.py", 9, "Why drop these?", side=DiffSide.LEFT, start_line=7)
    await gitlab.submit_review(iid, ReviewDraft(ReviewVerdict.COMMENT, "", None, (removed,)))
    position = fake.record(iid).discussions[0].notes[0]["position"]
    assert (position["old_line"], position["new_line"]) == (9, None)
    assert [position["line_range"][e]["type"] for e in ("start", "end")] == ["old", "old"]
    assert [position["line_range"][e]["old_line"] for e in ("start", "end")] == [7, 9]

    status, _, _ = fake.handle(
        "POST",
        f"/api/v4/projects/{fake.project_id}/merge_requests/{iid}/discussions",
        {"private-token": TOKEN},
        {"body": "x", "position": {**position, "line_range": {
            "start": {**position["line_range"]["start"], "line_code": "0" * 40 + "_7_7"},
            "end": position["line_range"]["end"]}}},
    )  # fmt: skip
    assert status == 400  # the fake holds line codes to the path's sha1
