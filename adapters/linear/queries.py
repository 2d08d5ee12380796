"""Every GraphQL operation the Linear adapter sends, in one place so the contract tests can check
each against Linear's published schema.

Page sizes are bounded by Linear's query complexity budget as well as by item count: nested
connections multiply the cost of a query by their `first`, so labels and relations are fetched
with modest limits (`LABELS_PER_ISSUE`, `RELATIONS_PER_ISSUE`) and issue pages hold `PAGE_SIZE`.
A project's teams are read with their states in one request, so their number is capped
(`TEAMS_PER_PROJECT`) to keep that request as cheap as an issue page.
"""

from __future__ import annotations

PAGE_SIZE = 50
"""Issues per page, for state listings and for each refresh-by-id chunk (Linear's default)."""
LABELS_PER_ISSUE = 50
RELATIONS_PER_ISSUE = 25
STATES_PER_TEAM = 100
"""A team's workflow states; teams have a handful, so one page always holds them all."""
TEAMS_PER_PROJECT = 20
"""The teams of a project read at once; a project spanning more is reported, not cut short."""
COMMENTS_PER_PAGE = 100

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
  creator {{ name }}
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

COMMENT_FIELDS = """
fragment SymphonyComment on Comment {
  id
  body
  createdAt
  user { name displayName guest }
}
"""

ADD_COMMENT = (
    """
mutation SymphonyAddComment($issueId: String!, $body: String!) {
  commentCreate(input: { issueId: $issueId, body: $body }) {
    success
    comment { ...SymphonyComment url }
  }
}
"""
    + COMMENT_FIELDS
)
"""Not idempotent: each call adds a comment. Answers the comment as Linear stored it."""

EDIT_COMMENT = (
    """
mutation SymphonyEditComment($id: String!, $body: String!) {
  commentUpdate(id: $id, input: { body: $body }) {
    success
    comment { ...SymphonyComment }
  }
}
"""
    + COMMENT_FIELDS
)

COMMENT_OWNER = """
query SymphonyCommentOwner($id: String!) {
  comment(id: $id) {
    id
    issue { id }
    user { id }
  }
}
"""
"""Which issue a comment is on and who wrote it: checked before the daemon edits it."""

ISSUE_COMMENTS = (
    """
query SymphonyIssueComments($id: String!, $first: Int!, $after: String) {
  issue(id: $id) {
    id
    comments(first: $first, after: $after, orderBy: createdAt) {
      nodes { ...SymphonyComment }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""
    + COMMENT_FIELDS
)
"""One page of an issue's comments (`COMMENTS_PER_PAGE`); the adapter sorts them oldest first."""

TEAM_BY_KEY = f"""
query SymphonyTeamByKey($key: String!) {{
  teams(filter: {{ key: {{ eq: $key }} }}, first: 1) {{
    nodes {{ id key states(first: {STATES_PER_TEAM}) {{ nodes {{ id name type }} }} }}
  }}
}}
"""
"""The configured team (by key) with its workflow states."""

PROJECT_TEAMS = f"""
query SymphonyProjectTeams($slug: String!) {{
  projects(filter: {{ slugId: {{ eq: $slug }} }}, first: 1) {{
    nodes {{
      id
      slugId
      teams(first: {TEAMS_PER_PROJECT}) {{
        nodes {{ id key states(first: {STATES_PER_TEAM}) {{ nodes {{ id name type }} }} }}
        pageInfo {{ hasNextPage }}
      }}
    }}
  }}
}}
"""
"""The configured project (by `slugId`) with its teams and their workflow states."""

ISSUE_SCOPE = f"""
query SymphonyIssueScope($id: String!) {{
  issue(id: $id) {{
    id
    identifier
    team {{ id key states(first: {STATES_PER_TEAM}) {{ nodes {{ id name type }} }} }}
    project {{ id slugId }}
  }}
}}
"""
"""A new ticket's parent as it is now: its team (with states) and project are the ticket's."""

ISSUE_REF = """
query SymphonyIssueRef($id: String!) {
  issue(id: $id) { id identifier }
}
"""
"""An issue's id from its identifier (`issue(id:)` takes either): how blockers are resolved."""

CREATE_ISSUE = """
mutation SymphonyCreateIssue(
  $teamId: String!
  $title: String!
  $description: String
  $stateId: String!
  $projectId: String
) {
  issueCreate(
    input: {
      teamId: $teamId
      title: $title
      description: $description
      stateId: $stateId
      projectId: $projectId
    }
  ) {
    success
    issue { id identifier }
  }
}
"""

ADD_BLOCKER = """
mutation SymphonyAddBlocker($blockerId: String!, $issueId: String!) {
  issueRelationCreate(input: { issueId: $blockerId, relatedIssueId: $issueId, type: blocks }) {
    success
    issueRelation { id }
  }
}
"""
"""Record that `blockerId` blocks `issueId`: a `blocks` relation from the blocker."""

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
    "SymphonyEditComment": EDIT_COMMENT,
    "SymphonyCommentOwner": COMMENT_OWNER,
    "SymphonyIssueComments": ISSUE_COMMENTS,
    "SymphonyTeamByKey": TEAM_BY_KEY,
    "SymphonyProjectTeams": PROJECT_TEAMS,
    "SymphonyIssueScope": ISSUE_SCOPE,
    "SymphonyIssueRef": ISSUE_REF,
    "SymphonyCreateIssue": CREATE_ISSUE,
    "SymphonyAddBlocker": ADD_BLOCKER,
}
"""Every operation the adapter sends, by operation name (the agent's `linear_graphql` aside)."""
