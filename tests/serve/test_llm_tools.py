"""Tool calling through the `openai` client on the character-level tiny Llama (tests/serve/chars_server.py,
--tool-call-parser hermes): a named or required tool_choice constrains the text to the functions' schemas
(validated with jsonschema) and comes back as tool_calls with ids and finish_reason "tool_calls"; the
template receives the tools and a follow-up turn's calls and results (prompt_tokens counts its rendering);
"auto" reads the model's own <tool_call> text; bad tool requests get a 400, followed by a good request."""

import json

import jsonschema
import openai
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from openai import OpenAI

from paddle_xla.serve.llm import tools as T
from paddle_xla.serve.request_errors import RequestError

from .chars_server import MODEL, TEMPLATE

WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 4}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "clock", "parameters": TIME}},
]
SCHEMAS = {"weather": WEATHER, "clock": TIME}
ASK = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def client(chars_server):
    return OpenAI(base_url=f"http://{chars_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _rendered(messages, tools) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(TEMPLATE).render(messages=messages, tools=tools, add_generation_prompt=True)


def test_a_named_tool_call_follows_its_schema(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "weather"}},
        max_tokens=60,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    # NOTE: one character a token: the template's rendering with the tools' names is the prompt
    assert r.usage.prompt_tokens == len(_rendered(ASK, TOOLS))


@pytest.mark.parametrize("parallel", [True, False])
def test_required_makes_calls_of_declared_tools(client, parallel):
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=parallel,
        max_tokens=150,
        temperature=0.8,
        seed=1,
    )
    choice = r.choices[0]
    if parallel and choice.finish_reason == "length":
        # NOTE: random weights may go on adding calls (the array has no bound) until max_tokens: several began
        assert choice.message.tool_calls is None and choice.message.content.count('{"name":') >= 2
        return
    assert choice.finish_reason == "tool_calls", choice.message
    calls = choice.message.tool_calls
    assert calls and (parallel or len(calls) == 1)
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_a_streamed_named_call_arrives_as_tool_call_deltas(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "clock"}},
        max_tokens=40,
        stream=True,
    )
    arguments, names, finish = "", [], None
    for chunk in stream:
        for c in chunk.choices:
            for call in c.delta.tool_calls or []:
                names += [call.function.name] if call.function.name else []
                arguments += call.function.arguments or ""
            finish = c.finish_reason or finish
    assert names == ["clock"] and finish == "tool_calls"
    jsonschema.validate(json.loads(arguments), TIME)


def test_a_follow_up_turn_with_calls_and_results_reaches_the_template(client):
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=3)
    # NOTE: the template receives the arguments as an object, as vLLM passes them
    template_messages = [
        ASK[0],
        {
            **messages[1],
            "tool_calls": [
                {**messages[1]["tool_calls"][0], "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
            ],
        },
        messages[2],
    ]
    assert r.usage.prompt_tokens == len(_rendered(template_messages, TOOLS))
    assert r.choices[0].message.tool_calls is None


def test_auto_reads_the_models_own_hermes_calls(client):
    """The model's text is steered (guided_regex) to what a Hermes-trained model writes: text, then a call."""
    said = 'Sure. <tool_call>{"name": "weather", "arguments": {"city": "Oslo", "days": 2}}</tool_call>'
    pattern = said.replace("{", "\\{").replace("}", "\\}").replace(".", "\\.")
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=100, extra_body={"guided_regex": pattern}
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
    (call,) = choice.message.tool_calls
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "Oslo", "days": 2}
    plain = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=20, extra_body={"guided_regex": "no tools here"}
    )
    assert plain.choices[0].message.content == "no tools here" and plain.choices[0].message.tool_calls is None
    assert plain.choices[0].finish_reason == "stop"


def test_a_streamed_auto_reply_sends_its_text_then_its_calls(client):
    said = 'Sure. <tool_call>{"name": "clock", "arguments": {"zone": "UTC"}}</tool_call>'
    pattern = said.replace("{", "\\{").replace("}", "\\}").replace(".", "\\.")
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=100, stream=True, extra_body={"guided_regex": pattern}
    )
    contents, calls, finish = [], [], None
    for chunk in stream:
        for c in chunk.choices:
            contents += [c.delta.content] if c.delta.content else []
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    # NOTE: one character a token: the text before the tag goes out piece by piece, the call once whole
    assert "".join(contents) == "Sure. " and len(contents) > 1
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("clock", {"zone": "UTC"})]
    assert finish == "tool_calls"


def test_the_llama3_json_parser():
    tools = T.Tools(tuple(TOOLS), "auto")
    content, calls = T.replied(
        tools,
        '<|python_tag|>{"name": "clock", "parameters": {"zone": "UTC"}}; {"name": "weather", "parameters": {}}',
        "llama3_json",
    )
    assert content is None and [c["function"]["name"] for c in calls] == ["clock", "weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"zone": "UTC"}
    assert T.replied(tools, "It is noon.", "llama3_json") == ("It is noon.", [])
    assert T.replied(tools, '{"name": "clock", "parameters": ', "llama3_json")[1] == []
    # NOTE: JSON that is no call of a declared function, or not an object, stays content
    assert T.replied(tools, '{"name": "Alice", "age": 3}', "llama3_json") == ('{"name": "Alice", "age": 3}', [])
    assert T.replied(tools, '{"name": "clock", "parameters": {}}; 1', "llama3_json")[1] == []


def test_auto_without_a_parser_is_refused():
    with pytest.raises(RequestError) as e:
        T.parse({"tools": TOOLS}, parser=None)
    assert e.value.param == "tool_choice" and "--tool-call-parser" in e.value.message


@pytest.mark.parametrize(
    "fields, param, words",
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope'"),
        ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
        ({"tools": [{"type": "function"}]}, "tools", "tools[0]"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "'required'"),
        (
            {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
            "tool_choice",
            "send one",
        ),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": "clock"}}, "tool_choice", "'required'"),
    ],
)
def test_a_bad_tool_request_is_a_400_then_a_good_one_runs(client, fields, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, extra_body=fields)
    assert e.value.body["param"] == param and words in e.value.body["message"], e.value.body
    # NOTE: null is every field's default, parallel_tool_calls' too
    ok = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        max_tokens=3,
        tools=TOOLS,
        tool_choice="none",
        extra_body={"parallel_tool_calls": None},
    )
    assert ok.choices[0].message.tool_calls is None


def test_a_tool_message_without_its_call_id_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[*ASK, {"role": "tool", "content": "x"}], max_tokens=2)
    assert e.value.body["param"] == "messages" and "tool_call_id" in e.value.body["message"]
