"""OpenAI's Responses `mcp` tool on the real engine, through the official openai client: a server's tools
listed, a call run and fed back (whole and streamed, OpenAI's item and event shapes), a call that waits for the
user's approval and runs (or is refused) when a follow-up answers it, a tool's failure as an `mcp_call` error,
the user's own server by label alone (mcp.json), a server that cannot be reached as a 424; and Anthropic's MCP
connector through the official anthropic client (mcp_tool_use and mcp_tool_result blocks, whole and streamed)."""

from __future__ import annotations

import json
from typing import Iterator

import openai
import pytest
from mcp_fixtures import MODEL, stdio_spec

from localchat.mcp_host import limits
from localchat.mcp_host.servers import save

ASK = "Use the echo tool to repeat the word pineapple."


@pytest.fixture()
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(autouse=True)
def two_steps() -> Iterator[None]:
    """Two model turns per response: the forced call and the answer after it (a small model may call again)."""
    kept = limits.LIMITS.steps
    limits.LIMITS.steps = 2
    yield
    limits.LIMITS.steps = kept


def _fixture(http_fixture: str, **extra) -> dict:
    return {"type": "mcp", "server_label": "fixture", "server_url": http_fixture, "allowed_tools": ["echo", "fail"],
            **extra}


def _named(name: str) -> dict:
    return {"type": "mcp", "server_label": "fixture", "name": name}


def test_a_call_is_listed_run_and_fed_back(client: openai.OpenAI, http_fixture: str):
    response = client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=48, parallel_tool_calls=False,
                                       tools=[_fixture(http_fixture, require_approval="never")],
                                       tool_choice=_named("echo"))
    assert len(response.output) >= 2, response.model_dump_json()
    listed, call = response.output[:2]
    assert listed.type == "mcp_list_tools" and listed.server_label == "fixture"
    assert {t.name for t in listed.tools} == {"echo", "fail"}  # allowed_tools
    assert call.type == "mcp_call" and call.name == "echo" and call.error is None
    assert call.output == "echo: " + json.loads(call.arguments)["text"]
    assert response.status == "completed" and response.usage.output_tokens > 0
    kinds = [item.type for item in response.output]
    assert kinds[-1] in ("message", "mcp_call") and "function_call" not in kinds


def test_a_call_streams_as_openais_mcp_events(client: openai.OpenAI, http_fixture: str):
    events = list(client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=48, stream=True,
                                          parallel_tool_calls=False,
                                          tools=[_fixture(http_fixture, require_approval="never")],
                                          tool_choice=_named("echo")))
    kinds = [e.type for e in events]
    for kind in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                 "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
                 "response.mcp_call.in_progress", "response.mcp_call.completed"):
        assert kind in kinds, kind
    assert kinds.index("response.mcp_list_tools.completed") < kinds.index("response.mcp_call.in_progress") \
        < kinds.index("response.mcp_call.completed")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    call = next(item for item in done.output if item.type == "mcp_call")
    assert call.output.startswith("echo: ") and kinds[-1] == "response.completed"


def test_a_call_waits_for_approval_and_runs_once_approved(client: openai.OpenAI, http_fixture: str):
    tools = [_fixture(http_fixture)]  # require_approval: OpenAI's default, always
    first = client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=48, tools=tools,
                                    parallel_tool_calls=False,
                                    tool_choice=_named("echo"))
    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert request.name == "echo" and request.server_label == "fixture" and "text" in json.loads(request.arguments)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, temperature=0,
                                     max_output_tokens=32,
                                     input=[{"type": "mcp_approval_response", "approval_request_id": request.id,
                                             "approve": True}])
    ran = [item for item in second.output if item.type == "mcp_call"]
    assert ran[0].approval_request_id == request.id and ran[0].output.startswith("echo: ")


def test_a_denied_call_does_not_run_and_the_model_goes_on(client: openai.OpenAI, http_fixture: str):
    tools = [_fixture(http_fixture)]
    first = client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=48, tools=tools,
                                    parallel_tool_calls=False,
                                    tool_choice=_named("echo"))
    request = first.output[1]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, temperature=0,
                                     max_output_tokens=32, tool_choice="none",
                                     input=[{"type": "mcp_approval_response", "approval_request_id": request.id,
                                             "approve": False}])
    assert not [item for item in second.output if item.type == "mcp_call"]
    assert second.output[-1].type == "message" and second.status == "completed"
    with pytest.raises(openai.BadRequestError, match="no approval request"):
        client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools,
                                input=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_nope",
                                        "approve": True}])


def test_a_failing_tool_is_an_mcp_call_error_not_a_server_error(client: openai.OpenAI, http_fixture: str):
    response = client.responses.create(model=MODEL, input="Call the fail tool.", temperature=0, max_output_tokens=32,
                                       parallel_tool_calls=False,
                                       tools=[_fixture(http_fixture, require_approval="never")],
                                       tool_choice=_named("fail"))
    call = response.output[1]
    assert call.type == "mcp_call" and call.output is None and "failed on purpose" in call.error


def test_the_users_own_server_by_label_alone(client: openai.OpenAI, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    spec = stdio_spec("mine")
    save([spec])
    response = client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=48, parallel_tool_calls=False,
                                       tools=[{"type": "mcp", "server_label": "mine", "require_approval": "never",
                                               "allowed_tools": ["echo"]}],
                                       tool_choice={"type": "mcp", "server_label": "mine", "name": "echo"})
    assert response.output[1].type == "mcp_call" and response.output[1].output.startswith("echo: ")


def test_a_server_that_cannot_be_reached_is_a_424_naming_it(client: openai.OpenAI, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(model=MODEL, input=ASK, tools=[{"type": "mcp", "server_label": "gone",
                                                                 "server_url": "http://127.0.0.1:9/mcp"}])
    assert caught.value.status_code == 424 and "MCP server 'gone'" in caught.value.message
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(model=MODEL, input=ASK, tools=[{"type": "mcp", "server_label": "unknown"}])
    assert caught.value.status_code == 424 and "not in mcp.json" in caught.value.message


def test_anthropics_mcp_connector_runs_the_servers_tools(url: str, http_fixture: str):
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    asked = dict(model=MODEL, max_tokens=48, extra_body={"temperature": 0}, messages=[{"role": "user", "content": ASK}],
                 mcp_servers=[{"type": "url", "url": http_fixture, "name": "fixture"}],
                 tools=[{"type": "mcp_toolset", "mcp_server_name": "fixture", "default_config": {"enabled": False},
                         "configs": {"echo": {"enabled": True}}}],
                 tool_choice={"type": "any", "disable_parallel_tool_use": True}, betas=["mcp-client-2025-11-20"])
    message = client.beta.messages.create(**asked)
    use, result = message.content[:2]
    assert use.type == "mcp_tool_use" and use.name == "echo" and use.server_name == "fixture"
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id and not result.is_error
    assert result.content[0].text == "echo: " + use.input["text"]
    with client.beta.messages.stream(**asked) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content][:2] == ["mcp_tool_use", "mcp_tool_result"]
    assert streamed.content[1].content[0].text == result.content[0].text
