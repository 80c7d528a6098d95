"""StoreSession against the Agents SDK's SQLiteSession, on the same items in
one run: `add_items` of 1,000 items one call each, and `get_items()` of a
10,000-item session (and its last 10 items), beside the least that making
the same objects costs (`marshal.loads`), read in the same rounds.

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
import gc
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


async def timed_get(session, limit) -> tuple[float, float]:
    """One `get_items(limit)`, timed; the result is freed outside the clock
    (freeing the previous result is not part of a call, for either
    session). Also returns the time of a collection of the youngest
    generation right after it, with the result still held: the cyclic
    collector's pass over new objects, which SQLiteSession pays inside its
    call (it builds with the collector running) and StoreSession after it
    (it pauses the collector while it builds)."""
    start = time.perf_counter()
    got = await session.get_items(limit)
    took = time.perf_counter() - start
    start = time.perf_counter()
    gc.collect(0)
    collected = time.perf_counter() - start
    assert got
    return took, collected


class Bound:
    """The least that making a result's objects costs here, read in the
    same rounds as the sessions: `marshal.loads` of the buffered
    StoreSession's result, CPython's own C deserializer, with no I/O and no
    checks; with the cyclic collector running (as SQLiteSession builds) or
    paused (as StoreSession builds)."""

    def __init__(self, results: dict, paused: bool) -> None:
        self.blobs = {limit: marshal.dumps(got) for limit, got in results.items()}
        self.paused = paused

    async def get_items(self, limit=None) -> list:
        pause = self.paused and gc.isenabled()
        if pause:
            gc.disable()
        try:
            return marshal.loads(self.blobs[limit])
        finally:
            if pause:
                gc.enable()


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
        store = sessions['StoreSession durability="buffered"']
        results = {limit: await store.get_items(limit) for limit in (None, 10)}
        bounds = {
            "bound: marshal.loads, collector running": Bound(results, paused=False),
            "bound: marshal.loads, collector paused": Bound(results, paused=True),
        }
        del results
        sessions.update(bounds)
        # The reads are interleaved, a round of every session at a time, so
        # that the machine's load falls on all of them alike, and each round
        # starts one session later, so that each follows each as often (the
        # call that follows SQLiteSession's runs measurably slower).
        get_all = {label: [] for label in sessions}
        get_all_gc = {label: [] for label in sessions}
        get_10 = {label: [] for label in sessions}
        labels = list(sessions)
        for r in range(reps):
            order = labels[r % len(labels) :] + labels[: r % len(labels)]
            for label in order:
                took, collected = await timed_get(sessions[label], None)
                get_all[label].append(took)
                get_all_gc[label].append(took + collected)
            for _ in range(10):
                for label in order:
                    get_10[label].append((await timed_get(sessions[label], 10))[0])
        med = statistics.median
        rows = [
            (label, adds.get(label), med(get_all[label]), med(get_all_gc[label]), med(get_10[label]))
            for label in labels
        ]
        base = rows[0]
        print(f"add_items: {n_add} calls of 1 item; get_items(): a {n_get}-item session (median of {reps})")
        print(
            f"| session | add_items, {n_add} calls | get_items() | get_items(), then gc.collect(0)"
            " | get_items(10) |"
        )
        print("|---|---|---|---|---|")
        for row in rows:
            label = row[0]
            cells = [
                "" if x is None else f"{x * scale:.{digits}f} {unit}" + ("" if row is base else f" ({b / x:.1f}x)")
                for x, b, (scale, digits, unit) in zip(
                    row[1:], base[1:], [(1e3, 1, "ms"), (1e3, 2, "ms"), (1e3, 2, "ms"), (1e6, 0, "us")]
                )
            ]
            print(f"| {label} | " + " | ".join(cells) + " |")
        by_label = {row[0]: row for row in rows}
        ours = by_label['StoreSession durability="buffered"']
        for label in bounds:
            bound = by_label[label]
            print(
                f"{label}: no get_items() can beat SQLiteSession by more than {base[2] / bound[2]:.1f}x"
                f" ({base[3] / bound[3]:.1f}x with the collection) here; the buffered StoreSession"
                f" takes {ours[2] / bound[2]:.2f}x its time ({ours[3] / bound[3]:.2f}x with the collection)"
            )
        sessions["SQLiteSession (WAL, synchronous=FULL)"].close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, for CI")
    asyncio.run(main(parser.parse_args().quick))
