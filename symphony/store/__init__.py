"""The state that survives restarts: the SQLite store (`sqlite`), the encoding of its rows
(`codec`), its schema and migrations (`schema`), the one-daemon lock (`lock`) and what a restart
does with what it finds (`recovery`). The package's namespace is the store's API.
"""

from symphony.store.rows import RetryRow, RunRow, Saved, TransitionRow
from symphony.store.sqlite import STORE_NEWER, STORE_UNUSABLE, Store, StoreError

__all__ = [
    "STORE_NEWER",
    "STORE_UNUSABLE",
    "RetryRow",
    "RunRow",
    "Saved",
    "Store",
    "StoreError",
    "TransitionRow",
]
