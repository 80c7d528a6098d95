"""session-store for Python: crash-safe, append-only, hash-chained session
logs for LLM agents, built on the Rust crate of the same name.

Items are Responses-API items as dicts. ``Store`` is the store's API;
``session_store.agents.StoreSession`` puts one session behind the OpenAI
Agents SDK's ``Session`` protocol.
"""

from ._native import (
    Corrupt,
    HeadMismatch,
    InvalidInput,
    IoError,
    ItemForm,
    Locked,
    NotFound,
    Poisoned,
    SessionStoreError,
    Store,
    Wire,
    normalize,
)

__all__ = [
    "Corrupt",
    "HeadMismatch",
    "InvalidInput",
    "IoError",
    "ItemForm",
    "Locked",
    "NotFound",
    "Poisoned",
    "SessionStoreError",
    "Store",
    "Wire",
    "normalize",
]
