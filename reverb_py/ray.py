"""Replay servers as Ray actors, reached through one sharded target (imports ray).

:func:`start_servers` starts ``num_servers`` :class:`reverb_py.Server` s, one per Ray
actor, and returns a :class:`ServerGroup` naming them all in one gRPC target
(``ipv4:ip1:p1,ip2:p2,...``, or ``ipv6:[a]:p,...`` when the nodes have IPv6 addresses).
A :class:`reverb_py.Client` of that target spreads its writers and samplers over every
server by round robin, so actors (Ray tasks or actors of their own) and the learner
pass the target string around, not handles::

    group = reverb_py.ray.start_servers(make_tables, num_servers=2)
    with group:
        collect.remote(group.target)
        samples = group.client().sample("replay", num_samples=32)

The tables are built in each server actor: ``tables`` is a zero-argument callable
returning them (Ray pickles it with cloudpickle; a lambda or a local function will do),
or a list of tables, pickled as it stands (items included), each server starting from
its own copy. Each server binds ``port`` on ``host`` of the node Ray placed it on
(``port=0``: a free port) and reports that node's IP (``ray.util.get_node_ip_address()``)
and the port it bound. The default ``host="0.0.0.0"`` is every IPv4 interface, since the
other nodes connect to the node's IP; nodes with IPv6 addresses need ``host="[::]"``. A
server other machines reach serves anyone that connects unless ``server_options`` give
it a token or TLS (``{"token": ...}``: the keyword arguments of :class:`reverb_py.Server`),
and logs a warning saying so.

With ``checkpointer_dir``, server ``i`` keeps its checkpoints in
``<checkpointer_dir>/server-<i>`` on its node and loads the newest one found there when
it starts; :meth:`ServerGroup.checkpoint` has every server write one. A group started
again with the same directory finds its items again if Ray puts each server on the node
that holds its directory (a shared file system, or one node).

``actor_options`` go to every server actor's ``.options()`` (``num_cpus``, ``resources``,
``scheduling_strategy="SPREAD"`` to put the servers on different nodes, ...). Ray's
defaults hold no CPU once an actor has started.

A key lives on the server its item was written to: priority updates go to every shard
(:meth:`reverb_py.Client.shard_clients`). :meth:`ServerGroup.stop` stops every server,
then kills its actor; a group left running lives as long as its actors (until
``ray.shutdown()`` or the end of the driver).
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

try:
    import ray
except ImportError as _error:
    raise ImportError("reverb_py.ray needs Ray: pip install 'reverb_py[ray]'") from _error
from ray import cloudpickle

import reverb_py
from reverb_py.table import Table

__all__ = ["ServerGroup", "start_servers"]

_STOP_TIMEOUT_S = 60.0
"""How long :meth:`ServerGroup.stop` waits for a server to stop before killing its actor."""

_KILL_TIMEOUT_S = 30.0
"""How long :meth:`ServerGroup.stop` waits for killed actors to be dead."""

_Tables = Callable[[], Sequence[Table]] | Sequence[Table]

# Typed names for mypy where Ray's own annotations are installed.
_node_ip_address: Callable[[], str] = ray.util.get_node_ip_address
_pickle: Callable[[object], bytes] = cloudpickle.dumps


class _ServerActor:
    """One server in a Ray actor (``ray.remote`` is applied in :func:`start_servers`)."""

    def __init__(
        self,
        tables: _Tables,
        port: int,
        host: str,
        server_options: dict[str, Any],
        checkpoint_path: str | None,
    ) -> None:
        built = tables() if callable(tables) else tables
        if checkpoint_path is not None:
            # Built here: a checkpointer holds a lock and does not pickle.
            server_options = {
                **server_options,
                "checkpointer": reverb_py.checkpointers.DefaultCheckpointer(checkpoint_path),
            }
        self._server = reverb_py.Server(list(built), port=port, host=host, **server_options)

    def address(self) -> tuple[str, int]:
        """The node's IP and the port the server bound."""
        return _node_ip_address(), self._server.port

    def checkpoint(self) -> str:
        return self._server.checkpoint()

    def stop(self) -> None:
        self._server.stop()


def _stop_actors(actors: Sequence[Any]) -> None:
    """Stops every actor's server (all at once), kills the actors, and returns once
    every actor is dead (or :data:`_KILL_TIMEOUT_S` passed)."""
    pending = [actor.stop.remote() for actor in actors]
    for actor, stopping in zip(actors, pending):
        try:
            ray.get(stopping, timeout=_STOP_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError):
            pass  # Dead already, or stuck: killed below.
        finally:
            ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + _KILL_TIMEOUT_S
    for actor in actors:
        _wait_dead(actor, deadline)


def _wait_dead(actor: Any, deadline: float) -> None:
    """Returns once a call to the killed ``actor`` fails as a dead actor's does.

    ``ray.kill`` only asks Ray to end the actor: a call made right after it may still be
    served. Each call that is served is followed by another, a little later, until one
    fails or ``deadline`` passes (then the actor is left to Ray, as killed).
    """
    pause = 0.001
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        try:
            ray.get(actor.address.remote(), timeout=remaining)
        except ray.exceptions.RayActorError:
            return  # Dead.
        except (ray.exceptions.RayError, TimeoutError):
            return  # Not answering: nothing more to wait for here.
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ipaddress.ip_address(ip).version == 6 else f"{ip}:{port}"


