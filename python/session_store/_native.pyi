"""Type stubs of the native module; see ``session_store`` for the API."""

import os
import pathlib
from typing import Any, Literal, Optional, Sequence, Union

Item = dict[str, Any]
"""A Responses-API item, as the OpenAI Agents SDK and the API use them."""

class SessionStoreError(Exception):
    """Base class of every error the store raises."""

class HeadMismatch(SessionStoreError):
    """Another writer moved the session: nothing was written."""

    session: str
    expected: Optional[str]
    actual: Optional[str]

class Locked(SessionStoreError):
    """Another process writes this session."""

class Corrupt(SessionStoreError):
    """Bytes on disk failed their check."""

class IoError(SessionStoreError):
    """The operating system refused an operation."""

class Poisoned(SessionStoreError):
    """An earlier write of this session failed."""

class NotFound(SessionStoreError):
    """No such session, name or entry."""

class InvalidInput(SessionStoreError):
    """The call was refused before anything was written."""

class ItemForm(SessionStoreError):
    """An item does not fit the Responses API's form."""

class Wire(SessionStoreError):
    """A line of the export form is unacceptable."""

def normalize(items: Sequence[Item]) -> list[Item]:
    """Items as the store keeps and returns them (ids and statuses dropped)."""

class Store:
    """A store of sessions: crash-safe, append-only, hash-chained logs."""

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        durability: Literal["buffered", "sync"] = "buffered",
        read_only: bool = False,
    ) -> None: ...
    @property
    def path(self) -> pathlib.Path: ...
    @property
    def durability(self) -> Literal["buffered", "sync"]: ...
    def create_session(
        self,
        system_prompt: Optional[str] = None,
        model: Optional[str] = None,
        items: Optional[Sequence[Item]] = None,
        name: Optional[str] = None,
    ) -> str:
        """Creates a session; returns its id."""
    def find_name(self, name: str) -> Optional[str]:
        """The id of the session named ``name``, or ``None``."""
    def open_named(self, name: str) -> str:
        """The id of the session named ``name``, created if missing."""
    def append(self, session_id: str, items: Sequence[Item], head: Optional[str] = None) -> str:
        """Appends items in one commit; returns the new head."""
    def restore(self, session_id: str) -> list[Item]:
        """The live history, ready to send."""
    def items(self, session_id: str, limit: Optional[int] = None) -> list[Item]:
        """The last ``limit`` items of the live history (all for ``None``)."""
    def len(self, session_id: str) -> int:
        """How many items the live history holds."""
    def pop(self, session_id: str, head: Optional[str] = None) -> Optional[Item]:
        """Removes and returns the last item, or ``None`` if empty."""
    def compact(self, session_id: str, summary: Sequence[Item], head: Optional[str] = None) -> str:
        """Makes ``summary`` the live history; returns the new head."""
    def fork(self, session_id: str, at: Optional[str] = None) -> str:
        """A new session with the history up to ``at``; returns its id."""
    def head(self, session_id: str) -> Optional[str]:
        """The hash of the session's last entry."""
    def list(self) -> list[dict[str, Any]]:
        """Every session's summary."""
    def export(self, session_id: str) -> str:
        """Every entry in the JSON wire form, one line each."""
    def import_(self, lines: str) -> str:
        """A new session from wire-form lines; returns its id."""
    def verify(self, session_id: str) -> dict[str, Any]:
        """Checks every record: ``ok``, ``records``, ``segments``, ``bytes``, ``head``, ``damage``."""
    def sync(self, session_id: str) -> None:
        """Makes what this store appended to the session durable."""
    def close(self) -> None:
        """Closes every open session: syncs it and marks its end, so that the
        next open reads it without hashing it again. The store's last
        reference going away closes it too, with errors unreported."""
    def __enter__(self) -> "Store": ...
    def __exit__(self, *args: object) -> None: ...
