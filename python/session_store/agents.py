"""A ``Session`` for the OpenAI Agents SDK backed by a session-store.

``StoreSession(session_id, root)`` is a drop-in for the SDK's
``SQLiteSession(session_id, db_path)``::

    from agents import Agent, Runner
    from session_store.agents import StoreSession

    result = await Runner.run(agent, "hi", session=StoreSession("user_123", "sessions/"))

``session_id`` is any text: it names one session of the store (the store
keeps the name, unique, and the CLI takes it where it takes an id:
``session-store show user_123``). The session is created at the first
``add_items``. Items come back in the form the store keeps, which is the
Responses API's: provider ids and statuses dropped, a string ``content`` as
one text part; everything else as given.

Every call is one step in the append-only log: ``add_items`` one commit,
``pop_item`` one small entry that removes the last item, ``clear_session``
one compaction to an empty history. The log keeps the whole history and its
hash chain; ``Store.export`` and the CLI show it.

Several ``StoreSession`` objects, on one session or many, may be used at once
from asyncio tasks and threads, and sessions on one directory share one
``Store``. On a ``"buffered"`` store a call runs in the event loop's thread:
a buffered append is a copy into a mapped file (tens of microseconds), less
than handing it to a worker thread costs (about 150). On a ``"sync"`` store,
whose writes wait for the disk, each write (``add_items``, ``pop_item``,
``clear_session``) runs in a worker thread (``asyncio.to_thread``) with the
GIL released; ``get_items`` still runs in the loop's thread, since a read
waits for no sync. ``offload`` overrides this: ``True`` sends every call to
a worker thread, ``False`` none.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Callable, Optional, TypeVar, Union

from . import Store

try:
    from agents.memory.session import SessionABC as _Base
except ImportError:  # the SDK is optional: the class still works alone
    _Base = object  # type: ignore[assignment,misc]

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError:
    SessionSettings = None  # type: ignore[assignment,misc]

    def resolve_session_limit(limit: Optional[int], settings: Any) -> Optional[int]:
        if limit is not None or settings is None:
            return limit
        return getattr(settings, "limit", None)


_T = TypeVar("_T")

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def shared_store(root: Union[str, "os.PathLike[str]"], durability: str = "buffered") -> Store:
    """The process's one ``Store`` on ``root``, opened at first use.

    A session's log has one writer at a time, so two ``Store`` objects on one
    directory in one process would lock each other out: every
    ``StoreSession`` given a path shares this one. ``durability`` counts only
    when the store is first opened.
    """
    key = os.path.realpath(os.fspath(root))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = Store(key, durability=durability)
            _stores[key] = store
        return store


class StoreSession(_Base):  # type: ignore[misc,valid-type]
    """The Agents SDK's ``Session`` protocol over one named session of a store.

    Args:
        session_id: The session's name, any text ("user_123").
        root: The store's directory, or a ``Store``.
        session_settings: The SDK's ``SessionSettings`` (its ``limit`` is
            the default for ``get_items``).
        durability: ``"buffered"`` or ``"sync"``, when ``root`` is a path
            and the process has not opened that store yet.
        offload: Run each store call in a worker thread (``True``) or in
            the event loop's thread (``False``); by default, the writes of
            a ``"sync"`` store, which wait for the disk.
    """

    def __init__(
        self,
        session_id: str,
        root: Union[str, "os.PathLike[str]", Store],
        session_settings: Any = None,
        durability: str = "buffered",
        offload: Optional[bool] = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        if session_settings is None and SessionSettings is not None:
            session_settings = SessionSettings()
        self.session_settings = session_settings
        self.store = root if isinstance(root, Store) else shared_store(root, durability)
        self._id: Optional[str] = None
        self._offload_writes = self.store.durability == "sync" if offload is None else offload
        self._offload_reads = offload is True

    async def _run(self, call: Callable[[], _T], write: bool = True) -> _T:
        """Runs a store call where ``offload`` says."""
        if self._offload_writes if write else self._offload_reads:
            return await asyncio.to_thread(call)
        return call()

    def _existing(self) -> Optional[str]:
        """The session's id if it exists (found once, then kept)."""
        if self._id is None:
            self._id = self.store.find_name(self.session_id)
        return self._id

    def _created(self) -> str:
        """The session's id, created if it does not exist yet."""
        if self._id is None:
            self._id = self.store.open_named(self.session_id)
        return self._id

    async def get_items(self, limit: Optional[int] = None) -> list[Any]:
        """The session's items in order; with ``limit``, the latest ``limit``.

        A negative ``limit`` means all of them and ``0`` none, as in the SDK's
        ``SQLiteSession``.
        """
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit < 0:
            limit = None

        def read() -> list[Any]:
            session = self._existing()
            if session is None or limit == 0:
                return []
            return self.store.items(session, limit)

        return await self._run(read, write=False)

    async def add_items(self, items: list[Any]) -> None:
        """Appends ``items`` in one commit."""
        if not items:
            return
        items = list(items)
        await self._run(lambda: self.store.append(self._created(), items))

    async def pop_item(self) -> Optional[Any]:
        """Removes and returns the latest item, or returns ``None`` if empty."""

        def pop() -> Optional[Any]:
            session = self._existing()
            return None if session is None else self.store.pop(session)

        return await self._run(pop)

    async def clear_session(self) -> None:
        """Empties the session's history (the log keeps it)."""

        def clear() -> None:
            session = self._existing()
            if session is not None and self.store.len(session) > 0:
                self.store.compact(session, [])

        await self._run(clear)

    def __repr__(self) -> str:
        return f"StoreSession({self.session_id!r}, {self.store!r})"
