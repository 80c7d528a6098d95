"""A ``Session`` for the OpenAI Agents SDK backed by a session-store.

``StoreSession(session_id, root)`` is a drop-in for the SDK's
``SQLiteSession(session_id, db_path)``::

    from agents import Agent, Runner
    from session_store.agents import StoreSession

    result = await Runner.run(agent, "hi", session=StoreSession("user_123", "sessions/"))

``session_id`` is any text: it names one session of the store (the store
keeps the name, unique, and the CLI takes it where it takes an id:
``session-store show user_123``). The session is created at the first
``add_items``. ``get_items`` returns the items as ``add_items`` was given
them, JSON-equal: ids, statuses, fields the store does not know, shorthand
forms such as ``{"role": "user", "content": "Hello"}``, and items with no
``type`` (as ``EncryptedSession`` writes) all come back unchanged. That is
what lets the SDK match stored history against what the model was sent, as
``OpenAIResponsesCompactionSession`` and a resumed pending write do.

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

With ``OpenAIResponsesCompactionSession`` around it, a ``StoreSession``
offers the SDK's snapshot hook: compaction may replace only the latest part
of the history, the part the model saw, and keep what came before. The
replacement is one compaction entry written only if the session's head is
still the one the snapshot read, so a write in between makes it give up.

``close()`` ends a session object, as ``SQLiteSession.close`` does: later
calls on it raise ``RuntimeError``. The store it shares stays open while
other sessions use it; the last one to close syncs and closes it. ``close()``
may be called plainly or awaited, since the SDK's sessions have both kinds.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Callable, Optional, TypeVar, Union

from . import HeadMismatch, Store

try:
    from agents.memory.session import SessionABC as _Base
except ImportError:  # the SDK is optional: the class still works alone
    _Base = object  # type: ignore[assignment,misc]

try:
    # The SDK's hook for backends that replace a suffix of the history
    # atomically (its SQLite and SQLAlchemy sessions have it).
    from agents.memory.session import _CompactionSnapshot
except ImportError:
    _CompactionSnapshot = None  # type: ignore[assignment,misc]

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError:
    SessionSettings = None  # type: ignore[assignment,misc]

    def resolve_session_limit(limit: Optional[int], settings: Any) -> Optional[int]:
        if limit is not None or settings is None:
            return limit
        return getattr(settings, "limit", None)


try:
    from agents.memory.session_settings import coerce_session_settings
except ImportError:  # an SDK older than its dict form, or none

    def coerce_session_settings(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        unknown = sorted(str(name) for name in value if name != "limit")
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(unknown)}")
        return value if SessionSettings is None else SessionSettings(**value)


_T = TypeVar("_T")

_stores: dict[str, Store] = {}
_open_sessions: dict[str, int] = {}
_stores_lock = threading.Lock()


def _store_key(root: Union[str, "os.PathLike[str]"]) -> str:
    return os.path.realpath(os.fspath(root))


def _open(key: str, durability: str) -> Store:
    """The store at ``key``, opened if the process has none; hold the lock."""
    store = _stores.get(key)
    if store is None:
        store = Store(key, durability=durability)
        _stores[key] = store
    return store


def shared_store(root: Union[str, "os.PathLike[str]"], durability: str = "buffered") -> Store:
    """The process's one ``Store`` on ``root``, opened at first use.

    A session's log has one writer at a time, so two ``Store`` objects on one
    directory in one process would lock each other out: every
    ``StoreSession`` given a path shares this one. ``durability`` counts only
    when the store is first opened.
    """
    with _stores_lock:
        return _open(_store_key(root), durability)


def _acquire(root: Union[str, "os.PathLike[str]"], durability: str) -> tuple[str, Store]:
    """The shared store on ``root``, counted as used by one more open session."""
    key = _store_key(root)
    with _stores_lock:
        store = _open(key, durability)
        _open_sessions[key] = _open_sessions.get(key, 0) + 1
        return key, store


def _release(key: str) -> None:
    """One session on the shared store at ``key`` closed.

    The last one closes the store, which syncs and lets go of its sessions'
    logs. The ``Store`` object stays the shared one and opens them again at
    its next use, so a caller holding it from ``shared_store`` keeps a
    working store and a second one is never opened on the directory.
    """
    with _stores_lock:
        left = _open_sessions.get(key, 0) - 1
        if left > 0:
            _open_sessions[key] = left
            return
        _open_sessions.pop(key, None)
        # Under the lock, so that a session opened meanwhile finds the logs
        # closed and opens them again, not half way through the close.
        _stores[key].close()


class _Closed:
    """What ``StoreSession.close`` returns: already done, and awaitable for
    callers written against the SDK's async sessions (``await s.close()``)."""

    __slots__ = ()

    def __await__(self):  # type: ignore[no-untyped-def]
        return iter(())


