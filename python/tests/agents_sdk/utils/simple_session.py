from __future__ import annotations

from typing import cast

from agents.items import TResponseInputItem

from agents_sdk.backends import fresh_root
from session_store.agents import StoreSession


class SimpleListSession(StoreSession):
    """The SDK's minimal in-memory test session, swapped for a ``StoreSession``
    on a store of its own (the port's one change to this file: the SDK's
    version keeps a Python list).

    The SDK's tests use this class for a backend with the ``Session``
    protocol alone, and pin what the SDK does without a backend's atomic
    compaction snapshot (``SQLiteSession`` in the same tests stands for a
    backend with one), so this one hides ``StoreSession``'s.
    """

    _get_compaction_snapshot = None

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        super().__init__(session_id, fresh_root())
        if history:
            self.store.append(self.store.open_named(session_id), list(history))
        # Some session implementations strip IDs on write; tests can opt-in via attribute.
        self._ignore_ids_for_matching = False

    @property
    def _items(self) -> list[TResponseInputItem]:
        """The stored items, read at once, for the tests that look at the
        SDK's version's list (read only here)."""
        session = self.store.find_name(self.session_id)
        return [] if session is None else self.store.items(session)

    @property
    def saved_items(self) -> list[TResponseInputItem]:
        """The stored items, as the SDK's version mirrors its list."""
        return self._items


class CountingSession(SimpleListSession):
    """Session that tracks how many times pop_item is invoked (for rewind tests)."""

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        super().__init__(session_id=session_id, history=history)
        self.pop_calls = 0

    async def pop_item(self) -> TResponseInputItem | None:
        self.pop_calls += 1
        return await super().pop_item()


class IdStrippingSession(CountingSession):
    """Session that strips IDs on add to mimic hosted stores that reassign IDs."""

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        super().__init__(session_id=session_id, history=history)
        self._ignore_ids_for_matching = True

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        sanitized: list[TResponseInputItem] = []
        for item in items:
            if isinstance(item, dict):
                clean = dict(item)
                clean.pop("id", None)
                sanitized.append(cast(TResponseInputItem, clean))
            else:
                sanitized.append(item)
        await super().add_items(sanitized)
