"""A GGUF file's header read from the model hub by byte ranges: a model's exact facts before it is downloaded.

The planner needs layers, heads and vocabulary to say whether a file fits; a hub repo outside the catalog
gives them only in its files' headers (a few MB at the front of a file of GBs). The same bounded parser as
for local files reads them (gguf_bytes.py), and a server that ignores the range costs no more than asked.
"""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import DownloadError
from .gguf_info import GGUFInfo, read_gguf_remote
from .hub import hub_endpoint, hub_file_info

HEADER_LIMIT = 32 << 20  # the largest vocabularies' headers are ~10 MB; a hostile file stops here
TIMEOUT = 5.0


def read_hub_gguf(repo: str, filename: str, timeout: float = TIMEOUT) -> GGUFInfo:
    """Parse the header of `repo`/`filename` on the hub, fetching only the bytes the parser asks for."""
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers

    info = hub_file_info(repo, filename)  # the checked metadata: size, and where the bytes are
    headers = build_hf_headers()
    if urlparse(info.url).netloc != urlparse(hub_endpoint()).netloc:
        headers.pop("authorization", None)  # a CDN address: the hub token stays with the hub

    def fetch(start: int, end: int) -> bytes:
        wanted = end - start
        got = bytearray()
        try:
            with get_session().stream("GET", info.url, headers={**headers, "Range": f"bytes={start}-{end - 1}"},
                                      timeout=timeout, follow_redirects=True) as reply:
                if reply.status_code not in (200, 206):
                    raise DownloadError(f"the hub answered {reply.status_code} for the header of {repo}/{filename}.")
                skip = start if reply.status_code == 200 else 0  # the range was ignored: the whole file comes
                for block in reply.iter_bytes():
                    if skip:
                        cut = min(skip, len(block))
                        block, skip = block[cut:], skip - cut
                    got += block[:wanted - len(got)]
                    if len(got) >= wanted:
                        break  # closing the stream stops the rest of the file
        except DownloadError:
            raise
        except Exception as exc:
            raise DownloadError(f"reading the header of {repo}/{filename} from the hub failed "
                                f"({type(exc).__name__}: {exc}).") from None
        return bytes(got)

    return read_gguf_remote(fetch, info.size, f"{repo}/{filename}", HEADER_LIMIT)
