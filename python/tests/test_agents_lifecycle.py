"""`StoreSession`'s life beyond the four protocol calls: `close()` ends one
session object without closing a store other sessions still use, settings
are taken as the SDK's own sessions take them, and the compaction snapshot
replaces a suffix only while nothing else was written."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("agents")

from agents.memory import SessionSettings  # noqa: E402

import session_store  # noqa: E402
from session_store.agents import StoreSession  # noqa: E402


def run(coro):
    return asyncio.run(coro)


def other_process_appends(root, name: str) -> str:
    """Appends to session ``name`` from another process: "ok" or "locked"."""
    child = textwrap.dedent(
        f"""
        import session_store
        store = session_store.Store({str(root)!r})
        try:
            store.append(store.find_name({name!r}), [{{"role": "user", "content": "child"}}])
            print("ok")
        except session_store.Locked:
            print("locked")
        """
    )
    return subprocess.run([sys.executable, "-c", child], check=True, capture_output=True, text=True).stdout.strip()


def test_closing_one_session_keeps_the_shared_store_open_for_the_others(tmp_path):
    root = tmp_path / "store"

    async def scenario():
        first = StoreSession("a", root)
        second = StoreSession("b", root)
        await first.add_items([{"role": "user", "content": "one"}])
        first.close()
        # The store still holds the log open for the session left: it writes,
        # and another process is still locked out.
        await second.add_items([{"role": "user", "content": "two"}])
        assert other_process_appends(root, "a") == "locked"
        await second.close()
        # The last close let go of the logs.
        assert other_process_appends(root, "a") == "ok"
        again = StoreSession("a", root)
        assert [i["content"] for i in await again.get_items()] == ["one", "child"]
        again.close()

    run(scenario())


def test_a_closed_session_refuses_every_call_and_closes_once(tmp_path):
    async def scenario():
        s = StoreSession("s", tmp_path / "store")
        await s.add_items([{"role": "user", "content": "kept"}])
        s.close()
        s.close()
        await s.close()
        calls = [s.get_items(), s.add_items([]), s.add_items([{"role": "user"}]), s.pop_item(), s.clear_session()]
        for call in calls:
            with pytest.raises(RuntimeError, match="StoreSession is closed"):
                await call
        assert len(await StoreSession("s", tmp_path / "store").get_items()) == 1

    run(scenario())


def test_a_store_the_caller_passed_stays_open(tmp_path):
    store = session_store.Store(tmp_path / "store")

    async def scenario():
        s = StoreSession("a", store)
        await s.add_items([{"role": "user", "content": "one"}])
        s.close()

    run(scenario())
    assert other_process_appends(tmp_path / "store", "a") == "locked"
    store.close()
    assert other_process_appends(tmp_path / "store", "a") == "ok"


def test_settings_are_taken_as_the_sdk_takes_them(tmp_path):
    s = StoreSession("s", tmp_path / "store", session_settings={"limit": 2})
    assert isinstance(s.session_settings, SessionSettings) and s.session_settings.limit == 2
    assert isinstance(StoreSession("t", tmp_path / "store").session_settings, SessionSettings)
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        StoreSession("u", tmp_path / "store", session_settings={"limitt": 1})

    async def scenario():
        await s.add_items([{"role": "user", "content": str(i)} for i in range(5)])
        return await s.get_items()

    assert [i["content"] for i in run(scenario())] == ["3", "4"]


def items(*texts: str) -> list[dict]:
    return [{"role": "user", "content": t} for t in texts]


def test_compaction_snapshot_replaces_only_its_suffix(tmp_path):
    async def scenario():
        s = StoreSession("s", tmp_path / "store")
        await s.add_items(items("old", "a", "b"))
        snapshot = await s._get_compaction_snapshot(2)
        assert snapshot.items == items("a", "b") and not snapshot.complete
        summary = [{"type": "compaction", "id": "cmp", "encrypted_content": "x"}]
        assert await snapshot.replace_suffix(1, summary)
        return await s.get_items()

    assert run(scenario()) == items("old", "a") + [{"type": "compaction", "id": "cmp", "encrypted_content": "x"}]


def test_compaction_snapshot_gives_up_after_another_write(tmp_path):
    async def scenario():
        s = StoreSession("s", tmp_path / "store")
        other = StoreSession("s", tmp_path / "store")
        await s.add_items(items("a", "b"))
        snapshot = await s._get_compaction_snapshot(10)
        assert snapshot.complete
        await other.add_items(items("newer"))
        assert not await snapshot.replace_suffix(0, items("summary"))
        return await s.get_items()

    assert run(scenario()) == items("a", "b", "newer")


def test_compaction_snapshot_prunes_only_a_leading_prefix(tmp_path):
    # As EncryptedSession asks: expired items before the kept part go too,
    # up to the first one that has not expired.
    def expired(item):
        return item["content"] == "expired"

    async def scenario():
        s = StoreSession("s", tmp_path / "store")
        await s.add_items(items("expired", "expired", "live", "expired", "a"))
        snapshot = await s._get_compaction_snapshot(1, prune_prefix=expired)
        assert await snapshot.replace_suffix(0, items("summary"))
        return await s.get_items()

    assert run(scenario()) == items("live", "expired", "summary")
