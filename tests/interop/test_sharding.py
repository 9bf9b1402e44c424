"""dm-reverb's client against sharded reverb_py servers: one target naming three servers.

dm-reverb's writers spread over the servers by round robin as reverb_py's do, its
samples come from every server, and reverb_py's ``server_info_by_server`` sees what it
wrote.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import reverb_py

from ._sides import ClientSide

TABLE = "sharded"
NUM_SERVERS = 3
# A new channel may start a writer or two before every connection is up.
TOLERANCE = 2


@pytest.fixture
def shards() -> Iterator[list[reverb_py.Server]]:
    started = [
        reverb_py.Server(
            [
                reverb_py.Table(
                    TABLE,
                    sampler=reverb_py.selectors.Uniform(),
                    remover=reverb_py.selectors.Fifo(),
                    max_size=10_000,
                    rate_limiter=reverb_py.rate_limiters.MinSize(1),
                )
            ],
            port=0,
        )
        for _ in range(NUM_SERVERS)
    ]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.mark.parametrize("client_fixture", ["dm_client", "rp_sync_client"])
def test_clients_spread_writers_and_samples_over_sharded_servers(
    client_fixture: str, shards: list[reverb_py.Server], request: pytest.FixtureRequest
) -> None:
    client: ClientSide = request.getfixturevalue(client_fixture)
    target = "ipv4:" + ",".join(f"127.0.0.1:{server.port}" for server in shards)
    client.call("write_short_episodes", address=target, table=TABLE, count=30)
    by_server = reverb_py.Client(target).server_info_by_server(timeout=30)
    counts = [info[TABLE].current_size for info in by_server.values()]
    assert sum(counts) == 30, f"[{client_fixture}] {counts}"
    for count in counts:
        assert abs(count - 10) <= TOLERANCE, f"[{client_fixture}] writers per server: {counts}"

    values = client.call("sample_one_at_a_time", address=target, table=TABLE, calls=30)
    assert len(values) == 30 and set(values) <= set(range(30))
    served = [
        info[TABLE].rate_limiter_info.sample_stats.completed
        for info in reverb_py.Client(target).server_info_by_server(timeout=30).values()
    ]
    assert sum(served) == 30 and all(count > 0 for count in served), (
        f"[{client_fixture}] samples per server: {served}"
    )
