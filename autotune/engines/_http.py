"""The one way an engine adapter reads JSON from its server.

A server that does not answer, or answers anything but 200 with JSON, is `not_ready`
(ServerFailed); a refused API key stops the study (StudyStopped: every config meets it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from autotune.errors import ServerFailed, StudyStopped


def auth_headers(api_key: str | None) -> dict[str, str]:
    """What every request to the server carries: the API key, when there is one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def open_client(base_url: str, api_key: str | None, timeout: float) -> httpx.AsyncClient:
    """An async client for the server at `base_url`, sending the API key when there is one."""
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"), headers=auth_headers(api_key), timeout=timeout
    )


def key_refused(status: int, path: str, sent: bool) -> StudyStopped:
    """The one line for a server that answers 401/403: every config would get the same."""
    if sent:
        why = f"the server refused the API key (HTTP {status} on {path})"
    else:
        why = f"the server asks for an API key (HTTP {status} on {path}): name its variable"
    return StudyStopped(None, "target.api_key_env", why)


async def get_json(
    client: httpx.AsyncClient,
    *paths: str,
    missing: Sequence[int] = (),
) -> Any:
    """GET the first of `paths` the server has (a 404 moves on to the next) and return its
    JSON; None when the last one answers a status in `missing` (an endpoint switched off)."""
    assert paths
    path = paths[0]
    try:
        response = await client.get(path)
        for later in paths[1:]:
            if response.status_code != 404:
                break
            path = later
            response = await client.get(path)
    except httpx.HTTPError as exc:
        raise ServerFailed("not_ready", f"GET {path}: {type(exc).__name__}: {exc}") from exc
    if response.status_code in (401, 403):
        raise key_refused(response.status_code, path, "authorization" in client.headers)
    if response.status_code in missing:
        return None
    if response.status_code != 200:
        raise ServerFailed("not_ready", f"GET {path} answered HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError as exc:
        raise ServerFailed("not_ready", f"GET {path} did not answer JSON") from exc
