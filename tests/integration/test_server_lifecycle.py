"""Starting and ending a server: arguments, ports, interpreter exit, checkpoint settings."""

from __future__ import annotations

import logging
import pathlib
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from reverb_py import aio, checkpointers, errors, rate_limiters, selectors
from reverb_py.client import Client
from reverb_py.server import Server
from reverb_py.table import Table

ROOT = pathlib.Path(__file__).parents[2]


def uniform_table(max_size: int = 100) -> Table:
    return Table("t", selectors.Uniform(), selectors.Fifo(), max_size, rate_limiters.MinSize(1))


def run_script(source: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Runs ``source`` as a script of its own; a script that does not exit fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-c", source],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(ROOT),
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the script did not exit within {timeout} s: {error.stderr!r}")


# ------------------------------------------------------------------ interpreter exit

_TABLE = textwrap.dedent("""
    import reverb_py as reverb
    table = reverb.Table('t', reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10,
                         reverb.rate_limiters.MinSize(1))
""")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            """
            server = reverb.Server([table])
            client = server.localhost_client()
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                writer.append({'a': 1})
                writer.create_item('t', 1.0, {'a': writer.history['a'][-1:]})
            print(len(list(client.sample('t', num_samples=1))))
            """,
            id="blocking-client-and-writer",
        ),
        pytest.param(
            """
            import asyncio
            server = reverb.Server([table])

            async def main():
                client = reverb.aio.Client(f'localhost:{server.port}')
                writer = await client.trajectory_writer(num_keep_alive_refs=1)
                writer.append({'a': 1})
                writer.create_item('t', 1.0, {'a': writer.history['a'][-1:]})
                await writer.flush()
                print(len([s async for s in client.sample('t', num_samples=1)]))

            asyncio.run(main())
            """,
            id="asyncio-client",
        ),
        pytest.param(
            """
            servers = [reverb.Server([reverb.Table.queue(f'q{i}', 1)]) for i in range(3)]
            print(1)
            """,
            id="several-servers",
        ),
    ],
)
def test_a_script_that_never_stops_its_server_exits(body: str) -> None:
    result = run_script(_TABLE + textwrap.dedent(body))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_a_script_that_raises_with_a_server_running_exits_with_its_error() -> None:
    result = run_script(_TABLE + "server = reverb.Server([table])\nraise SystemExit(3)\n")
    assert result.returncode == 3, result.stderr


