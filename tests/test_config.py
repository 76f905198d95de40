"""Settings precedence and validation."""

from __future__ import annotations

import pytest

from localchat.config import load_settings, settings_file
from localchat.errors import ConfigError


def test_precedence_defaults_file_env_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    assert load_settings(environ={}).n_ctx == 8192
    settings_file().write_text("n_ctx = 4096\nn_threads = 3\n")
    assert load_settings(environ={}).n_ctx == 4096
    from_env = load_settings(environ={"LOCALCHAT_N_CTX": "2048"})
    assert (from_env.n_ctx, from_env.n_threads) == (2048, 3)
    assert load_settings({"n_ctx": 1024}, environ={"LOCALCHAT_N_CTX": "2048"}).n_ctx == 1024


def test_unknown_keys_and_bad_values_are_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    settings_file().write_text("n_cxt = 4096\n")
    with pytest.raises(ConfigError, match="unknown setting 'n_cxt'"):
        load_settings(environ={})
    settings_file().write_text("n_ctx = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(environ={})
    settings_file().unlink()
    with pytest.raises(ConfigError, match="bad value"):
        load_settings(environ={"LOCALCHAT_N_CTX": "lots"})
    with pytest.raises(ConfigError, match="out of range"):
        load_settings({"n_seq_max": 0}, environ={})
