"""`StoreSession` behaves as the Agents SDK's own `SQLiteSession`: the
same operations give the same items (JSON-equal to what was given), the
SDK's `Runner` drives it over several turns, it persists across processes,
and concurrent sessions neither lose nor mix items."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, SQLiteSession, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory.session import SessionABC  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402

import session_store  # noqa: E402
from session_store.agents import StoreSession  # noqa: E402

from conftest import sdk_items  # noqa: E402


def run(coro):
    return asyncio.run(coro)


def test_is_an_sdk_session(tmp_path):
    assert isinstance(StoreSession("s", tmp_path), SessionABC)


def test_protocol_matches_sqlite_session(tmp_path):
    async def scenario():
        ours = StoreSession("user_123", tmp_path / "store")
        theirs = SQLiteSession("user_123", tmp_path / "sqlite.db")

        async def same(limit=None):
            got = await ours.get_items(limit)
            want = await theirs.get_items(limit)
            assert got == want, (limit, got, want)
            return got

        assert await same() == []
        assert await ours.pop_item() is None and await theirs.pop_item() is None
        await ours.clear_session()
        await theirs.clear_session()
        for session in (ours, theirs):
            await session.add_items(sdk_items()[:4])
            await session.add_items([])
            await session.add_items(sdk_items()[4:])
        for limit in (None, 1, 3, len(sdk_items()), 100, 0, -1):
            await same(limit)
        for _ in range(3):
            popped = await ours.pop_item()
            assert popped == await theirs.pop_item()
        await same()
        await same(2)
        await ours.clear_session()
        await theirs.clear_session()
        assert await same() == []
        assert await ours.pop_item() is None and await theirs.pop_item() is None
        for session in (ours, theirs):
            await session.add_items([{"role": "user", "content": "after clear"}])
        assert len(await same()) == 1
        theirs.close()

    run(scenario())


def test_session_settings_limit(tmp_path):
    from agents.memory import SessionSettings

    async def scenario():
        s = StoreSession("s", tmp_path, session_settings=SessionSettings(limit=2))
        await s.add_items(sdk_items())
        assert await s.get_items() == sdk_items()[-2:]
        assert len(await s.get_items(5)) == 5

    run(scenario())


class ScriptedModel(Model):
    """Returns scripted outputs in turn and records every input it was sent."""

    def __init__(self, outputs: list[list[Any]]):
        self.outputs = list(outputs)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, *args, **kwargs):
        self.inputs.append(json.loads(json.dumps(input)) if isinstance(input, list) else input)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    async def stream_response(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError
        yield


def message(i: int, text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{i}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def script() -> list[list[Any]]:
    return [
        [
            ResponseReasoningItem(
                id="rs_1",
                type="reasoning",
                summary=[Summary(text="Look it up.", type="summary_text")],
                encrypted_content="gAAAAB==",
            ),
            ResponseFunctionToolCall(
                id="fc_1",
                call_id="call_1",
                name="get_weather",
                arguments='{"city": "Paris"}',
                type="function_call",
                status="completed",
            ),
        ],
        [message(1, "It is sunny in Paris.")],
        [message(2, "You asked about Paris.")],
        [message(3, "Goodbye.")],
    ]


async def drive(session) -> tuple[ScriptedModel, list[str]]:
    model = ScriptedModel(script())
    agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])
    finals = []
    for prompt in ("Weather in Paris?", "What did I ask?", "Bye."):
        result = await Runner.run(agent, prompt, session=session)
        finals.append(result.final_output)
    return model, finals


def test_runner_drives_several_turns(tmp_path):
    async def scenario():
        ours = StoreSession("chat", tmp_path / "store")
        theirs = SQLiteSession("chat", tmp_path / "sqlite.db")
        model, finals = await drive(ours)
        sqlite_model, sqlite_finals = await drive(theirs)
        assert finals == sqlite_finals == [
            "It is sunny in Paris.",
            "You asked about Paris.",
            "Goodbye.",
        ]
        history = await ours.get_items()
        assert history == await theirs.get_items()
        types = [i.get("type", "message") for i in history]
        assert types == [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
            "message",
            "message",
            "message",
            "message",
            "message",
        ]
        assert history[3]["output"] == "sunny in Paris"
        # Each turn's model call saw the turns before it, from the session.
        assert len(model.inputs) == 4
        last = model.inputs[-1]
        assert [i.get("role") for i in last if i.get("type", "message") == "message"][-1] == "user"
        assert last == sqlite_model.inputs[-1] and len(last) == 8
        theirs.close()

    run(scenario())


def test_persists_across_processes(tmp_path):
    root = tmp_path / "store"
    writer = textwrap.dedent(
        f"""
        import asyncio
        from session_store.agents import StoreSession
        async def main():
            s = StoreSession("user_9", {str(root)!r})
            await s.add_items([{{"role": "user", "content": "remember me"}}])
            await s.add_items([{{"role": "assistant", "content": "I will"}}, {{"role": "user", "content": "x"}}])
            await s.pop_item()
        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True)

    async def read():
        s = StoreSession("user_9", root)
        items = await s.get_items()
        await s.add_items([{"role": "user", "content": "back again"}])
        return items, await s.get_items(1)

    items, last = run(read())
    assert [i["content"] for i in items] == ["remember me", "I will"]
    assert last[0]["content"] == "back again"