def test_a_thread_still_calling_the_server_at_exit_logs_nothing() -> None:
    # As a learner thread that is never told to stop: the server outlives it (both end
    # with the process), so its calls do not fail while the interpreter exits.
    result = run_script(
        _TABLE
        + """
import threading
server = reverb.Server([table])
client = server.localhost_client()
client.insert([1], {'t': 1.0})
called = threading.Event()

def learn():
    while True:
        list(client.sample('t', num_samples=1))
        client.mutate_priorities('t', updates={})
        called.set()

threading.Thread(target=learn, daemon=True).start()
called.wait()
print(1)
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    assert result.stderr == ""


# ------------------------------------------------------------------ arguments and ports


@pytest.mark.parametrize("port", [70000, 65536, -1])
def test_a_port_out_of_range_is_refused(port: int) -> None:
    with pytest.raises(ValueError, match=f"port must be between 0 and 65535.*got {port}"):
        Server([uniform_table()], port=port)


@pytest.mark.parametrize("port", [True, "8000", 80.0])
def test_a_port_that_is_not_an_integer_is_refused(port: object) -> None:
    with pytest.raises(TypeError, match="port must be an integer or None"):
        Server([uniform_table()], port=port)  # type: ignore[arg-type]


def test_a_port_in_use_by_another_server_is_refused_and_the_first_keeps_it() -> None:
    with Server([uniform_table()], port=0) as first:
        with pytest.raises(ValueError, match=f"localhost:{first.port}.*already in use"):
            Server([Table.queue("other", 1)], port=first.port)
        # Every connection reaches the first server.
        for _ in range(5):
            assert set(Client(f"localhost:{first.port}").server_info(timeout=10)) == {"t"}


def test_a_port_in_use_by_a_plain_socket_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} is already in use"):
            Server([uniform_table()], port=port, host="127.0.0.1")


def _loopback_listener(family: int) -> socket.socket:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    listener.listen()
    return listener


def _has_ipv6_loopback() -> bool:
    try:
        _loopback_listener(socket.AF_INET6).close()
    except OSError:
        return False
    return True


def test_localhost_is_bound_on_both_loopback_addresses() -> None:
    from reverb_py.server import _server

    expected = ["[::1]", "127.0.0.1"] if _has_ipv6_loopback() else ["127.0.0.1"]
    assert _server._bind_targets("localhost") == expected
    assert _server._bind_targets("127.0.0.1") == ["127.0.0.1"]
    assert _server._bind_targets("[::]") == ["[::]"]


def test_a_free_port_is_asked_for_again_when_another_address_has_it_taken() -> None:
    from reverb_py.server import _server

    asked: list[str] = []

    def add_port(address: str) -> int:
        asked.append(address)
        return 0 if address.startswith("127.0.0.1:") else 5000

    assert _server._bind_all(add_port, ["[::1]", "127.0.0.1"], 0) == (5000, "127.0.0.1")
    assert asked == ["[::1]:0", "127.0.0.1:5000"]
    assert _server._bind_all(lambda address: 7000, ["[::1]", "127.0.0.1"], 0) == (7000, None)


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_an_explicit_port_held_on_one_loopback_address_is_refused_naming_it(family) -> None:
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here: localhost is one address")
    with _loopback_listener(family) as taken:
        port = taken.getsockname()[1]
        held = "[::1]" if family == socket.AF_INET6 else "127.0.0.1"
        with pytest.raises(ValueError, match=rf"localhost:{port}: .*in use on {re.escape(held)}$"):
            Server([uniform_table()], port=port)


async def test_a_new_client_reaches_a_server_back_on_the_same_port_at_once() -> None:
    """The connections of an older client, refused while the server was away, wait out
    their reconnect backoff (a second or more); a client made after the server came back
    has connections of its own and samples at once."""
    first = Server([Table.queue("q", 10)], port=0)
    try:
        port = first.port
        async with aio.Client(f"localhost:{port}") as older:
            assert set(await older.server_info(timeout=10)) == {"q"}
            first.stop()
            with pytest.raises(errors.UnavailableError):
                async for _ in older.sample("q", 1, emit_timesteps=False):
                    pass
            with Server([Table.queue("q", 10)], port=port):
                async with aio.Client(f"localhost:{port}") as newer:
                    # The queue is empty: reaching the server ends in the limiter's timeout.
                    with pytest.raises(errors.DeadlineExceededError):
                        async for _ in newer.sample(
                            "q", 1, emit_timesteps=False, rate_limiter_timeout_ms=10
                        ):
                            pass
    finally:
        first.stop()  # idempotent


def test_an_unresolvable_host_is_a_clean_value_error() -> None:
    # The suite turns warnings into errors: a coroutine never awaited would fail here.
    with pytest.raises(ValueError, match="'no-such-host.invalid' is not an address"):
        Server([uniform_table()], host="no-such-host.invalid")
    import gc

    gc.collect()


@pytest.mark.parametrize("exponent", [-0.5, float("nan"), float("inf")])
def test_a_bad_priority_exponent_is_refused(exponent: float) -> None:
    with pytest.raises(ValueError, match="priority_exponent must be a finite number >= 0"):
        selectors.Prioritized(exponent)


def test_a_bad_mismatch_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_checkpoint_mismatch must be 'warn' or 'refuse'"):
        Server([uniform_table()], on_checkpoint_mismatch="ignore")


# ------------------------------------------------------------------ checkpoint settings


def _checkpoint_of_a_prioritized_table(path: pathlib.Path) -> checkpointers.DefaultCheckpointer:
    checkpointer = checkpointers.DefaultCheckpointer(str(path))
    table = Table(
        "t", selectors.Prioritized(0.8), selectors.Fifo(), 1_000_000, rate_limiters.MinSize(1)
    )
    with Server([table], checkpointer=checkpointer) as server:
        client = server.localhost_client()
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"a": 1})
            writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})
        client.checkpoint()
    return checkpointer


def test_a_checkpoint_that_overrides_the_config_is_named_in_a_warning(tmp_path, caplog) -> None:
    checkpointer = _checkpoint_of_a_prioritized_table(tmp_path)
    caplog.set_level(logging.WARNING, logger="reverb_py")
    configured = uniform_table(max_size=1000)
    with Server([configured], checkpointer=checkpointer):
        # Reverb's semantics: the checkpoint's settings are served.
        assert configured.info.max_size == 1_000_000
        assert configured.info.sampler_options.WhichOneof("distribution") == "prioritized"
        assert configured.info.current_size == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "table 't' max_size: configured 1000, checkpoint 1000000" in text for text in warnings
    ), warnings
    assert any(
        "sampler: configured Uniform(), checkpoint Prioritized(priority_exponent=0.8" in text
        for text in warnings
    ), warnings
    # Settings that agree are not mentioned.
    assert not any("remover" in text or "rate_limiter" in text for text in warnings), warnings


def test_a_matching_checkpoint_logs_no_warning(tmp_path, caplog) -> None:
    checkpointer = _checkpoint_of_a_prioritized_table(tmp_path)
    caplog.set_level(logging.WARNING, logger="reverb_py")
    same = Table(
        "t", selectors.Prioritized(0.8), selectors.Fifo(), 1_000_000, rate_limiters.MinSize(1)
    )
    with Server([same], checkpointer=checkpointer, on_checkpoint_mismatch="refuse"):
        assert same.info.current_size == 1
    # (A client of the first server may log its stream's end; only this one matters.)
    overrides = [r for r in caplog.records if "overrides the configuration" in r.getMessage()]
    assert not overrides


def test_a_checkpoint_that_differs_is_refused_on_request(tmp_path) -> None:
    checkpointer = _checkpoint_of_a_prioritized_table(tmp_path)
    configured = uniform_table(max_size=1000)
    with pytest.raises(ValueError) as caught:
        Server([configured], checkpointer=checkpointer, on_checkpoint_mismatch="refuse")
    text = str(caught.value)
    assert "max_size: configured 1000, checkpoint 1000000" in text
    assert "sampler: configured Uniform()" in text
    # Nothing was loaded into the table.
    assert configured.info.current_size == 0
    assert configured.info.max_size == 1000


# ------------------------------------------------------------------ deep signatures


def _nested_spec(depth: int, kind: type) -> object:
    import reverb_py

    spec: object = reverb_py.TensorSpec((), "float32")
    for _ in range(depth):
        spec = {"a": spec} if kind is dict else kind([spec])
    return spec


@pytest.mark.parametrize("depth, kind", [(31, dict), (33, dict), (47, list), (47, tuple)])
def test_a_signature_too_deep_for_a_reply_is_refused_when_the_table_is_built(depth, kind):
    with pytest.raises(ValueError, match="signature is nested too deeply"):
        Table(
            "t",
            selectors.Uniform(),
            selectors.Fifo(),
            10,
            rate_limiters.MinSize(1),
            signature=_nested_spec(depth, kind),
        )


@pytest.mark.parametrize("depth, kind", [(30, dict), (46, list)])
def test_the_deepest_accepted_signature_is_served(depth, kind) -> None:
    table = Table(
        "t",
        selectors.Uniform(),
        selectors.Fifo(),
        10,
        rate_limiters.MinSize(1),
        signature=_nested_spec(depth, kind),
    )
    with Server([table]) as server:
        info = server.localhost_client().server_info(timeout=10)
        assert info["t"].signature == _nested_spec(depth, kind)