class ServerGroup:
    """Servers running in Ray actors, started by :func:`start_servers`.

    Attributes:
      actors: The actor handles, in the order of :attr:`addresses`.
      addresses: Each server's ``ip:port`` (``[ip]:port`` for an IPv6 address).
    """

    def __init__(self, actors: Sequence[Any], nodes: Sequence[tuple[str, int]]) -> None:
        self.actors: list[Any] = list(actors)
        self._nodes = list(nodes)
        self.addresses: list[str] = [_address(ip, port) for ip, port in self._nodes]
        self._stopped = False

    @property
    def target(self) -> str:
        """One gRPC target naming every server: ``ipv4:a:p,b:p`` or ``ipv6:[a]:p,[b]:p``.

        Raises:
          ValueError: some servers have IPv4 addresses and others IPv6 (no target
            names both); use :attr:`addresses`.
        """
        versions = {ipaddress.ip_address(ip).version for ip, _ in self._nodes}
        if len(versions) > 1:
            raise ValueError(
                f"The servers have IPv4 and IPv6 addresses ({', '.join(self.addresses)}): "
                "no single target names them all."
            )
        scheme = "ipv6:" if versions == {6} else "ipv4:"
        return scheme + ",".join(self.addresses)

    def client(self, *args: Any, **kwargs: Any) -> reverb_py.Client:
        """A :class:`reverb_py.Client` of :attr:`target` (other arguments: the client's)."""
        return reverb_py.Client(self.target, *args, **kwargs)

    def checkpoint(self) -> list[str]:
        """Has every server write a checkpoint; returns their paths (on each server's
        node), in the order of :attr:`addresses`."""
        paths: list[str] = ray.get([actor.checkpoint.remote() for actor in self.actors])
        return paths

    def stop(self) -> None:
        """Stops every server, then kills its actor. Idempotent.

        A server that does not stop within a minute, or whose actor has already died,
        is killed all the same. Returns once every actor is dead (a call to it raises
        ``RayActorError``), or after 30 seconds more.
        """
        if self._stopped:
            return
        self._stopped = True
        if not ray.is_initialized():
            return  # ray.shutdown() ended the actors.
        _stop_actors(self.actors)

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running"
        return f"ServerGroup({self.addresses!r}, {state})"


def start_servers(
    tables: _Tables,
    num_servers: int = 2,
    *,
    port: int = 0,
    host: str = "0.0.0.0",
    checkpointer_dir: str | os.PathLike[str] | None = None,
    actor_options: Mapping[str, Any] | None = None,
    server_options: Mapping[str, Any] | None = None,
) -> ServerGroup:
    """Starts ``num_servers`` servers, each in a Ray actor; returns once all serve.

    Args:
      tables: A zero-argument callable returning the tables, called in each actor; or a
        sequence of tables, which must pickle.
      num_servers: How many servers (and actors); at least 1.
      port: The port each server binds on its node; 0 picks a free one. A fixed port
        suits at most one server per node.
      host: The interface each server binds (``"[::]"`` for IPv6 nodes).
      checkpointer_dir: A directory on the servers' nodes; server ``i`` checkpoints to,
        and loads from, its ``server-<i>`` folder. None: each server's default (a fresh
        temporary directory).
      actor_options: Passed to the actor class's ``.options()`` for every server.
      server_options: Further keyword arguments of :class:`reverb_py.Server` (``token``,
        ``tls``, ``limits``, ...). They must pickle, which a checkpointer does not: use
        ``checkpointer_dir``.

    Raises:
      ValueError: ``num_servers`` below 1, or both ``checkpointer_dir`` and a
        ``checkpointer`` in ``server_options``.
      TypeError: ``tables`` is a sequence that does not pickle.
      ray.exceptions.RayActorError: a server did not start (the error names why); the
        actors already started are stopped.
    """
    if num_servers < 1:
        raise ValueError(f"num_servers must be at least 1, got {num_servers}")
    if not callable(tables):
        tables = list(tables)
        try:
            _pickle(tables)
        except Exception as error:
            raise TypeError(
                "The tables do not pickle; pass a zero-argument callable that builds "
                f"them in each server actor instead: {error}"
            ) from error
    actor_class: Any = ray.remote(_ServerActor).options(**dict(actor_options or {}))
    options = dict(server_options or {})
    if checkpointer_dir is not None and options.get("checkpointer") is not None:
        raise ValueError("Give checkpointer_dir or a checkpointer in server_options, not both.")
    paths = [
        None if checkpointer_dir is None else os.path.join(checkpointer_dir, f"server-{index}")
        for index in range(num_servers)
    ]
    actors = [actor_class.remote(tables, port, host, options, path) for path in paths]
    try:
        nodes = ray.get([actor.address.remote() for actor in actors])
    except BaseException:
        _stop_actors(actors)
        raise
    return ServerGroup(actors, [(str(ip), int(number)) for ip, number in nodes])