@pytest.mark.parametrize("offload", [False, True])
def test_concurrent_sessions(tmp_path, offload):
    root = tmp_path / "store"

    async def scenario():
        async def writer(name: str, n: int):
            s = StoreSession(name, root, offload=offload)
            for i in range(n):
                await s.add_items([{"role": "user", "content": f"{name}:{i}"}])
                if i % 10 == 9:
                    assert (await s.get_items(1))[0]["content"] == f"{name}:{i}"

        # Many sessions at once, and several tasks (own objects) on one.
        await asyncio.gather(*(writer(f"user_{k}", 30) for k in range(12)))
        shared = [StoreSession("shared", root, offload=offload) for _ in range(4)]

        async def on_shared(k: int):
            for i in range(25):
                await shared[k].add_items([{"role": "user", "content": f"{k}.{i}"}])

        await asyncio.gather(*(on_shared(k) for k in range(4)))
        pops = await asyncio.gather(*(s.pop_item() for s in shared))
        return pops

    pops = run(scenario())
    store = session_store.agents.shared_store(root)
    for k in range(12):
        sid = store.find_name(f"user_{k}")
        assert [i["content"] for i in store.items(sid)] == [f"user_{k}:{i}" for i in range(30)]
    left = [i["content"] for i in store.items(store.find_name("shared"))]
    assert len(left) == 96 and len({json.dumps(p) for p in pops}) == 4
    for k in range(4):
        mine = [int(t.split(".")[1]) for t in left if t.startswith(f"{k}.")]
        assert mine == sorted(mine)
    assert len(store.list()) == 13


@pytest.mark.parametrize(
    "durability, offload, writes_offloaded, reads_offloaded",
    [
        ("sync", None, True, False),
        ("buffered", None, False, False),
        ("buffered", True, True, True),
        ("sync", False, False, False),
    ],
)
def test_which_calls_go_to_a_worker_thread(
    tmp_path, monkeypatch, durability, offload, writes_offloaded, reads_offloaded
):
    # A sync store's writes wait for the disk and leave the loop's thread;
    # reads wait for no sync and stay, unless `offload=True`.
    sent = []
    real = asyncio.to_thread

    async def counting(call, *args, **kwargs):
        sent.append(call)
        return await real(call, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    store = session_store.Store(tmp_path / "store", durability=durability)
    s = StoreSession("threads", store, offload=offload)

    async def scenario():
        await s.add_items([{"role": "user", "content": "hi"}])
        writes = len(sent)
        items = await s.get_items()
        return writes, len(sent) - writes, items

    writes, reads, items = run(scenario())
    assert items[0]["content"] == "hi"
    assert (writes == 1) == writes_offloaded
    assert (reads == 1) == reads_offloaded


def test_clear_session_starts_the_title_over(tmp_path):
    """After `clear_session`, the listing's title is the next question,
    not the first one the session ever had."""

    async def go():
        s = StoreSession("user_1", tmp_path)
        await s.add_items([{"role": "user", "content": "old question"}])
        await s.clear_session()
        await s.add_items([{"role": "user", "content": "new question"}])
        return s

    s = run(go())
    [listed] = s.store.list()
    assert listed["title"] == "new question"
    assert listed["name"] == "user_1"
