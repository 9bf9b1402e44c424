"""reverb_py.ray: servers in Ray actors, Ray tasks writing to them, a learner reading back."""

from __future__ import annotations

import collections
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import ray
from grpc_health.v1 import health_pb2, health_pb2_grpc

import reverb_py
import reverb_py.ray
from reverb_py import errors

TABLE = "replay"
NUM_ACTORS = 4
ITEMS_PER_ACTOR = 15
TIMEOUT_MS = 30_000


SIGNATURE = {
    "obs": reverb_py.TensorSpec([2, 3], np.float32),
    "id": reverb_py.TensorSpec([], np.int64),
}


def queue_tables() -> list[reverb_py.Table]:
    """A table where every item is sampled once, then removed."""
    return [
        reverb_py.Table(
            TABLE,
            sampler=reverb_py.selectors.Fifo(),
            remover=reverb_py.selectors.Fifo(),
            max_size=10_000,
            max_times_sampled=1,
            rate_limiter=reverb_py.rate_limiters.MinSize(1),
            signature=SIGNATURE,
        )
    ]


def uniform_tables() -> list[reverb_py.Table]:
    return [
        reverb_py.Table(
            TABLE,
            sampler=reverb_py.selectors.Uniform(),
            remover=reverb_py.selectors.Fifo(),
            max_size=10_000,
            rate_limiter=reverb_py.rate_limiters.MinSize(1),
            signature=SIGNATURE,
        )
    ]


def observations(item_id: int) -> np.ndarray:
    """The two steps of the item ``collect`` wrote with ``item_id``."""
    return np.array([[item_id] * 3, [item_id + 0.1] * 3], np.float32)


@pytest.fixture
def group(ray_cluster: None) -> Iterator[reverb_py.ray.ServerGroup]:
    started = reverb_py.ray.start_servers(queue_tables, num_servers=2)
    try:
        yield started
    finally:
        started.stop()


@ray.remote
def collect(target: str, actor_id: int, num_items: int) -> tuple[str, list[int]]:
    """An actor: one short-lived writer per item (episodes), items of two steps."""
    client = reverb_py.Client(target)
    written = []
    for episode in range(num_items):
        value = actor_id * 1000 + episode
        with client.trajectory_writer(num_keep_alive_refs=2) as writer:
            for step in range(2):
                writer.append(
                    {"obs": np.full(3, value + step / 10, np.float32), "id": np.int64(value)}
                )
            writer.create_item(
                TABLE, 1.0, {"obs": writer.history["obs"][-2:], "id": writer.history["id"][-1]}
            )
            writer.flush()
        written.append(value)
    return reverb_py.IMPLEMENTATION, written


def sizes(group: reverb_py.ray.ServerGroup) -> dict[str, int]:
    """Each server's item count, asked of a client of that server's address alone."""
    return {
        address: reverb_py.Client(address).server_info(timeout=30)[TABLE].current_size
        for address in group.addresses
    }


