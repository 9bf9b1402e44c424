"""Clients of several servers at once (sharding): writers and samplers spread by round robin.

Three servers on loopback addresses, one client target naming them all. Servers in
the test's process for spreading and sampling; daemons in their own processes where one
is killed mid-run.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py
from reverb_py import errors
from reverb_py._client import targets
from tests.integration.test_daemon import kill, read_address

ROOT = pathlib.Path(__file__).parents[2]
TABLE = "replay"
NUM_SERVERS = 3


def table(min_size: int = 1) -> reverb_py.Table:
    return reverb_py.Table(
        TABLE,
        sampler=reverb_py.selectors.Uniform(),
        remover=reverb_py.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb_py.rate_limiters.MinSize(min_size),
    )


@pytest.fixture
def servers() -> Iterator[list[reverb_py.Server]]:
    started = [reverb_py.Server([table()], port=0) for _ in range(NUM_SERVERS)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def sharded_target(servers: list[reverb_py.Server]) -> str:
    return "ipv4:" + ",".join(f"127.0.0.1:{server.port}" for server in servers)


def sizes(servers: list[reverb_py.Server], hosts: list[str] | None = None) -> list[int]:
    hosts = hosts or ["127.0.0.1"] * len(servers)
    return [
        reverb_py.Client(f"{host}:{server.port}").server_info(timeout=30)[TABLE].current_size
        for host, server in zip(hosts, servers)
    ]


def samples_served(servers: list[reverb_py.Server]) -> list[int]:
    return [
        reverb_py.Client(f"127.0.0.1:{server.port}")
        .server_info(timeout=30)[TABLE]
        .rate_limiter_info.sample_stats.completed
        for server in servers
    ]


def read_all(target: str, **options: int) -> int:
    """How many samples a ``TrajectoryIterator`` of ``target`` yields before it ends."""
    iterator = reverb_py.data.TrajectoryIterator(
        target, TABLE, {"x": np.float32}, {"x": ()}, **options
    )
    try:
        return sum(1 for _ in iterator)
    finally:
        iterator.close()


def write_items(client: reverb_py.Client, count: int, *, start: int = 0) -> None:
    """``count`` short-lived writers of one item each (as actors' episodes)."""
    for step in range(start, start + count):
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"x": np.float32(step)})
            writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
            writer.flush()


# A client's first writer waits until its channel has reached every server; from then on
# writers go round robin, one server after the other (gRPC's round robin may start over
# at another server once, when it renews its picker).
SPREAD_TOLERANCE = 1


