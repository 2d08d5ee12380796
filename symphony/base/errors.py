"""Errors that cross a boundary carry a stable category and a human message.

The category is what code branches on and what logs and the API show; the message is what a
person reads. Exceptions stay inside a layer; at a boundary they become one of these.
"""

from __future__ import annotations

import enum


class ErrorCategory(enum.StrEnum):
    """Every error category, in one place. A StrEnum: each member is its string, so comparisons
    with a plain string, JSON, logs and metrics labels read exactly as before. The modules that
    raise a category keep a constant for it pointing here (`tracker.contract.TRACKER_REQUEST`)."""

    # The workflow file and its settings (`config`).
    MISSING_WORKFLOW_FILE = "missing_workflow_file"
    WORKFLOW_PARSE_ERROR = "workflow_parse_error"
    WORKFLOW_FRONT_MATTER_NOT_A_MAP = "workflow_front_matter_not_a_map"
    INVALID_WORKFLOW_CONFIG = "invalid_workflow_config"
    TEMPLATE_PARSE_ERROR = "template_parse_error"
    TEMPLATE_RENDER_ERROR = "template_render_error"
    TEMPLATE_UNKNOWN_VARIABLE = "template_unknown_variable"
    TEMPLATE_UNKNOWN_FILTER = "template_unknown_filter"

    # Trackers (`tracker.contract`, the adapters).
    UNSUPPORTED_TRACKER_KIND = "unsupported_tracker_kind"
    INVALID_TRACKER_CONFIG = "invalid_tracker_config"
    MISSING_TRACKER_SECRET = "missing_tracker_secret"
    TRACKER_REQUEST = "tracker_request"
    TRACKER_STATUS = "tracker_status"
    TRACKER_RESPONSE = "tracker_response"
    TRACKER_PAGINATION = "tracker_pagination"
    TRACKER_RATE_LIMITED = "tracker_rate_limited"
    TRACKER_INTERNAL = "tracker_internal"
    TRACKER_REJECTED = "tracker_rejected"

    # Code hosts (`codehost.contract`); an HTTP adapter renames its client's `tracker_*` errors
    # to these once, at its seam.
    UNSUPPORTED_CODE_HOST = "unsupported_code_host"
    CODE_HOST_REQUEST = "code_host_request"
    CODE_HOST_STATUS = "code_host_status"
    CODE_HOST_RESPONSE = "code_host_response"
    CODE_HOST_PAGINATION = "code_host_pagination"
    CODE_HOST_RATE_LIMITED = "code_host_rate_limited"
    CODE_HOST_REJECTED = "code_host_rejected"
    CODE_HOST_HEAD_MOVED = "code_host_head_moved"

    # Agents (`agents`, spec section 10.6).
    UNKNOWN_AGENT_KIND = "unknown_agent_kind"
    CODEX_NOT_FOUND = "codex_not_found"
    INVALID_WORKSPACE_CWD = "invalid_workspace_cwd"
    RESPONSE_TIMEOUT = "response_timeout"
    TURN_TIMEOUT = "turn_timeout"
    PORT_EXIT = "port_exit"
    RESPONSE_ERROR = "response_error"
    TURN_FAILED = "turn_failed"
    TURN_CANCELLED = "turn_cancelled"
    TURN_INPUT_REQUIRED = "turn_input_required"
    STARTUP_FAILED = "startup_failed"

    # Hosts, sandboxes and the HTTP server (`hosts`, `base.hosts`).
    HOST_UNREACHABLE = "host_unreachable"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    SERVER_BIND_FAILED = "server_bind_failed"

    # Workspaces, worktrees and pushes (`workspace`).
    INVALID_WORKSPACE_PATH = "invalid_workspace_path"
    WORKSPACE_CREATE_FAILED = "workspace_create_failed"
    WORKSPACE_REMOVE_FAILED = "workspace_remove_failed"
    WORKSPACE_NOT_OWNED = "workspace_not_owned"
    HOOK_FAILED = "hook_failed"
    HOOK_TIMEOUT = "hook_timeout"
    WORKTREE_FAILED = "worktree_failed"
    PUSH_REJECTED = "push_rejected"
    PUSH_FAILED = "push_failed"

    # The store and its lock (`store`).
    STORE_NEWER_SCHEMA = "store_newer_schema"
    STORE_UNUSABLE = "store_unusable"
    DAEMON_ALREADY_RUNNING = "daemon_already_running"

    # Notifications (`notify`).
    NOTIFY_REFUSED = "notify_refused"
    NOTIFY_UNREACHABLE = "notify_unreachable"

    # The command line (`cli`).
    INIT_FAILED = "init_failed"


class SymphonyError(Exception):
    """Base of every categorized error. `category` is an `ErrorCategory` (a plain string with
    the same value reads the same)."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message

    def __str__(self) -> str:
        return f"{self.category}: {self.message}"
