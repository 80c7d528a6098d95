"""StoreSession against the Agents SDK's SQLiteSession, on the same items in
one run: `add_items` of 1,000 items one call each, and `get_items()` of a
10,000-item session (and its last 10 items).

    python python/bench/bench_sessions.py [--quick]

Both write to files in one temporary directory on the same disk. SQLite
runs as the SDK configures it (WAL; `synchronous` left at its default,
FULL, so each commit is synced); the store runs once with `durability="sync"`
(each commit synced: the like-for-like row) and once with "buffered" (the
store's default: a crash of the process loses nothing, a power loss what
was not yet synced).
"""

from __future__ import annotations

import argparse
import asyncio
import marshal
import statistics
import tempfile
import time
from pathlib import Path

from agents import SQLiteSession

from session_store import Store
from session_store.agents import StoreSession


def items(n: int) -> list[dict]:
    """A run's items in turn: user, reasoning, call, output, assistant."""
    out = []
    for i in range(n):
        k = i % 5
        if k == 0:
            out.append({"role": "user", "content": f"question {i}: what is in src/?"})
        elif k == 1:
            out.append(
                {
                    "id": f"rs_{i}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": f"look at the tree {i}"}],
                    "encrypted_content": "gAAAAB" + "Zm9v" * 100,
                }
            )
        elif k == 2:
            out.append(
                {
                    "id": f"fc_{i}",
                    "type": "function_call",
                    "call_id": f"call_{i}",
                    "name": "shell",
                    "arguments": '{"cmd": "ls src"}',
                    "status": "completed",
                }
            )
        elif k == 3:
            out.append({"type": "function_call_output", "call_id": f"call_{i - 1}", "output": "lib.rs\n" * 20})
        else:
            out.append(
                {
                    "id": f"msg_{i}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": f"src/ holds the crate ({i}).", "annotations": []}],
                }
            )
    return out


async def add_one_by_one(session, batch: list[dict]) -> float:
    start = time.perf_counter()
    for item in batch:
        await session.add_items([item])
    return time.perf_counter() - start


async def timed_get(session, limit) -> float:
    """One `get_items(limit)`, timed; the result is freed outside the clock
    (freeing the previous result is not part of a call, for either
    session)."""
    start = time.perf_counter()
    got = await session.get_items(limit)
    took = time.perf_counter() - start
    assert got
    return took


def floor(result: list) -> float:
    """The least that making `result`'s objects costs here: `marshal.loads`
    of them, CPython's own C deserializer, with no I/O and no checks."""
    blob = marshal.dumps(result)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        got = marshal.loads(blob)
        times.append(time.perf_counter() - start)
        del got
    return statistics.median(times)


async def main(quick: bool) -> None:
    n_add, n_get, reps = (200, 2_000, 5) if quick else (1_000, 10_000, 15)
    add_batch, big = items(n_add), items(n_get)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sessions = {
            "SQLiteSession (WAL, synchronous=FULL)": SQLiteSession("bench", tmp / "bench.db"),
            'StoreSession durability="sync"': StoreSession("bench", Store(tmp / "sync", durability="sync")),
            'StoreSession durability="buffered"': StoreSession("bench", Store(tmp / "buffered")),
        }
        adds = {}
        for label, s in sessions.items():
            adds[label] = await add_one_by_one(s, add_batch)
            await s.clear_session()
            for k in range(0, n_get, 100):
                await s.add_items(big[k : k + 100])
        # The reads are interleaved, a round of every session at a time, so
        # that the machine's load falls on all of them alike.
        get_all = {label: [] for label in sessions}
        get_10 = {label: [] for label in sessions}
        for _ in range(reps):
            for label, s in sessions.items():
                get_all[label].append(await timed_get(s, None))
            for _ in range(10):
                for label, s in sessions.items():
                    get_10[label].append(await timed_get(s, 10))
        rows = [
            (label, adds[label], statistics.median(get_all[label]), statistics.median(get_10[label]))
            for label in sessions
        ]
        base = rows[0]
        print(f"add_items: {n_add} calls of 1 item; get_items(): a {n_get}-item session (median of {reps})")
        print(f"| session | add_items, {n_add} calls | get_items() | get_items(10) |")
        print("|---|---|---|---|")
        for label, add, got_all, got_10 in rows:
            ratio = lambda b, x: "" if (label, add) == base[:2] else f" ({b / x:.1f}x)"  # noqa: E731
            print(
                f"| {label} | {add * 1e3:.1f} ms{ratio(base[1], add)}"
                f" | {got_all * 1e3:.2f} ms{ratio(base[2], got_all)}"
                f" | {got_10 * 1e6:.0f} us{ratio(base[3], got_10)} |"
            )
        least = floor(await sessions['StoreSession durability="buffered"'].get_items())
        print(
            f"bound: making the same {n_get} items' Python objects alone (marshal.loads) takes"
            f" {least * 1e3:.2f} ms, so no get_items() can beat SQLiteSession by more than"
            f" {base[2] / least:.1f}x here; the buffered StoreSession's get_items() takes"
            f" {rows[2][2] / least:.2f}x the bound"
        )
        sessions["SQLiteSession (WAL, synchronous=FULL)"].close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, for CI")
    asyncio.run(main(parser.parse_args().quick))
