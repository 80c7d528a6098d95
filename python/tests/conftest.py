"""Shared helpers: items of every type the Agents SDK produces, and a
scripted model that stands in for the network."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

import session_store

# No network: the SDK would try to export traces.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.fixture
def store(tmp_path):
    s = session_store.Store(tmp_path / "store")
    yield s
    s.close()


def sdk_items() -> list[dict[str, Any]]:
    """One of each item type a run of the SDK stores, as the SDK writes
    them (ids, statuses, string content)."""
    return copy.deepcopy(
        [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "message", "role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Look it up."}],
                "encrypted_content": "gAAAAB+/==",
            },
            {
                "id": "fc_1",
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
            {
                "id": "ws_1",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": "paris weather"},
            },
            {
                "id": "ctc_1",
                "type": "custom_tool_call",
                "call_id": "call_2",
                "name": "patch",
                "input": "*** Begin Patch",
            },
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "ok"},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Sunny, 21 C.", "annotations": []}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "And this?"},
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                ],
            },
        ]
    )
