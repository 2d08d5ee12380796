"""Every GraphQL operation the Linear adapter sends, in one place so the contract tests can check
each against Linear's published schema.

Page sizes are bounded by Linear's query complexity budget as well as by item count: nested
connections multiply the cost of a query by their `first`, so labels and relations are fetched
with modest limits (`LABELS_PER_ISSUE`, `RELATIONS_PER_ISSUE`) and issue pages hold `PAGE_SIZE`.
"""

from __future__ import annotations

PAGE_SIZE = 50
"""Issues per page, for state listings and for each refresh-by-id chunk (Linear's default)."""
LABELS_PER_ISSUE = 50
RELATIONS_PER_ISSUE = 25
STATES_PER_TEAM = 100
"""A team's workflow states; teams have a handful, so one page always holds them all."""

ISSUE_FIELDS = f"""
fragment SymphonyIssue on Issue {{
  id
  identifier
  title
  description
  priority
  branchName
  url
  createdAt
  updatedAt
  state {{ id name type }}
  assignee {{ id }}
  team {{ id key }}
  project {{ id slugId }}
  labels(first: {LABELS_PER_ISSUE}) {{ nodes {{ name }} }}
  inverseRelations(first: {RELATIONS_PER_ISSUE}) {{
    nodes {{ type issue {{ id identifier state {{ name type }} }} }}
  }}
}}
"""

PROJECT_ISSUES = (
    """
query SymphonyProjectIssues($slug: String!, $states: [String!]!, $first: Int!, $after: String) {
  issues(
    filter: { project: { slugId: { eq: $slug } }, state: { name: { in: $states } } }
    first: $first
    after: $after
    orderBy: createdAt
  ) {
    nodes { ...SymphonyIssue }
    pageInfo { hasNextPage endCursor }
  }
}
"""
    + ISSUE_FIELDS
)
"""Candidates of one project (by its URL `slugId`) in the given state names, oldest first."""

TEAM_ISSUES = (
    """
query SymphonyTeamIssues($teamKey: String!, $states: [String!]!, $first: Int!, $after: String) {
  issues(
    filter: { team: { key: { eq: $teamKey } }, state: { name: { in: $states } } }
    first: $first
    after: $after
    orderBy: createdAt
  ) {
    nodes { ...SymphonyIssue }
    pageInfo { hasNextPage endCursor }
  }
}
"""
    + ISSUE_FIELDS
)
"""Candidates of one team (by its key, e.g. `ENG`) in the given state names, oldest first."""

ISSUES_BY_ID = (
    """
query SymphonyIssuesById($ids: [ID!]!, $first: Int!) {
  issues(filter: { id: { in: $ids } }, first: $first) {
    nodes { ...SymphonyIssue }
  }
}
"""
    + ISSUE_FIELDS
)
"""Current snapshots of up to `PAGE_SIZE` issues in one request; invisible ids do not come back."""

VIEWER = """
query SymphonyViewer {
  viewer { id }
}
"""
"""The user the API key belongs to: what `assignee: me` means."""

ISSUE_TEAM_STATES = f"""
query SymphonyIssueTeamStates($id: String!) {{
  issue(id: $id) {{
    id
    identifier
    state {{ id name }}
    team {{ id key states(first: {STATES_PER_TEAM}) {{ nodes {{ id name type }} }} }}
  }}
}}
"""
"""An issue's current state and the workflow states of its team: a move is resolved there."""

MOVE_ISSUE = """
mutation SymphonyMoveIssue($id: String!, $stateId: String!) {
  issueUpdate(id: $id, input: { stateId: $stateId }) {
    success
    issue { id identifier state { id name } }
  }
}
"""

ADD_COMMENT = """
mutation SymphonyAddComment($issueId: String!, $body: String!) {
  commentCreate(input: { issueId: $issueId, body: $body }) {
    success
    comment { id url }
  }
}
"""

ATTACH_URL = """
mutation SymphonyAttachUrl($issueId: String!, $url: String!, $title: String) {
  attachmentLinkURL(issueId: $issueId, url: $url, title: $title) {
    success
    attachment { id url title }
  }
}
"""
"""Linear updates the existing attachment when the same URL is linked again: idempotent."""

OPERATIONS: dict[str, str] = {
    "SymphonyProjectIssues": PROJECT_ISSUES,
    "SymphonyTeamIssues": TEAM_ISSUES,
    "SymphonyIssuesById": ISSUES_BY_ID,
    "SymphonyViewer": VIEWER,
    "SymphonyIssueTeamStates": ISSUE_TEAM_STATES,
    "SymphonyMoveIssue": MOVE_ISSUE,
    "SymphonyAddComment": ADD_COMMENT,
    "SymphonyAttachUrl": ATTACH_URL,
}
"""Every operation the adapter sends, by operation name (the agent's `linear_graphql` aside)."""
