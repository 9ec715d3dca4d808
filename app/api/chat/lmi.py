"""SageMaker LMI's standard schema on ``/invocations``: ``{"inputs": "...", "parameters": {...}}``.

``inputs`` is **one user message**, rendered with the model's own prompt format like any chat
message, never a raw prompt: the gateway's guarantee that client text cannot become control
tokens holds here too (a raw prompt would let ``<|start|>`` or ``<|im_end|>`` typed by a
client steer the model, and would leave the answer's parser without the turn it expects).
Raw prompts are ``/v1/completions``' business.

Parameters map onto the chat run (``max_new_tokens`` → ``max_tokens``, ``stop_sequences`` /
``stop`` → ``stop``, ``do_sample: false`` → greedy, ``ignore_eos_token`` → ``ignore_eos``, ...);
what no backend here can do is a 400 naming ``parameters.NAME``.  The answer is LMI's:
``{"generated_text", "details"?}``, or with ``stream`` JSON lines of ``{"token": {...}}`` whose
last line also carries ``generated_text`` (and ``details``).  ``generated_text`` is the
answer only (reasoning is never part of it); ``return_full_text`` puts ``inputs`` before it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from app.api.chat.fold import Folded
from app.core import events as ev
from app.core.conversation import Conversation, GenerationParams, Message, TextPart
from app.core.errors import InvalidRequest, error_fields
from app.core.ids import random_id
from app.engine.engine import Engine, Plan, RunRequest
from app.engine.run import Json
from app.http.auth import check_model, principal
from app.http.disconnect import cancel_on_disconnect
from app.http.sse import json_line
from app.http.streaming import json_answer, jsonlines_response
from schemas.chat import LMIParameters, LMIRequest

FINISH = {"stop": "eos_token", "length": "length", "tool_calls": "eos_token"}


def parse_lmi(data: dict[str, Any]) -> LMIRequest:
    try:
        return LMIRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        if err["type"] == "extra_forbidden":
            raise InvalidRequest(f"{param} is not a parameter this gateway takes in LMI's schema.",
                                 param=param, code="unknown_parameter") from None
        raise InvalidRequest(f"Invalid value for {param!r}: {err['msg']}", param=param,
                             code="invalid_value") from None


def _refuse(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"parameters.{name}: {why}", param=f"parameters.{name}",
                          code="unsupported_parameter")


def _stop(p: LMIParameters) -> tuple[str, ...]:
    if p.stop is not None and p.stop_sequences is not None:
        raise InvalidRequest("Give stop or stop_sequences, not both.", param="parameters.stop")
    stop = p.stop_sequences if p.stop_sequences is not None else p.stop
    out = (stop,) if isinstance(stop, str) else tuple(stop or ())
    name = "stop_sequences" if p.stop_sequences is not None else "stop"
    if len(out) > 4 or any(not s for s in out):
        raise InvalidRequest("Up to 4 non-empty stop strings.", param=f"parameters.{name}")
    return out


def lmi_params(p: LMIParameters) -> GenerationParams:
    if p.top_k not in (None, 0, -1):
        raise _refuse("top_k", "top-k sampling is not available through this gateway "
                      "(0 or -1, \"off\", is accepted).")
    if p.repetition_penalty not in (None, 1.0):
        raise _refuse("repetition_penalty", "not available through this gateway (1.0 is "
                      "accepted); use frequency_penalty / presence_penalty.")
    if p.n not in (None, 1):
        raise _refuse("n", "several sequences are the chat schema's n (a body with messages).")
    if p.decoder_input_details:
        raise _refuse("decoder_input_details", "prompt token details are not available.")
    if p.ignore_eos is not None and p.ignore_eos_token is not None \
            and p.ignore_eos != p.ignore_eos_token:
        raise InvalidRequest("ignore_eos and ignore_eos_token disagree.",
                             param="parameters.ignore_eos_token")
    temperature = p.temperature
    if p.do_sample is False:
        if (p.temperature or 0.0) > 0.0 or (p.top_p is not None and p.top_p < 1.0):
            raise InvalidRequest("do_sample false means greedy decoding; it cannot go with a "
                                 "temperature above 0 or a top_p below 1.",
                                 param="parameters.do_sample")
        temperature = 0.0
    return GenerationParams(
        max_tokens=p.max_new_tokens, temperature=temperature, top_p=p.top_p, seed=p.seed,
        frequency_penalty=p.frequency_penalty, presence_penalty=p.presence_penalty,
        stop=_stop(p), ignore_eos=bool(p.ignore_eos or p.ignore_eos_token),
        logprobs=p.details)


class LMIEncoder:
    """Events → LMI's answer.  In a stream each answer-text delta is a ``{"token"}`` line, held
    back one step so the last one can carry ``generated_text`` (and ``details``) as in LMI."""

    def __init__(self, inputs: str, *, details: bool, full_text: bool, stream: bool) -> None:
        self._inputs = inputs
        self._details = details
        self._prefix = inputs if full_text else ""
        self._stream = stream
        self._held: Json | None = None
        self.folded = Folded()
        self.terminal = False

    def start(self) -> list[Json]:
        return []

    def cancel(self) -> list[Json]:
        self.terminal = True
        return []

    def encode(self, event: ev.Event) -> list[Json]:
        if self.terminal:
            return []
        self.folded.add(event)
        if isinstance(event, ev.TERMINAL):
            self.terminal = True
        if not self._stream:
            return []
        if isinstance(event, ev.TextDelta | ev.PreambleDelta) and event.text:
            lps = event.logprobs if isinstance(event, ev.TextDelta) else None
            one = lps[0] if lps and len(lps) == 1 else None
            token = {"id": one.token_id if one else None, "text": event.text,
                     "log_prob": one.logprob if one else None, "special_token": False}
            out = [self._held] if self._held is not None else []
            self._held = {"token": token}
            return out
        if isinstance(event, ev.Finished):
            last = self._held or {"token": {"id": None, "text": "", "log_prob": None,
                                            "special_token": True}}
            self._held = None
            last["generated_text"] = self._prefix + self.folded.content
            if self._details:
                last["details"] = self._details_of(tokens=False)
            return [last]
        if isinstance(event, ev.Error):
            out = [self._held] if self._held is not None else []
            self._held = None
            out.append({"token": {"id": -1, "text": "", "log_prob": -1, "special_token": True},
                        "generated_text": "",
                        "details": {"finish_reason": "error", "generated_tokens": None,
                                    "inputs": None},
                        "error": error_fields(event.message, event.type, event.code, event.param)})
            return out
        return []

    def _details_of(self, *, tokens: bool) -> Json:
        f = self.folded
        details: Json = {"finish_reason": FINISH.get(f.finish_reason or "", f.finish_reason),
                         "generated_tokens": f.usage.completion_tokens, "inputs": self._inputs}
        if tokens:
            details["tokens"] = [{"id": lp.token_id, "text": lp.token, "log_prob": lp.logprob}
                                 for lp in f.logprobs]
        return details

    def result(self) -> Json:
        body: Json = {"generated_text": self._prefix + self.folded.content}
        if self._details:
            body["details"] = self._details_of(tokens=True)
        return body


async def run_lmi(data: dict[str, Any], request: Request) -> Response:
    engine: Engine = request.app.state.engine
    body = parse_lmi(data)
    check_model(request, body.model)
    params = lmi_params(body.parameters or LMIParameters())
    if params.logprobs and not engine.registry.route(body.model).backend.capabilities.logprobs:
        params = replace(params, logprobs=False)  # details without per-token log_probs
    conversation = Conversation((Message("user", (TextPart(body.inputs),), source="inputs"),))
    details = bool(body.parameters and body.parameters.details)
    full = bool(body.parameters and body.parameters.return_full_text)

    def encoder(plan: Plan) -> LMIEncoder:
        return LMIEncoder(body.inputs, details=details, full_text=full, stream=body.stream)

    starting = engine.start(RunRequest(body.model, conversation, params), encoder,
                            run_id=random_id("lmi-"), mode="stream" if body.stream else "wait",
                            owner=principal(request))
    if not body.stream:
        return await json_answer(request, starting)
    run = await cancel_on_disconnect(request, starting)
    return jsonlines_response(run, json_line)
