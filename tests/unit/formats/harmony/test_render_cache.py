"""The cached render is the whole-conversation render: same token ids, whatever the request.

:func:`render_harmony` renders the system / developer prefix once per distinct options,
instructions, tools and response format, then each history message on its own.  Here every
generated request is also rendered the reference way (openai-harmony's
``render_conversation_for_completion`` over all messages) and the ids must be identical,
cold cache and warm.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Conversation as HarmonyConversation
from openai_harmony import Message, RenderConversationConfig, Role

from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    ResponseFormat,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.core.conversation import Message as Msg
from app.formats.harmony import render as r
from app.formats.harmony.vocab import harmony_encoding

text = st.text(alphabet="ab <|>\n{}é", min_size=1, max_size=12)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = (FunctionTool("get_weather", "Weather.", CITY), FunctionTool("get_time", None, None))


@st.composite
def requests(draw: st.DrawFn) -> tuple[Conversation, GenerationParams, r.HarmonyOptions]:
    messages: list[Msg] = []
    if draw(st.booleans()):
        messages.append(Msg(draw(st.sampled_from(["system", "developer"])), (TextPart(draw(text)),)))
    for i in range(draw(st.integers(1, 3))):
        messages.append(Msg("user", (TextPart(draw(text)),)))
        if draw(st.booleans()):
            call = ToolCall(f"call_{i}", draw(st.sampled_from(["get_weather", "get_time"])),
                            draw(st.just('{"city":"Paris"}') | text))
            reasoning = draw(st.none() | text)
            messages.append(Msg("assistant", (TextPart(draw(st.just("") | text)),), tool_calls=(call,),
                                reasoning=reasoning))
            messages.append(Msg("tool", (TextPart(draw(text)),), tool_call_id=call.id))
        if draw(st.booleans()):
            messages.append(Msg("assistant", (TextPart(draw(text)),)))
    if messages[-1].role == "assistant":
        messages.append(Msg("user", (TextPart("next"),)))
    tools = TOOLS if draw(st.booleans()) else ()
    rf = draw(st.none() | st.just(ResponseFormat("answer", {"type": "object"}, draw(st.none() | text))))
    mode = draw(st.sampled_from(["auto", "none", "required"])) if tools else "auto"
    params = GenerationParams(reasoning_effort=draw(st.none() | st.sampled_from(["low", "medium", "high"])),
                              tool_choice=ToolChoice(mode))  # type: ignore[arg-type]
    opts = r.HarmonyOptions(current_date=draw(st.sampled_from([None, "2026-11-22"])))
    return Conversation(tuple(messages), tools, rf), params, opts


def reference(conv: Conversation, params: GenerationParams, opts: r.HarmonyOptions) -> tuple[int, ...]:
    enc = harmony_encoding()
    tools = conv.tools if params.tool_choice.mode != "none" else ()
    instructions, history = r._history(conv)
    messages: list[Message] = [r._system(opts, params.reasoning_effort or opts.default_reasoning_effort)]
    dev = r.developer_message(instructions, tools)
    if dev is None and conv.response_format is not None:
        dev = Message.from_role_and_content(Role.DEVELOPER, r.DeveloperContent.new())
    if dev is not None:
        messages.append(dev)
    whole = HarmonyConversation.from_messages(messages + history)
    ids = enc.render_conversation_for_completion(whole, Role.ASSISTANT,
                                                 RenderConversationConfig(auto_drop_analysis=False))
    if conv.response_format is not None:
        ids = r._splice_response_format(enc, ids, conv.response_format)
    return tuple(ids + r.prefill_ids(enc, params.tool_choice))


@settings(max_examples=150, deadline=None)
@given(requests())
def test_cached_render_equals_the_whole_conversation_render(
        request: tuple[Conversation, GenerationParams, r.HarmonyOptions]) -> None:
    conv, params, opts = request
    r._PREFIXES.clear()
    cold = r.render_harmony(conv, params, opts).token_ids
    warm = r.render_harmony(conv, params, opts).token_ids
    assert cold == warm == reference(conv, params, opts)
