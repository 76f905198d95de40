"""Ollama's keep_alive is finite and bounded by Ollama's own rules: no value pins a model for the life
of the server, never unloads it by accident, or breaks /api/ps."""

from __future__ import annotations

import math

import httpx
import pytest

from localchat.api.protocols.ollama import MAX_KEEP_ALIVE_S, keep_alive_s
from localchat.errors import RequestError
from conftest import MODEL


@pytest.mark.parametrize("value", [1e300, "99999999999h", "nan", "NaN", "inf", "-inf", "1e9999", True])
def test_a_keep_alive_past_ollamas_bound_or_not_a_number_is_refused(value):
    """The issue's eighth finding: 1e300 or "99999999999h" made /api/ps a 500 and could pin a model for
    the life of the server; "nan" never unloaded."""
    with pytest.raises(RequestError, match="keep_alive"):
        keep_alive_s(value)


@pytest.mark.parametrize("value, seconds", [
    (300, 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("300", 300.0), (0, 0.0), ("0", 0.0),
    (-1, math.inf), ("-5m", math.inf), (MAX_KEEP_ALIVE_S, MAX_KEEP_ALIVE_S), (None, None)])
def test_ollamas_own_keep_alive_values_still_mean_what_they_mean(value, seconds):
    assert keep_alive_s(value) == seconds


@pytest.mark.parametrize("value", [1e300, "99999999999h", "nan"])
def test_the_routes_answer_400_and_api_ps_stays_up(supervised_api: str, value):
    api = supervised_api
    response = httpx.post(f"{api}/api/generate", timeout=120, json={
        "model": MODEL, "prompt": "Hi", "stream": False, "keep_alive": value, "options": {"num_predict": 2}})
    assert response.status_code == 400 and "keep_alive" in response.text
    assert httpx.get(f"{api}/api/ps", timeout=60).status_code == 200
