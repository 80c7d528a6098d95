"""The `Store` class: every call, and an exception of the right kind for
bad input, never a crash."""

from __future__ import annotations

import gc
import threading

import pytest

import session_store
from session_store import Store

from conftest import sdk_items


def test_append_restore_round_trip(store):
    sid = store.create_session(system_prompt="Be brief.", model="gpt-5")
    head = store.head(sid)
    new = store.append(sid, sdk_items(), head=head)
    assert new != head and store.head(sid) == new
    assert store.restore(sid) == sdk_items()
    assert store.items(sid, 2) == sdk_items()[-2:]
    assert store.len(sid) == len(sdk_items())


def test_items_read_as_given_or_for_resend(store):
    assert session_store.normalize(sdk_items()) == sdk_items()
    [msg] = session_store.normalize([sdk_items()[-2]], form="resend")
    assert "id" not in msg and "status" not in msg
    # What the store does not type is kept as given, in either form.
    odd = [{"type": "function_call", "name": 3}, {"__enc__": 1, "payload": "x"}]
    sid = store.create_session(items=odd)
    assert store.restore(sid) == odd == store.restore(sid, form="resend")
    with pytest.raises(session_store.InvalidInput):
        store.restore(sid, form="bare")


def test_stale_head_is_head_mismatch_and_writes_nothing(store):
    sid = store.create_session()
    old = store.head(sid)
    current = store.append(sid, [{"role": "user", "content": "a"}], head=old)
    with pytest.raises(session_store.HeadMismatch) as e:
        store.append(sid, [{"role": "user", "content": "b"}], head=old)
    assert e.value.session == sid
    assert e.value.expected == old and e.value.actual == current
    assert isinstance(e.value, session_store.SessionStoreError)
    assert len(store.restore(sid)) == 1


def test_pop_compact_fork(store):
    sid = store.create_session(items=[{"role": "user", "content": "a"}])
    store.append(sid, [{"role": "user", "content": "b"}])
    at = store.head(sid)
    assert store.pop(sid)["content"] == "b"
    fork = store.fork(sid, at)
    assert [i["content"] for i in store.restore(fork)] == ["a", "b"]
    store.compact(sid, [{"role": "user", "content": "summary"}])
    assert [i["content"] for i in store.restore(sid)] == ["summary"]
    store.compact(sid, [])
    assert store.restore(sid) == [] and store.pop(sid) is None
    # Everything stays in the log.
    assert store.verify(sid)["ok"] and store.verify(sid)["records"] == 5


def test_export_import_and_list(store):
    sid = store.create_session(items=sdk_items())
    store.pop(sid)
    text = store.export(sid)
    assert text.count("\n") == 2 and '"kind":"items_removed"' in text
    copy = store.import_(text)
    assert store.restore(copy) == store.restore(sid)
    listed = {s["id"]: s for s in store.list()}
    assert set(listed) == {sid, copy}
    assert listed[sid]["title"] == "What is the weather in Paris?"
    with pytest.raises(session_store.Wire):
        store.import_("{not json\n")


def test_names(store):
    sid = store.create_session(name="user_123")
    assert store.find_name("user_123") == sid
    assert store.find_name("nobody") is None
    assert store.open_named("user_123") == sid
    with pytest.raises(session_store.InvalidInput):
        store.create_session(name="user_123")
    other = store.open_named("a name / with .. odd \n text ✓")
    assert other != sid and store.find_name("a name / with .. odd \n text ✓") == other


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.restore("not-a-uuid"),
        lambda s: s.head("../../etc"),
        lambda s: s.append("0" * 36, []),
        lambda s: s.find_name(""),
        lambda s: s.append(s.create_session(), "not a list"),
        lambda s: s.append(s.create_session(), [object()]),
        lambda s: s.append(s.create_session(), [{"role": "user", "content": "x"}], head="zz"),
        lambda s: s.fork(s.create_session(), "ab" * 32),
        lambda s: Store(s.path, durability="sometimes"),
    ],
)
def test_bad_input_raises_never_crashes(store, call):
    with pytest.raises((session_store.SessionStoreError, TypeError, ValueError)):
        call(store)


def test_unknown_session_is_not_found(store):
    with pytest.raises(session_store.NotFound):
        store.restore("01890a5d-ac96-774b-bcce-b302099a8057")


def test_second_store_on_one_directory_is_locked(store, tmp_path):
    sid = store.create_session()
    store.append(sid, [{"role": "user", "content": "x"}])
    other = Store(tmp_path / "store")
    with pytest.raises(session_store.Locked):
        other.append(sid, [{"role": "user", "content": "y"}])
    # Reading needs no lock.
    assert len(other.restore(sid)) == 1


def test_read_only_store_refuses_writes(store, tmp_path):
    sid = store.create_session()
    ro = Store(tmp_path / "store", read_only=True)
    assert ro.restore(sid) == []
    with pytest.raises(session_store.InvalidInput):
        ro.create_session()


def test_threads_append_without_losing_items(store):
    sid = store.create_session()

    def work(t):
        for i in range(50):
            store.append(sid, [{"role": "user", "content": f"{t}.{i}"}])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    texts = [i["content"] for i in store.restore(sid)]
    assert len(texts) == 200
    for t in range(4):
        mine = [x for x in texts if x.startswith(f"{t}.")]
        assert mine == [f"{t}.{i}" for i in range(50)]


def test_a_damaged_record_raises_corrupt_and_builds_nothing(store, tmp_path):
    sid = store.create_session()
    for i in range(20):
        store.append(sid, [{"role": "user", "content": f"item {i:02}"}])
    store.close()
    [seg] = (tmp_path / "store" / "sessions" / sid).glob("*.seg")
    data = bytearray(seg.read_bytes())
    at = data.index(b"item 09")
    data[at + 5] ^= 0x01
    seg.write_bytes(bytes(data))
    ro = Store(tmp_path / "store", read_only=True)
    # A tail that stops short of the damage is read; one that reaches it
    # raises, naming the place, with the collector running again after.
    assert ro.items(sid, 10) == [
        {"role": "user", "content": f"item {i:02}"}
        for i in range(10, 20)
    ]
    for read in (lambda: ro.items(sid), lambda: ro.items(sid, 11), lambda: ro.restore(sid)):
        with pytest.raises(session_store.Corrupt, match="seq"):
            read()
    assert gc.isenabled()


def test_items_build_with_the_collector_paused_and_resume_it(store):
    sid = store.create_session(items=sdk_items())
    assert gc.isenabled()
    assert store.items(sid) == sdk_items()
    assert gc.isenabled()
    gc.disable()
    try:
        store.items(sid)
        # Left paused by the caller: not turned on behind its back.
        assert not gc.isenabled()
    finally:
        gc.enable()
