from __future__ import annotations

import json

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.codehost.contract import CODE_HOST_REJECTED
from symphony.config.fields import INVALID_CONFIG
from symphony.hosts.serve import SERVER_BIND_FAILED
from symphony.tracker.contract import TRACKER_REQUEST, TrackerError


def test_a_category_reads_as_its_string_in_comparisons_json_and_messages() -> None:
    error = TrackerError(TRACKER_REQUEST, "timed out")
    assert error.category == "tracker_request" and TRACKER_REQUEST is ErrorCategory.TRACKER_REQUEST
    assert json.dumps({"category": error.category}) == '{"category": "tracker_request"}'
    assert str(error) == "tracker_request: timed out"
    assert f"{SERVER_BIND_FAILED}" == "server_bind_failed"


def test_the_modules_constants_are_the_enums_members() -> None:
    assert INVALID_CONFIG is ErrorCategory.INVALID_WORKFLOW_CONFIG
    assert CODE_HOST_REJECTED is ErrorCategory.CODE_HOST_REJECTED
    assert all(member.value == member.name.lower() for member in ErrorCategory)


def test_a_plain_string_category_still_makes_an_error() -> None:
    assert str(SymphonyError("invalid_workflow_config", "bad")) == "invalid_workflow_config: bad"