class StoreSession(_Base):  # type: ignore[misc,valid-type]
    """The Agents SDK's ``Session`` protocol over one named session of a store.

    Args:
        session_id: The session's name, any text ("user_123").
        root: The store's directory, or a ``Store``.
        session_settings: The SDK's ``SessionSettings``, or a dict of its
            fields, as the SDK's own sessions take it (its ``limit`` is the
            default for ``get_items``); an unknown key raises ``TypeError``.
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
        if session_settings is not None:
            session_settings = coerce_session_settings(session_settings)
        elif SessionSettings is not None:
            session_settings = SessionSettings()
        self.session_settings = session_settings
        # Only a store opened here through a path is shared, and counted; a
        # ``Store`` the caller passed stays the caller's to close.
        self._shared_key: Optional[str] = None
        if isinstance(root, Store):
            self.store = root
        else:
            self._shared_key, self.store = _acquire(root, durability)
        self._closed = False
        self._id: Optional[str] = None
        self._offload_writes = self.store.durability == "sync" if offload is None else offload
        self._offload_reads = offload is True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def _run(self, call: Callable[[], _T], write: bool = True) -> _T:
        """Runs a store call where ``offload`` says, on an open session."""
        self._check_open()
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
        # Before the empty-list return, so that a closed session says so.
        self._check_open()
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

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Optional[Callable[[Any], bool]] = None,
    ) -> Any:
        """The SDK's compaction snapshot: the latest ``limit`` items, and a
        replacement of a suffix of them that holds only if nothing was
        written since (``None`` where the SDK has no such hook).

        A subclass that changes how items are read or written must offer
        its own, as the SDK asks of ``SQLiteSession``'s subclasses: this one
        would bypass its changes.
        """
        cls = type(self)
        if _CompactionSnapshot is None or any(
            getattr(cls, name) is not getattr(StoreSession, name)
            for name in ("get_items", "add_items", "pop_item", "clear_session")
        ):
            return None

        def read() -> tuple[Optional[str], Optional[str], list[Any], bool]:
            session = self._existing()
            if session is None:
                return None, None, [], True
            # The head first: a write after it makes the replacement fail,
            # whatever the items read below hold.
            head = self.store.head(session)
            items = self.store.items(session, limit)
            return session, head, items, self.store.len(session) <= len(items)

        session, head, items, complete = await self._run(read, write=False)

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            # Without a head to hold the replacement to, none is safe.
            if session is None or head is None or start >= len(items):
                return False

            def replace() -> bool:
                live = self.store.items(session)
                kept = live[: len(live) - len(items) + start]
                if prune_prefix is not None:
                    expired = 0
                    while expired < len(kept) and prune_prefix(kept[expired]):
                        expired += 1
                    kept = kept[expired:]
                try:
                    self.store.compact(session, kept + list(output), head=head)
                except HeadMismatch:
                    return False
                return True

            return await self._run(replace)

        return _CompactionSnapshot(items, complete, replace_suffix)

    def close(self) -> _Closed:
        """Ends this session object; later calls on it raise ``RuntimeError``.

        The store stays open while other sessions use it, and is closed (each
        session synced) with its last one. Closing twice does nothing. Returns
        an awaitable, so both ``s.close()`` and ``await s.close()`` work.
        """
        if not self._closed:
            self._closed = True
            if self._shared_key is not None:
                _release(self._shared_key)
        return _Closed()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_id!r}, {self.store!r})"
