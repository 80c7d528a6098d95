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


async def best_get(session, limit, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        got = await session.get_items(limit)
        times.append(time.perf_counter() - start)
    assert got
    return statistics.median(times)


async def main(quick: bool) -> None:
    n_add, n_get, reps = (200, 2_000, 3) if quick else (1_000, 10_000, 15)
    add_batch, big = items(n_add), items(n_get)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sessions = {
            "SQLiteSession (WAL, synchronous=FULL)": SQLiteSession("bench", tmp / "bench.db"),
            'StoreSession durability="sync"': StoreSession("bench", Store(tmp / "sync", durability="sync")),
            'StoreSession durability="buffered"': StoreSession("bench", Store(tmp / "buffered")),
        }
        rows = []
        for label, s in sessions.items():
            add = await add_one_by_one(s, add_batch)
            await s.clear_session()
            for k in range(0, n_get, 100):
                await s.add_items(big[k : k + 100])
            get_all = await best_get(s, None, reps)
            get_10 = await best_get(s, 10, reps * 10)
            rows.append((label, add, get_all, get_10))
        base = rows[0]
        print(f"add_items: {n_add} calls of 1 item; get_items(): a {n_get}-item session (median of {reps})")
        print(f"| session | add_items, {n_add} calls | get_items() | get_items(10) |")
        print("|---|---|---|---|")
        for label, add, get_all, get_10 in rows:
            ratio = lambda b, x: "" if (label, add) == base[:2] else f" ({b / x:.1f}x)"  # noqa: E731
            print(
                f"| {label} | {add * 1e3:.1f} ms{ratio(base[1], add)}"
                f" | {get_all * 1e3:.2f} ms{ratio(base[2], get_all)}"
                f" | {get_10 * 1e6:.0f} us{ratio(base[3], get_10)} |"
            )
        sessions["SQLiteSession (WAL, synchronous=FULL)"].close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, for CI")
    asyncio.run(main(parser.parse_args().quick))
