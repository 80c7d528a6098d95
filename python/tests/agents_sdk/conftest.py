"""Fixtures of the Agents SDK's own test suite (its ``tests/conftest.py``,
openai-agents 0.24.0, MIT licence, see LICENSE here) that its session tests
rely on, and the hook that skips the tests each ported module lists in its
``EXCLUDED`` dict, with the reason given there."""

from __future__ import annotations

import os

import pytest
from agents.models import _openai_shared
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from agents.run import set_default_agent_runner


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules = {}
    for item in items:
        module = getattr(item, "module", None)
        excluded = getattr(module, "EXCLUDED", None)
        if not excluded:
            continue
        modules[module.__name__] = (module, excluded)
        reason = excluded.get(getattr(item, "originalname", item.name))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"excluded: {reason}"))
    # A name that matches no test would hide a test that is no longer excluded.
    for name, (module, excluded) in modules.items():
        tests = _test_names(module)
        unknown = sorted(set(excluded) - tests)
        if unknown:
            raise pytest.UsageError(f"{name}: EXCLUDED names no test: {', '.join(unknown)}")


def _test_names(module: object) -> set[str]:
    """The test functions of ``module``, and the test methods of its classes."""
    names = set()
    for name, value in vars(module).items():
        if name.startswith("test_") and callable(value):
            names.add(name)
        elif name.startswith("Test") and isinstance(value, type):
            names.update(n for n in vars(value) if n.startswith("test_"))
    return names


# Clients are built without a key in some tests; the SDK's suite sets one.
@pytest.fixture(scope="session", autouse=True)
def ensure_openai_api_key():
    if not os.environ.get("OPENAI_API_KEY"):
        os.environ["OPENAI_API_KEY"] = "test_key"


@pytest.fixture(autouse=True)
def clear_openai_settings():
    _openai_shared._default_openai_key = None
    _openai_shared._default_openai_client = None
    _openai_shared._use_responses_by_default = True
    _openai_shared.set_default_openai_responses_transport("http")


@pytest.fixture(autouse=True)
def clear_default_runner():
    set_default_agent_runner(None)


@pytest.fixture(autouse=True)
def disable_real_model_clients(monkeypatch, request):
    # A test marked so calls a real model class, with its transport mocked.
    if request.node.get_closest_marker("allow_call_model_methods"):
        return

    def failing_version(*args, **kwargs):
        pytest.fail("Real models should not be used in tests!")

    monkeypatch.setattr(OpenAIResponsesModel, "get_response", failing_version)
    monkeypatch.setattr(OpenAIResponsesModel, "stream_response", failing_version)
    monkeypatch.setattr(OpenAIChatCompletionsModel, "get_response", failing_version)
    monkeypatch.setattr(OpenAIChatCompletionsModel, "stream_response", failing_version)
