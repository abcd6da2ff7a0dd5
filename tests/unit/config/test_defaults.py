"""The embedded default, its rendering (and the copy in docs/configuration.md), and the
--listen / --data-dir overrides."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from spool.server.config import (
    AdminConfig,
    Config,
    ConfigError,
    TopicRule,
    TransactionLogConfig,
    TransportConfig,
    default_config,
    load_config,
    parse_config,
    render_default_xml,
    with_overrides,
)
from tests.unit.config.helpers import (
    USERS,
    doc,
    parse,
    txlog,
)


def test_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = default_config()
    here = Path(os.getcwd())
    assert cfg == Config(
        name="spool",
        group="spool",
        data_directory=here / "data",
        admin=AdminConfig(stats_file=here / "data" / "stats.db"),
        transports=(TransportConfig("websocket-json", "websocket", "127.0.0.1", 9007),),
        transaction_log=TransactionLogConfig(
            here / "data" / "journal",
            here / "data" / "archive",
            topics=(TopicRule(".*", "json", is_regex=True),),
        ),
    )


def test_default_config_with_arguments(tmp_path: Path) -> None:
    cfg = default_config(data_dir=tmp_path / "d", listen=("::1", 0))
    assert cfg.data_directory == tmp_path / "d"
    assert cfg.admin.stats_file == tmp_path / "d" / "stats.db"
    assert (cfg.admin.host, cfg.admin.port) == ("::1", 0)
    assert (cfg.transports[0].host, cfg.transports[0].port) == ("::1", 0)


def test_default_config_refuses_a_public_address_without_users() -> None:
    with pytest.raises(ConfigError) as info:
        default_config(listen=("0.0.0.0", 9007))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert info.value.line is None
    assert info.value.message.startswith(
        "binding a non-loopback address requires <Users> (authentication)"
    )


def test_default_config_refuses_a_bad_listen() -> None:
    with pytest.raises(ConfigError) as info:
        default_config(listen=("127.0.0.1", 65536))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert "out of range" in info.value.message


def test_rendered_default_parses_to_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_config(render_default_xml(), env={}) == default_config()
    # Loaded from a file, relative paths follow the file instead; only that differs.
    file = tmp_path / "sub" / "spool.xml"
    file.parent.mkdir()
    file.write_text(render_default_xml())
    loaded = load_config(file, env={})
    assert loaded == dataclasses.replace(
        with_overrides(default_config(), data_dir=file.parent / "data"), source_path=file
    )


def test_documented_default_is_the_rendered_default() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    text = docs.read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN DEFAULT", 1)[1].split("<!-- END DEFAULT -->", 1)[0]
    xml = block.split("```xml\n", 1)[1].rsplit("```", 1)[0]
    assert xml == render_default_xml()


def test_listen_override_moves_admin_and_transports() -> None:
    # A file holds one transport in this version; the model may hold several (one per
    # message type later), and every one of them moves.
    cfg = parse(
        doc(
            f"{USERS}\n<Admin><InetAddr>9100</InetAddr><AllowPlaintext>true</AllowPlaintext></Admin>"
        )
    )
    cfg = dataclasses.replace(
        cfg,
        transports=(
            TransportConfig("r", "websocket", "127.0.0.1", 9100),
            TransportConfig("w", "websocket", "127.0.0.1", 9100),
        ),
    )
    moved = with_overrides(cfg, listen=("0.0.0.0", 9500))
    assert (moved.admin.host, moved.admin.port) == ("0.0.0.0", 9500)
    assert {(t.host, t.port) for t in moved.transports} == {("0.0.0.0", 9500)}
    assert [t.name for t in moved.transports] == ["r", "w"]


def test_listen_override_keeps_the_plaintext_rule() -> None:
    # users, no TLS, no AllowPlaintext: fine on loopback, refused once --listen exposes it
    cfg = parse(doc(f"{USERS}\n<Admin><InetAddr>9100</InetAddr></Admin>"))
    assert not cfg.plaintext_exposed
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, listen=("0.0.0.0", 9500))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert "AllowPlaintext" in info.value.message and "clear text" in info.value.message
    allowed = with_overrides(dataclasses.replace(cfg, allow_plaintext=True), listen=("0.0.0.0", 1))
    assert allowed.plaintext_exposed


def test_listen_override_keeps_the_loopback_rule() -> None:
    with pytest.raises(ConfigError) as info:
        with_overrides(default_config(), listen=("10.1.2.3", 9007))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert "binding a non-loopback address requires <Users>" in info.value.message
    assert with_overrides(default_config(), listen=("localhost", 1)).admin.host == "localhost"


def test_data_dir_override_moves_only_derived_paths() -> None:
    cfg = parse(
        doc(
            "<Admin><FileName>/stats/s.db</FileName></Admin>\n"
            + txlog("<JournalDirectory>/fast/journal</JournalDirectory>")
        )
    )
    moved = with_overrides(cfg, data_dir=Path("/new"))
    assert moved.data_directory == Path("/new")
    assert moved.admin.stats_file == Path("/stats/s.db")
    assert moved.transaction_log is not None
    assert moved.transaction_log.journal_directory == Path("/fast/journal")
    assert moved.transaction_log.archive_directory == Path("/new/archive")
    assert moved.explicit_paths == cfg.explicit_paths


def test_data_dir_override_of_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    moved = with_overrides(default_config(), data_dir=Path("rel"))
    assert moved == default_config(data_dir=tmp_path / "rel")


def test_data_dir_override_cannot_merge_journal_and_archive() -> None:
    cfg = parse(doc(txlog("<JournalDirectory>/n/archive</JournalDirectory>")))
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, data_dir=Path("/n"))
    assert info.value.path == "/SpoolConfig/DataDirectory"


def test_no_overrides_is_identity() -> None:
    cfg = default_config()
    assert with_overrides(cfg) == cfg
