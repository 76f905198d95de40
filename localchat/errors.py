"""The one error hierarchy. Every message says what happened and what to do about it."""

from __future__ import annotations


class LocalchatError(Exception):
    """Base of every error a user may see."""


class ConfigError(LocalchatError):
    """A setting is unknown or has a bad value."""


class ModelNotFoundError(LocalchatError):
    """A model name or path that does not resolve to a file."""


class ModelLoadError(LocalchatError):
    """A model file exists but cannot be loaded (not GGUF, truncated, unsupported)."""


class NoRoomError(ModelLoadError):
    """No memory for one more model beside the ones loaded (the server answers 503: try later, or free some)."""


class DownloadError(LocalchatError):
    """A model file could not be fetched or failed verification."""


class BusyMachineError(LocalchatError):
    """The wizard's measurements ran beside other programs' load: not this machine's speed, so not kept."""


class RequestError(LocalchatError):
    """A generation request that cannot be served as asked (bad sampling values, too long)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field at fault, when known (the API reports it)


class PayloadTooLargeError(RequestError):
    """A request body over the server's size limit."""


class ContextOverflowError(RequestError):
    """Prompt plus max_tokens does not fit the context window."""


class PinnedDocumentsError(ContextOverflowError):
    """The documents an earlier turn of a chat read leave no room for the next message; leaving them out would."""


class ToolServerError(LocalchatError):
    """An MCP server could not be started or reached, or stopped or hung during a call (the API answers 424, as
    OpenAI's does for a server it cannot reach)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} {reason}.")
        self.server = server


class StoreError(LocalchatError):
    """A store's file (the conversations, the stored responses) could not be written or read: a full disk,
    an I/O error. What it held is kept; the store opens it again on the next use."""


class AuthError(LocalchatError):
    """An API request without the right bearer token."""


class BackendError(LocalchatError):
    """The OpenAI-compatible server localchat forwards to failed or could not be reached."""


class EngineError(LocalchatError):
    """The runtime failed while serving a request."""


class KVHandoverError(EngineError):
    """KV state from a context that is not interchangeable with this one (model, n_ctx, KV types)."""


class PlacementError(ConfigError):
    """A placement this machine cannot run: too few devices, or a model that does not fit."""


class DraftIncompatibleError(ModelLoadError):
    """A draft model whose vocabulary differs from the target's."""
