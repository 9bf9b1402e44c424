"""The daemon's configuration reference (``docs/configuration.md``), rendered by
``reverb_py.server._daemon.config_reference`` from the settings the daemon validates with.

Why a key cannot be accepted without a doc, by construction: the daemon refuses every key
that its declarations (``TOP_LEVEL_SETTINGS``, ``TABLE_SETTINGS``, ``SELECTOR_KINDS``,
``RATE_LIMITER_KINDS``, ``SPEC_SETTINGS``, ``ServerLimits``' fields) do not hold, reads the
values through them (a key it reads must be declared), a ``Setting`` or ``Kind`` cannot be
made without a doc, a limit without one fails the rendering, and the reference renders
every declaration. These tests check each link of that chain, and the other way: each
key the reference shows is accepted in a real config, and each flag of the parser shown.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import pathlib
import re
import sys
import types
from typing import Any

import pytest

from reverb_py import rate_limiters, selectors
from reverb_py.errors import ConfigError
from reverb_py.server import _daemon
from reverb_py.server._limits import ServerLimits
from reverb_py.server_executable import server_from_proto

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = pathlib.Path(__file__).parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def hook() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "_ext" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_page() -> str:
    page: str = hook().insert_reference(PAGE.read_text(encoding="utf-8"), "configuration.md")
    return page


def table_keys(markdown: str) -> dict[str, list[str]]:
    """The first-column keys of each table of a Markdown text, by the ``###`` heading above
    it (tables before any heading: under ``""``); header rows left out."""
    found: dict[str, list[str]] = {}
    heading = ""
    for line in markdown.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        match = re.match(r"^\| `([^`]+)` \|", line)
        if match:
            found.setdefault(heading, []).append(match.group(1))
    return found


def declared() -> list[tuple[str, _daemon.Setting]]:
    """Every declared setting: (group, setting)."""
    settings = [("top", s) for s in _daemon.TOP_LEVEL_SETTINGS.values()]
    settings += [("table", s) for s in _daemon.TABLE_SETTINGS.values()]
    for group, kinds in (
        ("selector", _daemon.SELECTOR_KINDS),
        ("rate_limiter", _daemon.RATE_LIMITER_KINDS),
    ):
        settings += [(group, s) for kind in kinds.values() for s in kind.settings.values()]
    settings += [("spec", s) for s in _daemon.SPEC_SETTINGS.values()]
    return settings


# ------------------------------------------------------------------ declared => documented


def test_every_declared_setting_is_in_the_reference_with_its_doc_default_and_range() -> None:
    reference = _daemon.config_reference()
    rows = {line for line in reference.splitlines() if line.startswith("| `")}
    for group, setting in declared():
        matching = [
            row
            for row in rows
            if row.startswith(f"| `{setting.key}` |") and _daemon._cell(setting.doc) in row
        ]
        assert len(matching) == 1, (group, setting.key)
        row = matching[0]
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[1] == _daemon._cell(_daemon._type_words(setting)), (group, setting.key)
        assert cells[2] == _daemon._cell(_daemon._default_words(setting)), (group, setting.key)
        assert cells[3] == _daemon._cell(_daemon._range_words(setting)), (group, setting.key)
        if setting.default is _daemon.REQUIRED:
            assert cells[2] == "required"
        if setting.bounds is not None:
            assert setting.bounds.words(setting.kind is int) in row
        for choice in setting.choices:
            assert f"`{choice}`" in cells[3]
    for kinds in (_daemon.SELECTOR_KINDS, _daemon.RATE_LIMITER_KINDS):
        for name, kind in kinds.items():
            assert any(row.startswith(f"| `{name}` |") and kind.doc in row for row in rows), name


def test_every_limit_is_in_the_reference_with_its_default_and_doc() -> None:
    limits = _daemon.config_reference("limits")
    docs = _daemon._attribute_docs(ServerLimits)
    for field in dataclasses.fields(ServerLimits):
        assert docs.get(field.name), f"ServerLimits.{field.name} has no doc"
        [row] = [line for line in limits.splitlines() if line.startswith(f"| `{field.name}` |")]
        assert f"`{_daemon._toml(field.default)}`" in row, row
        assert str(field.default) == _daemon._toml(field.default).replace("_", "")
        assert _daemon._cell(docs[field.name]) in row
    assert "Below 2 GiB" in docs["max_message_bytes"]


def test_every_flag_of_the_parser_is_in_the_reference() -> None:
    flags = _daemon.config_reference("flags")
    parser = _daemon._parser()
    for action in parser._actions:
        for option in action.option_strings:
            assert re.search(rf"[`, ]{re.escape(option)}[ `,]", flags), option
        if action.help not in (None, argparse.SUPPRESS):
            assert _daemon._cell(_daemon._sentence(action.help)) in flags
        if action.dest in _daemon.TOP_LEVEL_SETTINGS:
            [row] = [line for line in flags.splitlines() if f"| `{action.dest}` |" in line]
            assert action.option_strings[0] in row
    # Reverb's spelling, hidden from --help, is shown with ours.
    assert "`--checkpoint-dir DIR` (also `--checkpoint_dir`)" in flags


def test_the_help_names_the_reference_page() -> None:
    text = _daemon._parser().format_help()
    assert "docs/configuration.md" in " ".join(text.split())


# ------------------------------------------------------------------ no doc, no setting


def test_a_setting_or_kind_cannot_be_declared_without_a_doc() -> None:
    with pytest.raises(ValueError, match="needs a key and a doc"):
        _daemon.Setting("new_key", int, "")
    with pytest.raises(ValueError, match="needs a key and a doc"):
        _daemon.Setting("new_key", int, "   ")
    with pytest.raises(ValueError, match="needs a doc"):
        _daemon.Kind("new_kind", "")
    with pytest.raises(ValueError, match="declared twice"):
        _daemon._settings(_daemon.Setting("a", int, "A."), _daemon.Setting("a", str, "B."))


def test_a_limit_without_a_doc_fails_the_rendering() -> None:
    @dataclasses.dataclass(frozen=True)
    class Limits:
        """Limits.

        Attributes:
          documented: Its doc,
            on two lines.
        """

        documented: int = 1
        undocumented: int = 2

    assert _daemon._attribute_docs(Limits) == {"documented": "Its doc, on two lines."}
    assert set(_daemon._attribute_docs(ServerLimits)) == {
        field.name for field in dataclasses.fields(ServerLimits)
    }


def test_a_key_read_must_be_declared() -> None:
    with pytest.raises(KeyError):
        _daemon._read_in(_daemon.TOP_LEVEL_SETTINGS, {"new_key": 1}, "config", "new_key")


@pytest.mark.parametrize(
    "group",
    ["top", "table", "selector", "rate_limiter", "spec", "limits"],
)
def test_a_key_that_is_not_declared_is_refused(tmp_path, group) -> None:
    config = dict(GOOD_CONFIG)
    table = dict(GOOD_TABLE)
    if group == "top":
        config["undeclared_key"] = 1
    elif group == "table":
        table["undeclared_key"] = 1
    elif group == "selector":
        table["sampler"] = {"kind": "uniform", "undeclared_key": 1}
    elif group == "rate_limiter":
        table["rate_limiter"] = {"kind": "min_size", "min_size_to_sample": 1, "undeclared_key": 1}
    elif group == "spec":
        table["signature"] = {"dtype": "int32", "undeclared_key": 1}
    else:
        config["limits"] = {"undeclared_key": 1}
    config["tables"] = [table]
    with pytest.raises(ConfigError, match="undeclared_key: unknown field"):
        check(tmp_path, config)


# ------------------------------------------------------------------ documented => accepted

GOOD_TABLE: dict[str, Any] = {
    "name": "t",
    "sampler": {"kind": "uniform"},
    "remover": {"kind": "fifo"},
    "max_size": 10,
    "rate_limiter": {"kind": "min_size", "min_size_to_sample": 1},
}
GOOD_CONFIG: dict[str, Any] = {"port": 0}

# A good value of every documented key (a key documented without one here fails the tests
# below: then add it, so that it is tried in a real config).
TOP_LEVEL_VALUES: dict[str, Any] = {
    "host": "localhost",
    "port": 0,
    "tables": [GOOD_TABLE],
    "checkpoint_dir": "{tmp}/checkpoints",
    "checkpoint_interval_seconds": 600,
    "checkpoint_on_shutdown": True,
    "shutdown_grace_seconds": 5,
    "keep_checkpoints": 2,
    "on_checkpoint_mismatch": "refuse",
    "limits": {"max_streams": 10},
    "log_level": "debug",
    "log_format": "json",
    "metrics_port": 0,
    "token_file": "{tmp}/token",
    "tls_cert_file": "{tmp}/server.pem",
    "tls_key_file": "{tmp}/server.key",
    "tls_client_ca_file": "{tmp}/ca.pem",
}
TABLE_VALUES: dict[str, Any] = {
    **GOOD_TABLE,
    "max_times_sampled": 3,
    "signature": {"x": {"dtype": "float32", "shape": [2, -1], "name": "x"}},
    "max_bytes": 1 << 20,
}
KIND_VALUES: dict[str, dict[str, Any]] = {
    "prioritized": {"priority_exponent": 0.8},
    "uniform": {},
    "fifo": {},
    "lifo": {},
    "min_heap": {},
    "max_heap": {},
    "min_size": {"min_size_to_sample": 1},
    "sample_to_insert_ratio": {
        "samples_per_insert": 2.0,
        "min_size_to_sample": 10,
        "error_buffer": 10.0,
    },
    "queue": {"size": 5},
    "stack": {"size": 5},
    "custom": {
        "samples_per_insert": 1.0,
        "min_size_to_sample": 1,
        "min_diff": float("-inf"),
        "max_diff": 10.0,
    },
}


# What each kind of KIND_VALUES builds.
EXPECTED_KINDS: dict[str, Any] = {
    "prioritized": selectors.Prioritized(0.8),
    "uniform": selectors.Uniform(),
    "fifo": selectors.Fifo(),
    "lifo": selectors.Lifo(),
    "min_heap": selectors.MinHeap(),
    "max_heap": selectors.MaxHeap(),
    "min_size": rate_limiters.MinSize(1),
    "sample_to_insert_ratio": rate_limiters.SampleToInsertRatio(2.0, 10, 10.0),
    "queue": rate_limiters.Queue(5),
    "stack": rate_limiters.Stack(5),
    "custom": rate_limiters.RateLimiter(1.0, 1, float("-inf"), 10.0),
}


def toml(value: Any) -> str:
    """``value`` as a TOML value (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    return "{" + ", ".join(f"{key} = {toml(item)}" for key, item in value.items()) + "}"


def write(tmp_path: pathlib.Path, config: dict[str, Any]) -> pathlib.Path:
    path = tmp_path / "config.toml"
    tables = config.get("tables", [])
    lines = [f"{key} = {toml(value)}" for key, value in config.items() if key != "tables"]
    for table in tables:
        lines.append("[[tables]]")
        lines += [f"{key} = {toml(value)}" for key, value in table.items()]
    path.write_text("\n".join(lines).replace("{tmp}", str(tmp_path)) + "\n")
    return path


def check(tmp_path: pathlib.Path, config: dict[str, Any]) -> _daemon.Settings:
    """The daemon's settings of ``config`` (as ``--check-config`` reads them)."""
    path = write(tmp_path, config)
    args = _daemon._parser().parse_args(["--config", str(path), "--check-config"])
    return _daemon.settings(args)


@pytest.fixture
def credentials(tmp_path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    (tmp_path / "token").write_text("secret-token\n")
    (tmp_path / "token").chmod(0o600)


def test_every_documented_top_level_and_table_key_is_accepted(
    tmp_path, credentials, monkeypatch
) -> None:
    monkeypatch.delenv("REVERB_PY_TOKEN", raising=False)
    monkeypatch.delenv("REVERB_PY_TOKEN_FILE", raising=False)
    documented = table_keys(_daemon.config_reference("keys"))
    top = documented["Top-level keys"]
    table = documented["`[[tables]]`"]
    assert top == list(_daemon.TOP_LEVEL_SETTINGS)
    assert table == list(_daemon.TABLE_SETTINGS)
    config = {key: TOP_LEVEL_VALUES[key] for key in top}
    config["tables"] = [{key: TABLE_VALUES[key] for key in table}]
    settings = check(tmp_path, config)
    # Each value was taken, not only let through.
    assert settings.host == "localhost"
    assert settings.checkpoints.interval == 600.0
    assert settings.checkpoints.on_shutdown and settings.checkpoints.keep == 2
    assert settings.shutdown_grace == 5.0
    assert settings.checkpoints.on_mismatch == "refuse"
    assert settings.limits.max_streams == 10
    assert settings.log_format == "json" and settings.metrics_port == 0
    assert settings.token == "secret-token" and settings.tls is not None
    [served] = settings.tables
    assert served.info.max_times_sampled == 3
    assert served.max_bytes == 1 << 20
    assert served.signature is not None


def test_every_documented_kind_and_its_keys_are_accepted(tmp_path) -> None:
    documented = table_keys(_daemon.config_reference("keys"))
    for heading, field, kinds in (
        ("Selectors", "sampler", _daemon.SELECTOR_KINDS),
        ("Rate limiters", "rate_limiter", _daemon.RATE_LIMITER_KINDS),
    ):
        names = [name for name in documented[heading] if name in kinds]
        assert names == list(kinds)
        keys = {key for name in names for key in kinds[name].settings}
        assert set(documented[heading]) == {*names, "kind", *keys}
        for name in names:
            assert set(KIND_VALUES[name]) == set(kinds[name].settings), name
            table = dict(GOOD_TABLE, **{field: {"kind": name, **KIND_VALUES[name]}})
            [served] = check(tmp_path, {**GOOD_CONFIG, "tables": [table]}).tables
            assert f"{field}={EXPECTED_KINDS[name]!r}" in repr(served), name


def test_every_documented_limit_is_accepted(tmp_path) -> None:
    documented = table_keys(_daemon.config_reference("limits"))[""]
    assert documented == [field.name for field in dataclasses.fields(ServerLimits)]
    values = {name: 1000 + index for index, name in enumerate(documented)}
    limits = check(tmp_path, {**GOOD_CONFIG, "limits": values}).limits
    assert dataclasses.asdict(limits) == values
    # 0 lifts a bound, as the reference says.
    lifted = check(tmp_path, {**GOOD_CONFIG, "limits": dict.fromkeys(documented, 0)}).limits
    assert set(dataclasses.asdict(lifted).values()) == {None}


def test_the_documented_defaults_are_the_defaults(tmp_path) -> None:
    settings = check(tmp_path, {"tables": [GOOD_TABLE]})
    top = _daemon.TOP_LEVEL_SETTINGS
    assert settings.port == top["port"].default
    assert settings.checkpoints.keep == top["keep_checkpoints"].default
    assert settings.checkpoints.on_mismatch == top["on_checkpoint_mismatch"].default
    assert settings.checkpoints.on_shutdown is top["checkpoint_on_shutdown"].default
    assert settings.log_format == top["log_format"].default
    assert settings.limits == ServerLimits()
    [table] = settings.tables
    assert table.info.max_times_sampled == _daemon.TABLE_SETTINGS["max_times_sampled"].default


@pytest.mark.parametrize(
    "setting, where",
    [
        (setting, group)
        for group, setting in declared()
        if setting.bounds is not None and group in ("top", "table")
    ],
    ids=lambda value: getattr(value, "key", value),
)
def test_a_value_past_a_documented_bound_is_refused_in_its_words(tmp_path, setting, where) -> None:
    bounds = setting.bounds
    assert bounds is not None
    outside = bounds.high + 1 if bounds.high is not None else bounds.low - (setting.kind is int)
    config: dict[str, Any] = {**GOOD_CONFIG, "checkpoint_dir": str(tmp_path / "c")}
    if where == "top":
        config[setting.key] = outside
        config["tables"] = [GOOD_TABLE]
    else:
        config["tables"] = [dict(GOOD_TABLE, **{setting.key: outside})]
    with pytest.raises(
        ConfigError, match=re.escape(f"must be {bounds.words(setting.kind is int)}")
    ):
        check(tmp_path, config)


# ------------------------------------------------------------------ the textproto form


def proto_fields() -> set[tuple[str, str]]:
    """(message, field) of ``ReverbServerConfig`` and the messages it holds, but those
    of a signature (``StructuredValue``) and of the fields the reference calls ignored."""
    ignored = {(row.message, row.field) for row in _daemon.TEXTPROTO_FIELDS if not row.toml}
    found: set[tuple[str, str]] = set()
    pending = [server_from_proto.ReverbServerConfig.DESCRIPTOR]
    seen: set[str] = set()
    while pending:
        descriptor = pending.pop()
        if descriptor.full_name in seen:
            continue
        seen.add(descriptor.full_name)
        name = descriptor.full_name.removeprefix("reverb_py.proto.")
        for field in descriptor.fields:
            found.add((name, field.name))
            message = field.message_type
            if (
                message is not None
                and (name, field.name) not in ignored
                and message.full_name.startswith("reverb_py.proto.")
            ):
                pending.append(message)
    return found


def test_the_textproto_reference_has_every_field_of_reverb_server_config() -> None:
    rows = [(row.message, row.field) for row in _daemon.TEXTPROTO_FIELDS]
    assert len(rows) == len(set(rows))
    assert set(rows) == proto_fields()
    text = _daemon.config_reference("textproto")
    for message, field in rows:
        assert f"| `{message}` | `{field}` |" in text
    for row in _daemon.TEXTPROTO_FIELDS:
        # The TOML keys it names exist.
        for key in re.findall(r"`(\w+)`", row.toml):
            assert (
                key in _daemon.TABLE_SETTINGS
                or key in _daemon.TOP_LEVEL_SETTINGS
                or any(key in kind.settings for kind in _daemon.RATE_LIMITER_KINDS.values())
                or any(key in kind.settings for kind in _daemon.SELECTOR_KINDS.values())
            ), key


# ------------------------------------------------------------------ the page


def test_the_page_holds_every_part_once_and_the_build_inserts_them() -> None:
    source = PAGE.read_text(encoding="utf-8")
    markers = hook().MARKER.findall(source)
    assert sorted(markers) == sorted(_daemon.REFERENCE_PARTS)
    page = rendered_page()
    assert "config-reference" not in page
    for part in _daemon.REFERENCE_PARTS:
        assert _daemon.config_reference(part) in page
    # The hand-written lists the reference replaced are gone.
    assert "| `--config FILE` | the config" not in page
    assert "Selector kinds" not in source


def test_the_hook_refuses_a_page_without_a_part_and_an_unknown_part() -> None:
    module = hook()
    source = PAGE.read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="every part once"):
        module.insert_reference(
            source.replace("<!-- config-reference: limits -->", ""), "configuration.md"
        )
    with pytest.raises(ValueError, match="unknown reference part"):
        module.insert_reference("<!-- config-reference: nothing -->\n", "other.md")
    assert module.insert_reference("no markers\n", "other.md") == "no markers\n"


def blocks(text: str, info: str) -> list[str]:
    return re.findall(rf"^```{info}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_pages_toml_example_is_a_good_config_with_every_top_level_key(tmp_path) -> None:
    first, *others = blocks(rendered_page(), "toml")
    config = tomllib.loads(first)
    assert list(config) == list(_daemon.TOP_LEVEL_SETTINGS) or set(config) == set(
        _daemon.TOP_LEVEL_SETTINGS
    )
    path = tmp_path / "example.toml"
    path.write_text(first)
    [table] = _daemon.tables_from_config(_daemon.load_config(str(path)))
    assert table.name == "replay"
    _daemon.limits_from_config(config)
    _daemon.CheckpointSettings(config)
    # The signature example of the reference.
    assert _daemon.SIGNATURE_EXAMPLE in others
    signature = tomllib.loads(_daemon.SIGNATURE_EXAMPLE)["tables"]["signature"]
    spec = _daemon._signature(signature, "signature")
    assert spec["observation"].shape == (84, 84, 4)


def test_the_pages_textproto_example_is_a_good_config() -> None:
    [example] = [block for block in blocks(rendered_page(), "text") if "tables {" in block]
    [table] = server_from_proto.tables_from_proto(server_from_proto.parse_config(example).tables)
    assert table.name == "replay"
