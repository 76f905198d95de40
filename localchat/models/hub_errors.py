"""Model hub failures as errors that say what happened and what to do: gated, missing, offline, unreachable."""

from __future__ import annotations

import importlib

from ..errors import DownloadError


def network_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean the hub could not be reached, whichever HTTP library the client uses."""
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    # The hub client moved between HTTP libraries across versions; accept whichever is installed.
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout"))):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        kinds += [getattr(mod, name) for name in names if hasattr(mod, name)]
    return tuple(kinds)


def explain_hub_error(exc: BaseException, endpoint: str, repo: str, filename: str, revision: str = "main",
                      hint: str = "") -> BaseException:
    """A hub client failure as a DownloadError that says what happened and what to do."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RemoteEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    where = f"{repo}/{filename}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError) or (isinstance(exc, HfHubHTTPError) and status == 403):
        return DownloadError(
            f"{repo} is a gated model (the hub answered {status}): open {endpoint}/{repo} while logged in, "
            "accept its license, then set HF_TOKEN to an access token of that account (or run `hf auth login`) and retry."
        )
    if isinstance(exc, RemoteEntryNotFoundError):
        return DownloadError(
            f"{repo} has no file '{filename}' at revision '{revision}' (404). Check the file name; the repo's "
            f"files are listed at {endpoint}/{repo}/tree/{revision}."
        )
    if isinstance(exc, RevisionNotFoundError):
        return DownloadError(f"{repo} has no revision '{revision}' (404); check the branch, tag or commit.")
    if isinstance(exc, RepositoryNotFoundError) or (isinstance(exc, HfHubHTTPError) and status == 401):
        return DownloadError(
            f"the hub has no repo '{repo}' that we may read (answered {status}) while fetching {filename}. "
            "Check the repo name; if it is private or gated, set HF_TOKEN to an access token that can read it."
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return DownloadError(f"cannot fetch {where}: HF_HUB_OFFLINE is set. Unset it to download, "
                             "or use a model that is already downloaded.")
    if isinstance(exc, (LocalEntryNotFoundError, *network_errors())):
        return DownloadError(
            f"cannot reach the model hub at {endpoint} to fetch {where} ({type(exc).__name__}: {exc}).{hint} "
            "Check the network connection (and HF_ENDPOINT or proxy settings); models already downloaded "
            "still work offline."
        )
    if isinstance(exc, HfHubHTTPError):
        return DownloadError(f"the hub answered {status} for {where}; try again later.{hint}")
    if isinstance(exc, OSError):
        return DownloadError(f"downloading {where} failed: {exc}.{hint}")
    return exc