def health(address: str) -> int:
    """The server's health status; fails fast when nothing accepts the connection."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status)


def assert_not_serving(address: str) -> None:
    # The listening socket may outlive the server for a moment after its actor is
    # killed: no answer within the timeout counts as stopped, as a refused call does.
    with pytest.raises(grpc.RpcError) as raised:
        health(address)
    assert raised.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_group_names_every_server(group) -> None:
    node_ip = ray.util.get_node_ip_address()
    assert len(group.addresses) == len(group.actors) == 2
    ports = [int(address.rpartition(":")[2]) for address in group.addresses]
    assert all(port > 0 for port in ports) and len(set(ports)) == 2
    assert group.addresses == [f"{node_ip}:{port}" for port in ports]
    assert group.target == "ipv4:" + ",".join(group.addresses)
    assert set(group.client().server_info_by_server(timeout=30)) == set(group.addresses)
    # Each address answers on its own, as the server of that actor.
    for address in group.addresses:
        assert reverb_py.Client(address).server_info(timeout=30)[TABLE].max_times_sampled == 1


def test_actors_write_and_the_learner_reads_every_item_back(group) -> None:
    runs = ray.get(
        [collect.remote(group.target, actor_id, ITEMS_PER_ACTOR) for actor_id in range(NUM_ACTORS)]
    )
    # The actors ran the implementation this run tests (the environment reaches them).
    assert {implementation for implementation, _ in runs} == {reverb_py.IMPLEMENTATION}
    written = [value for _, values in runs for value in values]
    assert len(written) == NUM_ACTORS * ITEMS_PER_ACTOR
    assert sum(sizes(group).values()) == len(written)

    read: list[int] = []
    for sample in group.client().sample(
        TABLE,
        len(written),
        emit_timesteps=False,
        unpack_as_table_signature=True,
        rate_limiter_timeout_ms=TIMEOUT_MS,
    ):
        assert not isinstance(sample, list)
        item_id = int(sample.data["id"])
        np.testing.assert_array_equal(sample.data["obs"], observations(item_id))
        read.append(item_id)
    assert collections.Counter(read) == collections.Counter(written)
    assert sum(sizes(group).values()) == 0
    with pytest.raises(errors.DeadlineExceededError):
        next(iter(group.client().sample(TABLE, 1, rate_limiter_timeout_ms=200)))


def test_trajectory_iterator_reads_from_the_group(ray_cluster) -> None:
    with reverb_py.ray.start_servers(uniform_tables, num_servers=2) as started:
        written: list[int] = []
        # Rounds of writes until every server holds an item: an iterator's stream on an
        # empty server would wait for the rate limiter.
        for round_ in range(10):
            runs = ray.get(
                [collect.remote(started.target, 10 * round_ + actor_id, 3) for actor_id in range(3)]
            )
            written += [value for _, values in runs for value in values]
            if min(sizes(started).values()) > 0:
                break
        assert min(sizes(started).values()) > 0
        iterator = reverb_py.data.TrajectoryIterator.from_table_signature(
            started.target,
            TABLE,
            max_in_flight_samples_per_worker=4,
            num_workers_per_iterator=2,
            rate_limiter_timeout_ms=TIMEOUT_MS,
            max_samples=40,
        )
        read = []
        for sample in iterator:
            item_id = int(sample.data["id"])
            np.testing.assert_array_equal(sample.data["obs"], observations(item_id))
            read.append(item_id)
        assert len(read) == 40
        assert set(read) <= set(written)
        assert sum(sizes(started).values()) == len(written)


def test_stop_stops_every_server_and_kills_every_actor(ray_cluster) -> None:
    with reverb_py.ray.start_servers(queue_tables, num_servers=2) as started:
        addresses = list(started.addresses)
        assert sum(sizes(started).values()) == 0
        assert [health(address) for address in addresses] == [
            health_pb2.HealthCheckResponse.SERVING
        ] * 2
    for actor in started.actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.address.remote(), timeout=60)
    for address in addresses:
        assert_not_serving(address)
    started.stop()  # Idempotent.
    assert "stopped" in repr(started)


def test_a_failed_start_stops_the_servers_that_started(ray_cluster) -> None:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
    # Two servers on one node and one port: the second cannot bind it.
    with pytest.raises(ray.exceptions.RayActorError, match="in use|bind"):
        reverb_py.ray.start_servers(queue_tables, num_servers=2, port=port)
    # The one that bound the port has stopped.
    assert_not_serving(f"127.0.0.1:{port}")


def test_a_list_of_tables_is_copied_to_each_server(ray_cluster) -> None:
    with reverb_py.ray.start_servers(queue_tables(), num_servers=2) as started:
        assert sizes(started) == dict.fromkeys(started.addresses, 0)


def test_each_server_loads_its_own_checkpoint_when_started_again(
    ray_cluster, tmp_path: Path
) -> None:
    with reverb_py.ray.start_servers(
        queue_tables, num_servers=2, checkpointer_dir=tmp_path
    ) as started:
        runs = ray.get([collect.remote(started.target, actor_id, 6) for actor_id in range(3)])
        written = [value for _, values in runs for value in values]
        before = list(sizes(started).values())
        paths = started.checkpoint()
    assert sum(before) == len(written)
    assert [Path(path).parent for path in paths] == [tmp_path / "server-0", tmp_path / "server-1"]

    with reverb_py.ray.start_servers(
        queue_tables, num_servers=2, checkpointer_dir=tmp_path
    ) as again:
        assert list(sizes(again).values()) == before
        read: list[int] = []
        for address, count in zip(again.addresses, before):
            for sample in reverb_py.Client(address).sample(
                TABLE, count, emit_timesteps=False, unpack_as_table_signature=True
            ):
                assert not isinstance(sample, list)
                item_id = int(sample.data["id"])
                np.testing.assert_array_equal(sample.data["obs"], observations(item_id))
                read.append(item_id)
        assert collections.Counter(read) == collections.Counter(written)


def test_checkpointer_dir_and_a_checkpointer_are_refused_together(ray_cluster, tmp_path) -> None:
    checkpointer = reverb_py.checkpointers.DefaultCheckpointer(tmp_path)
    with pytest.raises(ValueError, match="not both"):
        reverb_py.ray.start_servers(
            queue_tables,
            checkpointer_dir=tmp_path,
            server_options={"checkpointer": checkpointer},
        )


def test_tables_that_do_not_pickle_are_refused(ray_cluster) -> None:
    with pytest.raises(TypeError, match="callable"):
        reverb_py.ray.start_servers([threading.Lock()], num_servers=1)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="num_servers"):
        reverb_py.ray.start_servers(queue_tables, num_servers=0)


def test_server_and_actor_options_reach_the_actors(ray_cluster) -> None:
    token = "ray-group-token"
    with reverb_py.ray.start_servers(
        queue_tables,
        num_servers=1,
        actor_options={"num_cpus": 0, "name": "reverb-py-server-0"},
        server_options={"token": token},
    ) as started:
        assert ray.get_actor("reverb-py-server-0") is not None
        assert set(started.client(token).server_info_by_server(timeout=30)) == set(
            started.addresses
        )
        with pytest.raises(errors.ReverbError, match="(?i)unauthenticated|token"):
            reverb_py.Client(started.target, token="").server_info(timeout=30)


def test_targets_of_ipv6_and_mixed_nodes() -> None:
    group = reverb_py.ray.ServerGroup([], [("fd00::1", 4000), ("fd00::2", 4001)])
    assert group.addresses == ["[fd00::1]:4000", "[fd00::2]:4001"]
    assert group.target == "ipv6:[fd00::1]:4000,[fd00::2]:4001"
    mixed = reverb_py.ray.ServerGroup([], [("10.0.0.1", 4000), ("fd00::2", 4001)])
    with pytest.raises(ValueError, match="IPv4 and IPv6"):
        _ = mixed.target


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_import_reverb_py_does_not_import_ray() -> None:
    result = run_python("import sys, reverb_py; print('ray' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_without_ray_names_the_extra() -> None:
    result = run_python(
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "import reverb_py\n"
        "try:\n"
        "    import reverb_py.ray\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    print('imported')\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'reverb_py[ray]'" in result.stdout
