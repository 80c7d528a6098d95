"""The OpenAI Agents SDK's own session tests, run against ``StoreSession``.

Ported from the source distribution of openai-agents 0.24.0 (the version
.ci/run pins), whose tests/ these files keep the layout and names of:
Copyright (c) 2025 OpenAI, MIT licence, in LICENSE beside this file.

The port changes the SDK's files in these ways only:

- imports of the SDK suite's helpers say ``agents_sdk.`` for ``tests.``;
- each backend a test builds is a ``StoreSession``: ``SQLiteSession``,
  ``AsyncSQLiteSession``, ``SQLAlchemySession`` and ``AdvancedSQLiteSession``
  are imported from backends.py, whose classes keep the SDK constructors
  (and class names) and build a ``StoreSession``; the suite's in-memory
  ``SimpleListSession`` (utils/simple_session.py) is a ``StoreSession`` on a
  store of its own, and says there why it hides the compaction snapshot;
- a test that reaches into what only its original backend has (SQLite
  connections, tables and triggers, aiosqlite, SQLAlchemy engines,
  AdvancedSQLiteSession's branch, turn and usage API, a Redis server) is
  named, with the reason, in its module's ``EXCLUDED`` dict, and conftest.py
  skips it with that reason.

conftest.py also carries the fixtures of the SDK's own conftest that these
tests rely on (a test API key, reset defaults, no real model calls).

Not ported, each being about another backend or a server: the SDK's
tests/memory/test_sqlalchemy_compaction.py (SQLAlchemy transactions),
tests/extensions/memory/test_redis_session.py, test_mongodb_session.py and
test_dapr_session.py (their servers and clients),
tests/memory/test_openai_conversations_session.py (the server-side
Conversations API), tests/extensions/memory/test_memory_imports.py (the SDK's
optional imports), and test_session_context_wrapper.py and
test_session_persistence_sanitize.py (custom in-test sessions, no backend).
"""
