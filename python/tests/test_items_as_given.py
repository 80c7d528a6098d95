"""Any JSON object given as an item comes back equal (`==` of the parsed
values) from Python: through `append` and `items`, through `restore`, and
through `export` then `import_` into another store. Generated with a
seeded `random`, so a failure names the case that can be replayed."""

from __future__ import annotations

import json
import random

from session_store import Store

KEYS = ["type", "role", "content", "id", "status", "phase", "caller", "call_id",
        "name", "arguments", "output", "summary", "text", "x", "namespace"]
TYPES = ["message", "function_call", "function_call_output", "reasoning",
         "custom_tool_call", "input_text", "output_text", "web_search_call", "new_kind"]


def value(rng: random.Random, depth: int):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -7, 2**53, 1.5, -0.25, 10**30])
    if kind in (3, 4):
        return rng.choice(["", "hi", "é\u2028\n\"\\", "x" * 40])
    if kind in (5, 6):
        return obj(rng, depth + 1)
    return [value(rng, depth + 1) for _ in range(rng.randrange(4))]


def obj(rng: random.Random, depth: int = 0) -> dict:
    out = {}
    for _ in range(rng.randrange(6)):
        key = rng.choice(KEYS)
        if key == "type":
            out[key] = rng.choice(TYPES)
        elif key == "role":
            out[key] = rng.choice(["user", "assistant", "system", "developer", "tool"])
        elif key == "content" and rng.random() < 0.5:
            out[key] = rng.choice(["Hello", [{"type": "input_text", "text": "t"}],
                                   [{"type": "output_text", "text": "t", "annotations": []}]])
        else:
            out[key] = value(rng, depth + 1)
    return out


def typed(rng: random.Random) -> dict:
    """An item of a kind the store types, with extra fields now and then."""
    item = rng.choice([
        {"role": "user", "content": "Hello"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]},
        {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA"},
    ])
    item = json.loads(json.dumps(item))
    for _ in range(rng.randrange(3)):
        item[rng.choice(["phase", "caller", "namespace", "async", "x_new"])] = value(rng, 1)
    return item


def test_any_object_comes_back_equal(tmp_path):
    rng = random.Random(20261206)
    store = Store(tmp_path / "a")
    other = Store(tmp_path / "b")
    for case in range(60):
        items = [typed(rng) if rng.random() < 0.6 else obj(rng) for _ in range(1 + rng.randrange(6))]
        sid = store.create_session()
        store.append(sid, items)
        assert store.items(sid) == items, (case, items)
        assert store.restore(sid) == items, (case, items)
        copy = other.import_(store.export(sid))
        assert other.items(copy) == items, (case, items)
    store.close()
    other.close()
