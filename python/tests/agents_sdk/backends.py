"""The port's one change to the SDK's tests: each backend they build is a
``StoreSession``.

Each class below keeps the constructor of the SDK backend it stands in for,
and its name (so that ``"SQLiteSession is closed"`` still names the class
the test built), and maps the backend's location to a store directory:

- an in-memory database (``":memory:"``, the default, or an in-memory URL)
  is a fresh store of its own, as a new in-memory database is empty;
- a database file is the store directory ``<file>.store`` beside it, so
  sessions built on one file share their history, as they do in SQLite;
- an SQLAlchemy engine is one store per engine object.

Table names and engine options name no store of their own: sessions on one
database with other table names are kept apart by their session ids, which
is all the protocol tests rely on.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Optional, Union

from session_store.agents import StoreSession

_scratch = Path(tempfile.mkdtemp(prefix="agents-sdk-port-"))
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
_fresh_ids = itertools.count()
_fresh_lock = threading.Lock()


def fresh_root() -> Path:
    """A store directory no other session uses (an empty in-memory database)."""
    with _fresh_lock:
        n = next(_fresh_ids)
    return _scratch / f"memory-{n}"


def root_for(db_path: Union[str, "os.PathLike[str]"]) -> Path:
    """The store directory standing for a SQLite database path."""
    if os.fspath(db_path) == ":memory:":
        return fresh_root()
    return Path(f"{os.fspath(db_path)}.store")


def root_for_url(url: str) -> Path:
    """The store directory standing for an SQLAlchemy database URL."""
    if "///" not in url or url.endswith(":memory:") or url.endswith("///"):
        return fresh_root()
    return root_for(url.split("///", 1)[1])


_engine_roots: "weakref.WeakKeyDictionary[Any, Path]" = weakref.WeakKeyDictionary()


def root_for_engine(engine: Any) -> Path:
    """One store directory per SQLAlchemy engine object."""
    with _fresh_lock:
        root = _engine_roots.get(engine)
    if root is None:
        root = fresh_root()
        with _fresh_lock:
            root = _engine_roots.setdefault(engine, root)
    return root


class SQLiteSession(StoreSession):
    """``agents.SQLiteSession``'s constructor, a ``StoreSession`` behind it."""

    def __init__(
        self,
        session_id: str,
        db_path: Union[str, "os.PathLike[str]"] = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(session_id, root_for(db_path), session_settings=session_settings)


class AsyncSQLiteSession(StoreSession):
    """``agents.extensions.memory.AsyncSQLiteSession``'s constructor."""

    def __init__(
        self,
        session_id: str,
        db_path: Union[str, "os.PathLike[str]"] = ":memory:",
        session_settings: Any = None,
    ) -> None:
        super().__init__(session_id, root_for(db_path), session_settings=session_settings)


class AdvancedSQLiteSession(StoreSession):
    """``agents.extensions.memory.AdvancedSQLiteSession``'s constructor."""

    def __init__(
        self,
        *,
        session_id: str,
        db_path: Union[str, "os.PathLike[str]"] = ":memory:",
        create_tables: bool = False,
        logger: Any = None,
        session_settings: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(session_id, root_for(db_path), session_settings=session_settings)


class SQLAlchemySession(StoreSession):
    """``agents.extensions.memory.SQLAlchemySession``'s constructors."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Any,
        create_tables: bool = False,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(session_id, root_for_engine(engine), session_settings=session_settings)

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        engine_kwargs: Optional[dict[str, Any]] = None,
        session_settings: Any = None,
        **kwargs: Any,
    ) -> "SQLAlchemySession":
        session = cls.__new__(cls)
        StoreSession.__init__(session, session_id, root_for_url(url), session_settings=session_settings)
        return session
