"""OpenAI request bodies: parsing, validation, and their translation into the protocol-neutral request."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import RequestError
from ..runtime.engine import Request
from ..runtime.sampling import SamplingParams
from .service import AskedSampling
from .wire import TOO_DEEP


MAX_CHOICES = 8  # `n`: the choices one request may ask for


class Body(BaseModel):
    # Clients send fields we have no use for (user, metadata, store...); refusing them would
    # break ordinary clients, so unknown fields are accepted and ignored.
    model_config = ConfigDict(extra="allow")


class StreamOptions(Body):
    include_usage: bool = False


class TextPart(Body):
    type: Literal["text"]
    text: str


class ChatMessage(Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | dict[str, Any]] | None = None
    tool_calls: list[Any] | None = None  # an assistant turn's calls
    tool_call_id: str | None = None  # the call a tool turn answers
    reasoning_content: str | None = None  # an earlier answer's thinking, as this server returned it


class _Sampled(Body):
    """Fields shared by chat and text completions. None means: the engine's default. Their ranges
    are checked once, by SamplingParams.validate (runtime/sampling.py's LIMITS)."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    # Not OpenAI's, but llama.cpp front ends (Open WebUI, SillyTavern...) send them.
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None  # some clients send null for "the default"
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    # Token id (as a string: JSON's keys are) -> bias; checked and clamped by runtime/sampling.py's token_biases.
    logit_bias: dict[str, Any] | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def limit(self) -> int | None:
        return self.max_tokens

    def check(self) -> None:
        """Refuse what we cannot do, rather than silently doing something else."""
        if self.n is not None and not 1 <= self.n <= MAX_CHOICES:
            raise RequestError(f"n={self.n} is invalid; ask for 1 to {MAX_CHOICES} choices (each is generated "
                               "beside the others, so more would take the slots of other requests).", "n")
        if self.logprobs is not None and not isinstance(self.logprobs, bool) and not 0 <= self.logprobs <= 20:
            raise RequestError(f"logprobs={self.logprobs} is invalid; use 0-20 alternatives.", "logprobs")

    def top(self) -> int | None:
        """Alternatives per token for logprobs (None: no logprobs)."""
        return None

    def asked(self) -> AskedSampling:
        """The sampling fields the client set, in the engine's terms."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return AskedSampling.named_alike(self, max_tokens=self.limit(), stop=stops, logprobs=self.top())

    def sampling(self, defaults: SamplingParams | None = None) -> SamplingParams:
        """SamplingParams with the fields the client set; the server's defaults for the rest."""
        return self.asked().over(defaults)


class LocalchatFields(Body):
    """localchat's own request fields, in `x_localchat` (other servers' clients never send it)."""

    context_overflow: Literal["rolling", "truncate-middle", "refuse"] = "refuse"


class ChatBody(_Sampled):
    messages: list[ChatMessage] = Field(min_length=1)
    x_localchat: LocalchatFields = Field(default_factory=LocalchatFields)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # Thinking models: OpenAI's effort, and the template variables llama.cpp's and vLLM's servers take
    # (`{"enable_thinking": false}`); a GBNF `grammar`, as llama.cpp's server takes it.
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    grammar: str | None = None

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def top(self) -> int | None:
        """Alternatives per token for logprobs (None: no logprobs)."""
        if self.top_logprobs and not self.logprobs:
            raise RequestError("top_logprobs needs logprobs: true.", "top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None

    def turns(self) -> list[dict[str, Any]]:
        """The messages as plain dicts (api/service.py's Generation)."""
        return [_turn(m, i) for i, m in enumerate(self.messages)]

    def to_request(self, defaults: SamplingParams | None = None) -> Request:
        self.check()
        return Request(messages=self.turns(), sampling=self.sampling(defaults))


class CompletionBody(_Sampled):
    prompt: str | list[str]
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None
    grammar: str | None = None  # GBNF, as the llama.cpp servers take it

    def top(self) -> int | None:
        return None if self.logprobs is None or self.logprobs is False else int(self.logprobs)

    def check(self) -> None:
        _Sampled.check(self)
        if self.echo:
            raise RequestError("echo is not supported by this server.", "echo")
        if self.suffix:
            raise RequestError("suffix (fill-in-the-middle) is not supported by this server.", "suffix")
        if self.best_of not in (None, 1):
            raise RequestError(f"best_of={self.best_of} is not supported; use 1.", "best_of")
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            raise RequestError("send one prompt per request (a string, or a list of exactly one string).", "prompt")

    def text(self) -> str:
        """The one prompt (checked first)."""
        self.check()
        prompt = self.prompt if isinstance(self.prompt, str) else self.prompt[0]
        if not prompt:
            raise RequestError("prompt is empty; send some text to complete.", "prompt")
        return prompt

    def to_request(self, defaults: SamplingParams | None = None) -> Request:
        return Request(prompt=self.text(), sampling=self.sampling(defaults))


class EmbeddingsBody(Body):
    """POST /v1/embeddings: text, texts, a token array or token arrays (bounded in api/embeddings.py)."""

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)


def _turn(message: ChatMessage, index: int) -> dict[str, Any]:
    """One message as a plain dict: role, text, and the tool fields it carries."""
    turn: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                            "content": _text(message, index)}
    if message.tool_calls:
        turn["tool_calls"] = message.tool_calls
    if message.tool_call_id is not None:
        turn["tool_call_id"] = message.tool_call_id
    if message.reasoning_content:
        turn["reasoning"] = message.reasoning_content
    return turn


def _text(message: ChatMessage, index: int) -> str:
    """A message's content as one string; text parts are joined, other parts refused."""
    content = message.content
    if content is None:
        return ""  # an assistant turn that only carried tool calls
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if not isinstance(part, TextPart):
            kind = part.get("type", "unknown")
            raise RequestError(f"message {index} has a '{kind}' part; this model reads text only.",
                               f"messages.{index}.content")
        texts.append(part.text)
    return "".join(texts)


_B = TypeVar("_B", bound=Body)


def parse(model: type[_B], data: Any) -> _B:
    """Validate a decoded JSON body; the first problem becomes a RequestError naming its field."""
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except RecursionError:
        raise RequestError(TOO_DEEP) from None
    except ValidationError as exc:
        error = exc.errors()[0]
        # A union adds its member types ("str", "list[str]") to the location; keep field names only.
        fields = _field_names()
        param = ".".join(str(part) for part in error["loc"] if isinstance(part, int) or part in fields)
        value = "" if error["type"] == "missing" else f" (got {_short(error.get('input'))})"
        raise RequestError(f"{param or 'body'}: {error['msg']}{value}.", param or None) from None


def _field_names() -> set[str]:
    """The field names of every request body (each protocol's bodies derive from Body)."""
    names: set[str] = set()
    bodies = [Body]
    while bodies:
        body = bodies.pop()
        names |= set(body.model_fields)
        bodies += body.__subclasses__()
    return names


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