def test_writers_made_at_once_by_a_new_client_spread_over_every_server(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    writers = [client.trajectory_writer(num_keep_alive_refs=1) for _ in range(2 * NUM_SERVERS)]
    try:
        for step, writer in enumerate(writers):
            writer.append({"x": np.float32(step)})
            writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
        for writer in writers:
            writer.flush()
    finally:
        for writer in writers:
            writer.close()
    counts = sizes(servers)
    assert sum(counts) == 2 * NUM_SERVERS
    assert all(count > 0 for count in counts), counts


def test_short_lived_writers_spread_over_every_server(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    write_items(client, 30)
    counts = sizes(servers)
    assert sum(counts) == 30
    for count in counts:
        assert abs(count - 10) <= SPREAD_TOLERANCE, counts


def test_writers_spread_over_two_servers() -> None:
    # A writer asks for the tables' signatures once per client, not once per writer: with
    # two servers, a ServerInfo call before every stream would send every stream to the
    # same server.
    pair = [reverb_py.Server([table()], port=0) for _ in range(2)]
    try:
        write_items(reverb_py.Client(sharded_target(pair)), 20)
        counts = sizes(pair)
    finally:
        for server in pair:
            server.stop()
    assert sum(counts) == 20
    for count in counts:
        assert abs(count - 10) <= SPREAD_TOLERANCE, counts


def test_asyncio_writers_spread_over_every_server(servers) -> None:
    async def main() -> None:
        client = reverb_py.aio.Client(sharded_target(servers))
        try:
            for step in range(30):
                async with await client.trajectory_writer(1) as writer:
                    writer.append({"x": np.float32(step)})
                    writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
                    await writer.flush()
        finally:
            await client.close()

    asyncio.run(main())
    counts = sizes(servers)
    assert sum(counts) == 30
    for count in counts:
        assert abs(count - 10) <= SPREAD_TOLERANCE, counts


def test_a_writer_stays_on_its_server(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for step in range(20):
            writer.append({"x": np.float32(step)})
            writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
            writer.flush()
    assert sorted(sizes(servers)) == [0, 0, 20]


def test_samples_come_from_every_server(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    write_items(client, 30)
    for _ in range(30):
        # Each call is a new stream: the next server.
        samples = list(
            client.sample(
                TABLE, num_samples=1, rate_limiter_timeout_ms=10_000, emit_timesteps=False
            )
        )
        assert len(samples) == 1
    served = samples_served(servers)
    assert sum(served) == 30
    assert all(count > 0 for count in served), served


def test_dataset_streams_spread_over_every_server(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    write_items(client, 30)
    received = read_all(
        sharded_target(servers),
        max_in_flight_samples_per_worker=2,
        num_workers_per_iterator=1,
        max_samples_per_stream=2,
        max_samples=60,
    )
    assert received == 60
    served = samples_served(servers)
    assert sum(served) >= 60
    assert all(count > 0 for count in served), served


def test_a_sample_with_a_timeout_does_not_wait_on_an_empty_server(servers) -> None:
    # Only the first server holds items; the others would hold a sample forever.
    write_items(reverb_py.Client(f"127.0.0.1:{servers[0].port}"), 3)
    client = reverb_py.Client(sharded_target(servers))
    for _ in range(2 * NUM_SERVERS):
        samples = list(
            client.sample(
                TABLE, num_samples=2, rate_limiter_timeout_ms=60_000, emit_timesteps=False
            )
        )
        assert len(samples) == 2
    assert samples_served(servers)[1:] == [0, 0]


def test_a_sample_no_server_can_serve_ends_with_the_rate_limiter_timeout(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    with pytest.raises(errors.DeadlineExceededError):
        list(client.sample(TABLE, num_samples=1, rate_limiter_timeout_ms=300, emit_timesteps=False))


def test_a_dataset_with_a_timeout_ends_only_when_no_server_serves(servers) -> None:
    write_items(reverb_py.Client(f"127.0.0.1:{servers[0].port}"), 4)
    received = read_all(
        sharded_target(servers),
        max_in_flight_samples_per_worker=1,
        num_workers_per_iterator=1,
        max_samples_per_stream=1,
        max_samples=12,
        rate_limiter_timeout_ms=200,
    )
    # One server holds items: every sample comes from it, and the empty ones only make
    # the streams move on.
    assert received == 12
    assert samples_served(servers)[0] == 12


def test_a_dataset_does_not_wait_its_whole_timeout_on_an_empty_server(servers) -> None:
    write_items(reverb_py.Client(f"127.0.0.1:{servers[0].port}"), 4)
    received = read_all(
        sharded_target(servers),
        max_in_flight_samples_per_worker=4,
        num_workers_per_iterator=1,
        max_samples=40,
        # Far beyond the test's own time limit: a stream waiting it out on an empty
        # server would fail the test.
        rate_limiter_timeout_ms=600_000,
    )
    assert received == 40
    assert samples_served(servers)[1:] == [0, 0]


def test_a_dataset_no_server_serves_ends_after_its_timeout(servers) -> None:
    assert (
        read_all(
            sharded_target(servers), max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=300
        )
        == 0
    )


def test_server_info_says_which_server_answered(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    sources = {client.server_info_with_source(timeout=30)[0] for _ in range(2 * NUM_SERVERS)}
    assert sources == {f"localhost:{server.port}" for server in servers}


def test_server_info_by_server_asks_every_server(servers) -> None:
    write_items(reverb_py.Client(f"127.0.0.1:{servers[1].port}"), 2)
    by_server = reverb_py.Client(sharded_target(servers)).server_info_by_server(timeout=30)
    assert list(by_server) == [f"127.0.0.1:{server.port}" for server in servers]
    assert [info[TABLE].current_size for info in by_server.values()] == [0, 2, 0]


def test_priorities_reach_the_server_holding_the_key_through_the_shard_clients(servers) -> None:
    client = reverb_py.Client(sharded_target(servers))
    write_items(client, 3)
    keys = {
        shard.server_address: [
            sample.info.key for sample in shard.sample(TABLE, num_samples=1, emit_timesteps=False)
        ]
        for shard in client.shard_clients()
    }
    for shard in client.shard_clients():
        shard.mutate_priorities(TABLE, {key: 7.0 for found in keys.values() for key in found})
    for shard in client.shard_clients():
        (sample,) = shard.sample(TABLE, num_samples=1, emit_timesteps=False)
        assert sample.info.priority == 7.0


def test_targets_name_their_addresses() -> None:
    assert targets.addresses("ipv4:127.0.0.1:1,127.0.0.2:2") == ["127.0.0.1:1", "127.0.0.2:2"]
    assert targets.addresses("ipv6:[::1]:1,[::1]:2") == ["[::1]:1", "[::1]:2"]
    assert targets.addresses("localhost:5") == ["localhost:5"]
    assert "127.0.0.1:5" in targets.addresses("dns:///localhost:5")
    assert targets.num_shards("ipv4:127.0.0.1:1,127.0.0.2:2,127.0.0.3:3") == 3
    assert targets.num_shards("localhost:5") == 1
    with pytest.raises(ValueError, match="DNS server"):
        targets.addresses("dns://127.0.0.1:53/replay.test:5")
    assert targets.num_shards("dns://127.0.0.1:53/replay.test:5") == 1


# ---------------------------------------------------------------- a name in DNS


@pytest.fixture
def dns_name() -> Iterator[tuple[str, int, list[reverb_py.Server]]]:
    """Three servers on 127.0.0.1-3 (one port) and a DNS server naming them one name.

    Yields ``(target, port, servers)``; the target asks that DNS server, as a client in
    a cluster asks the cluster's (a headless service's name: one address per server).
    """
    dnslib_server = pytest.importorskip("dnslib.server")
    dnslib = pytest.importorskip("dnslib")
    loopbacks = [f"127.0.0.{index}" for index in range(1, NUM_SERVERS + 1)]

    class Resolver(dnslib_server.BaseResolver):  # type: ignore[misc]
        def resolve(self, request, handler):  # type: ignore[no-untyped-def]
            reply = request.reply()
            question = request.q
            if str(question.qname) == "replay.test." and question.qtype == dnslib.QTYPE.A:
                for address in loopbacks:
                    reply.add_answer(
                        dnslib.RR(question.qname, dnslib.QTYPE.A, rdata=dnslib.A(address), ttl=60)
                    )
            return reply

    quiet = dnslib_server.DNSLogger(log="-request,-reply,-truncated,-error", prefix=False)
    dns = dnslib_server.DNSServer(Resolver(), port=0, address="127.0.0.1", logger=quiet)
    dns.start_thread()
    started = [reverb_py.Server([table()], port=0, host=loopbacks[0])]
    try:
        port = started[0].port
        started += [reverb_py.Server([table()], port=port, host=host) for host in loopbacks[1:]]
        dns_port = dns.server.server_address[1]
        yield f"dns://127.0.0.1:{dns_port}/replay.test:{port}", port, started
    finally:
        for server in started:
            server.stop()
        dns.stop()
        dns.server.server_close()


def test_a_dns_name_of_several_servers_spreads_writers_and_samples(dns_name) -> None:
    target, port, started = dns_name
    client = reverb_py.Client(target)
    sources = {client.server_info_with_source(timeout=30)[0] for _ in range(2 * NUM_SERVERS)}
    assert sources == {f"127.0.0.{index}:{port}" for index in range(1, NUM_SERVERS + 1)}
    write_items(client, 30)
    counts = sizes(started, [f"127.0.0.{index}" for index in range(1, NUM_SERVERS + 1)])
    assert sum(counts) == 30
    for count in counts:
        assert abs(count - 10) <= SPREAD_TOLERANCE, counts


# ---------------------------------------------------------------- a server killed


def start_daemon(tmp_path: pathlib.Path, name: str) -> tuple[subprocess.Popen[str], str]:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        'port = 0\nhost = "127.0.0.1"\n'
        f'[[tables]]\nname = "{TABLE}"\nmax_size = 100000\n'
        'sampler = {kind = "uniform"}\nremover = {kind = "fifo"}\n'
        'rate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        return process, read_address(process)
    except BaseException:
        kill(process)
        raise


@pytest.fixture
def daemons(tmp_path) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    started: list[tuple[subprocess.Popen[str], str]] = []
    try:
        for index in range(NUM_SERVERS):
            started.append(start_daemon(tmp_path, f"shard{index}"))
        yield started
    finally:
        for process, _ in started:
            kill(process)


FLUSH_TIMEOUT_MS = 60_000


def test_a_server_killed_mid_run_leaves_writers_and_samplers_working(daemons) -> None:
    target = "ipv4:" + ",".join(address for _, address in daemons)
    client = reverb_py.Client(target)
    writers = [client.trajectory_writer(num_keep_alive_refs=1) for _ in range(2 * NUM_SERVERS)]
    steps = itertools.count()

    def write_round() -> None:
        for writer in writers:
            writer.append({"x": np.float32(next(steps))})
            writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
        for writer in writers:
            writer.flush(timeout_ms=FLUSH_TIMEOUT_MS)

    try:
        for _ in range(5):
            write_round()
        before = [info[TABLE].current_size for info in client.server_info_by_server(30).values()]
        assert all(count > 0 for count in before), before

        victim, victim_address = daemons[1]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        # Every writer goes on: those on the killed server reconnect to another one and
        # send again what it had not confirmed.
        for _ in range(5):
            write_round()
        survivors = [address for _, address in daemons if address != victim_address]
        after = {
            address: reverb_py.Client(address).server_info(timeout=30)[TABLE].current_size
            for address in survivors
        }
        held_before = sum(
            count for address, count in zip((a for _, a in daemons), before) if address in after
        )
        assert sum(after.values()) - held_before == 5 * len(writers)

        # Samplers move on to the servers still there, with and without a timeout.
        for _ in range(2 * NUM_SERVERS):
            samples = list(
                client.sample(
                    TABLE, num_samples=3, rate_limiter_timeout_ms=30_000, emit_timesteps=False
                )
            )
            assert len(samples) == 3
            samples = list(client.sample(TABLE, num_samples=3, emit_timesteps=False))
            assert len(samples) == 3
    finally:
        for writer in writers:
            writer.close()


def test_a_dataset_keeps_reading_when_a_server_is_killed(daemons) -> None:
    target = "ipv4:" + ",".join(address for _, address in daemons)
    client = reverb_py.Client(target)
    write_items(client, 30)
    iterator = reverb_py.data.TrajectoryIterator(
        target,
        TABLE,
        {"x": np.float32},
        {"x": ()},
        max_in_flight_samples_per_worker=2,
        num_workers_per_iterator=2,
        max_samples_per_stream=4,
        max_samples=400,
        rate_limiter_timeout_ms=30_000,
    )
    received = collections.Counter[str]()
    try:
        for count, _ in enumerate(iterator):
            if count == 50:
                victim, _ = daemons[0]
                victim.send_signal(signal.SIGKILL)
                victim.wait(timeout=60)
            received["samples"] += 1
    finally:
        iterator.close()
    assert received["samples"] == 400
