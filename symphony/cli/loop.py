"""The event loop every command runs on: asyncio's own.

Python 3.11's asyncio waits for each child process in a thread of its own. Where the kernel
has pidfds (Linux 5.3 and later), a command run from the main thread reads a child's exit from
its pidfd in the loop instead, as Python 3.12 and later do by themselves: an agent, a hook or a
git command costs no thread.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on a new event loop and close it (`asyncio.run`)."""
    if sys.version_info >= (3, 12) or not _pidfds_work():
        return asyncio.run(main)
    policy = asyncio.get_event_loop_policy()
    default = policy.get_child_watcher()
    policy.set_child_watcher(asyncio.PidfdChildWatcher())  # attached to the loop asyncio.run makes
    try:
        return asyncio.run(main)
    finally:
        policy.set_child_watcher(default)  # for loops made otherwise (a test's)


def _pidfds_work() -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False  # asyncio attaches a watcher only to the main thread's loop
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True
