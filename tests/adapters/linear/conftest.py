"""Fixtures for the Linear adapter: Linear's schema, an in-memory fake workspace answering over
respx, and trackers built the way the daemon builds them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import respx
from graphql import GraphQLSchema, build_schema

from symphony.config.sections import TrackerSettings
from symphony.tracker.contract import TrackerContext
from symphony_adapters.linear import LinearTracker, create_tracker
from tests.adapters.linear.fake_linear import API_KEY, ENDPOINT, FakeLinear

_SCHEMA: list[GraphQLSchema] = []


def load_schema(folder: Path) -> GraphQLSchema:
    # Building the 50k-line SDL takes a while on a loaded machine: once per session.
    if not _SCHEMA:
        _SCHEMA.append(build_schema((folder / "linear" / "schema.graphql").read_text()))
    return _SCHEMA[0]


@pytest.fixture
def linear_schema(tracker_schemas: Path) -> GraphQLSchema:
    """Linear's published schema; tests that need it skip when the schemas are absent."""
    return load_schema(tracker_schemas)


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeLinear]:
    """The fake workspace; its answers are checked against the schema whenever it is present."""
    try:
        schema: GraphQLSchema | None = load_schema(request.getfixturevalue("tracker_schemas"))
    except pytest.skip.Exception:
        schema = None
    workspace = FakeLinear(schema)
    yield workspace
    assert workspace.violations == [], "fake answers drifted from Linear's schema"


@pytest.fixture
def linear(fake: FakeLinear) -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        router.post(ENDPOINT).mock(side_effect=fake.respx_handler)
        yield router


def settings(**provider: Any) -> TrackerSettings:
    base: dict[str, Any] = {"endpoint": ENDPOINT, "team_key": "ENG"}
    base.update(provider)
    return TrackerSettings(
        kind="linear",
        provider={k: v for k, v in base.items() if v is not None},
        active_states=("Todo", "In Progress"),
        terminal_states=("Done", "Canceled", "Duplicate"),
    )


def environ(**extra: str) -> dict[str, str]:
    return {"LINEAR_API_KEY": API_KEY, **extra}


MakeTracker = Callable[..., LinearTracker]


@pytest.fixture
async def make_tracker(linear: respx.MockRouter) -> AsyncIterator[MakeTracker]:
    made: list[LinearTracker] = []

    def make(**provider: Any) -> LinearTracker:
        tracker = create_tracker(settings(**provider), TrackerContext(Path("."), environ()))
        assert isinstance(tracker, LinearTracker)
        made.append(tracker)
        return tracker

    yield make
    for tracker in made:
        await tracker.aclose()
