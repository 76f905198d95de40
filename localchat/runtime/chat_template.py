"""Chat messages -> prompt text, with the model's own Jinja template rendered in a sandbox."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import RequestError

log = logging.getLogger(__name__)

# Used only when a GGUF carries no template (tiny test models, some conversions).
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

ROLES = {"system", "user", "assistant", "tool"}


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    """A compiled chat template with the special tokens it may refer to."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        if not source:
            log.info("the model has no chat template; using ChatML")
        self.source = source or CHATML
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except TemplateError as exc:
            log.warning("the model's chat template does not compile (%s); using ChatML", exc)
            self._template = env.from_string(CHATML)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages`, ending where the assistant's answer starts."""
        validate_messages(messages)
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise RequestError(f"the model's chat template rejected these messages: {exc}") from None


def validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {role, content} objects.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"message {i} needs a role, one of {', '.join(sorted(ROLES))}.")
        if not isinstance(message.get("content"), str):
            raise RequestError(f"message {i} needs its content as a string.")
