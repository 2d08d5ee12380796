"""Every GraphQL document the `github` adapter sends, in one place so contract tests can check
each against GitHub's published schema."""

from __future__ import annotations

_ITEM_FIELDS = """
fragment ItemFields on ProjectV2Item {
  id
  isArchived
  project { id }
  status: fieldValueByName(name: $statusField) {
    ... on ProjectV2ItemFieldSingleSelectValue { name optionId }
  }
  content {
    __typename
    ... on Issue {
      id
      number
      title
      body
      url
      createdAt
      updatedAt
      issueState: state
      repository { nameWithOwner }
      labels(first: 50) { nodes { name } }
      assignees(first: 5) { nodes { login } }
    }
  }
}
"""

PROJECT_ORGANIZATION = """
query ProjectOfOrganization($owner: String!, $number: Int!, $statusField: String!) {
  owner: organization(login: $owner) {
    projectV2(number: $number) {
      id
      field(name: $statusField) {
        ... on ProjectV2SingleSelectField { id options { id name } }
      }
    }
  }
}
"""

PROJECT_USER = PROJECT_ORGANIZATION.replace("ProjectOfOrganization", "ProjectOfUser").replace(
    "organization(login", "user(login"
)

PROJECT_ITEMS = (
    """
query ProjectItems($projectId: ID!, $after: String, $statusField: String!) {
  node(id: $projectId) {
    ... on ProjectV2 {
      items(first: 100, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { ...ItemFields }
      }
    }
  }
}
"""
    + _ITEM_FIELDS
)

ITEMS_BY_ID = (
    """
query ProjectItemsById($ids: [ID!]!, $statusField: String!) {
  nodes(ids: $ids) {
    __typename
    ... on ProjectV2Item { ...ItemFields }
  }
}
"""
    + _ITEM_FIELDS
)

SET_STATUS = """
mutation SetItemStatus($projectId: ID!, $itemId: ID!, $fieldId: ID!, $optionId: String!) {
  updateProjectV2ItemFieldValue(
    input: {
      projectId: $projectId
      itemId: $itemId
      fieldId: $fieldId
      value: { singleSelectOptionId: $optionId }
    }
  ) {
    projectV2Item { id }
  }
}
"""

ADD_TO_PROJECT = """
mutation AddProjectItem($projectId: ID!, $contentId: ID!) {
  addProjectV2ItemById(input: { projectId: $projectId, contentId: $contentId }) {
    item { id }
  }
}
"""

PULL_FOLLOW = """
query PullRequestFollow($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewDecision
      mergeable
      reviewThreads(first: 100) {
        nodes {
          id
          isResolved
          path
          line
          comments(last: 50) {
            nodes { fullDatabaseId body authorAssociation author { __typename login } }
          }
        }
      }
      commits(last: 1) {
        nodes {
          commit {
            oid
            statusCheckRollup {
              contexts(first: 100) {
                nodes {
                  __typename
                  ... on CheckRun { name isRequired(pullRequestNumber: $number) }
                  ... on StatusContext { context isRequired(pullRequestNumber: $number) }
                }
              }
            }
          }
        }
      }
    }
  }
}
"""

REPLY_TO_THREAD = """
mutation ReplyToThread($threadId: ID!, $body: String!) {
  addPullRequestReviewThreadReply(input: { pullRequestReviewThreadId: $threadId, body: $body }) {
    comment { id }
  }
}
"""

ALL = {
    "PROJECT_ORGANIZATION": PROJECT_ORGANIZATION,
    "PROJECT_USER": PROJECT_USER,
    "PROJECT_ITEMS": PROJECT_ITEMS,
    "ITEMS_BY_ID": ITEMS_BY_ID,
    "SET_STATUS": SET_STATUS,
    "ADD_TO_PROJECT": ADD_TO_PROJECT,
    "PULL_FOLLOW": PULL_FOLLOW,
    "REPLY_TO_THREAD": REPLY_TO_THREAD,
}
"""Name -> document, for the schema contract test."""
