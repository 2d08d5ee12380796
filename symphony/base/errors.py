"""Errors that cross a boundary carry a stable category and a human message.

The category is what code branches on and what logs and the API show; the message is what a
person reads. Exceptions stay inside a layer; at a boundary they become one of these.
"""

from __future__ import annotations


class SymphonyError(Exception):
    """Base of every categorized error."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message

    def __str__(self) -> str:
        return f"{self.category}: {self.message}"
