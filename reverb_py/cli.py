"""``reverb-py`` (``python -m reverb_py``): look at and operate a running server.

Commands::

    reverb-py info [ADDRESS]                 every table: size, selectors, limiter, signature
    reverb-py checkpoint [ADDRESS]           ask the server to write a checkpoint
    reverb-py reset [ADDRESS] TABLE [--yes]  remove every item of TABLE (asks first)
    reverb-py run SCRIPT [ARGS]              run a program written for dm-reverb on reverb_py
                                             (``import reverb`` gives reverb_py; see
                                             :mod:`reverb_py.run`)

ADDRESS is ``host:port`` (or any gRPC target); without it, ``$REVERB_PY_ADDRESS``, else
``localhost:8000`` (the daemon's default). Nothing listening there (connection refused)
fails at once; a server that does not answer gets ``--timeout`` seconds.

Credentials: ``--token-file`` (or ``REVERB_PY_TOKEN`` / ``REVERB_PY_TOKEN_FILE``),
``--tls-ca-file`` for a server with TLS, ``--tls-cert-file`` and ``--tls-key-file`` for
mutual TLS. The token is never taken as an argument (other users could read it in the
process list). Exit status: 0 done, 1 the call failed, 2 bad arguments, 3 a reset that
was not confirmed.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import reverb_py
from reverb_py import _secrets, errors
from reverb_py._client.targets import addresses
from reverb_py.client import Client
from reverb_py.reverb_types import TableInfo

__all__ = ["ADDRESS_ENV", "DEFAULT_ADDRESS", "format_info", "main"]

DEFAULT_TIMEOUT = 10.0
DEFAULT_ADDRESS = "localhost:8000"
ADDRESS_ENV = "REVERB_PY_ADDRESS"
# How long the check that something listens waits for a connection.
_CONNECT_TIMEOUT_S = 1.0


def _selector(options: Any) -> str:
    kind = options.WhichOneof("distribution")
    if kind == "prioritized":
        return f"Prioritized(priority_exponent={options.prioritized.priority_exponent:g})"
    if kind == "heap":
        return "MinHeap" if options.heap.min_heap else "MaxHeap"
    return {"fifo": "Fifo", "lifo": "Lifo", "uniform": "Uniform"}.get(kind or "", str(kind))


def _limiter(info: Any) -> str:
    return (
        f"samples_per_insert={info.samples_per_insert:g} "
        f"min_size_to_sample={info.min_size_to_sample} "
        f"min_diff={info.min_diff:g} max_diff={info.max_diff:g}"
    )


def _signature(signature: Any) -> list[str]:
    if signature is None:
        return ["none"]
    from reverb_py._codec.signature import flatten_signature

    lines = []
    for path, spec in flatten_signature(signature):
        name = path or "(root)"
        if spec.shape is None:
            shape = "[...]"
        else:
            shape = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
        lines.append(f"{name}: {spec.dtype.name}{shape}")
    return lines or ["(empty)"]


def format_info(infos: dict[str, TableInfo]) -> str:
    """A readable report of ``Client.server_info()``: a summary row per table, then each
    table's selectors, limiter and signature."""
    header = ("table", "size", "max_size", "max_times_sampled", "inserts", "samples", "episodes")
    rows = [
        (
            name,
            str(info.current_size),
            str(info.max_size),
            str(info.max_times_sampled),
            str(info.rate_limiter_info.insert_stats.completed),
            str(info.rate_limiter_info.sample_stats.completed),
            str(info.num_episodes),
        )
        for name, info in sorted(infos.items())
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, *rows]
    ]
    for name, info in sorted(infos.items()):
        lines += [
            "",
            f"{name}:",
            f"  sampler:      {_selector(info.sampler_options)}",
            f"  remover:      {_selector(info.remover_options)}",
            f"  rate limiter: {_limiter(info.rate_limiter_info)}",
            "  signature:    " + "\n                ".join(_signature(info.signature)),
        ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reverb-py", description="Look at and operate a running replay server."
    )
    parser.add_argument("--version", action="version", version=f"reverb_py {reverb_py.__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "address",
        nargs="?",
        help=f"the server, host:port (default: ${ADDRESS_ENV}, else {DEFAULT_ADDRESS})",
    )
    common.add_argument(
        "--token-file", metavar="PATH", help="file holding the bearer token (or REVERB_PY_TOKEN)"
    )
    common.add_argument("--tls-ca-file", metavar="PATH", help="CA of the server's certificate")
    common.add_argument("--tls-cert-file", metavar="PATH", help="client certificate (mutual TLS)")
    common.add_argument("--tls-key-file", metavar="PATH", help="client key (mutual TLS)")
    common.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the server (default {DEFAULT_TIMEOUT:g})",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("info", parents=[common], help="every table of the server")
    commands.add_parser("checkpoint", parents=[common], help="write a checkpoint")
    reset = commands.add_parser("reset", parents=[common], help="remove every item of a table")
    reset.add_argument("table")
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    # Handled before parsing (its arguments are the program's); listed here for --help.
    commands.add_parser(
        "run",
        help="run a program written for dm-reverb: SCRIPT [ARGS] or -m MODULE [ARGS]",
        add_help=False,
    )
    return parser


def _client(args: argparse.Namespace) -> Client:
    token = None
    if args.token_file is not None:
        token = _secrets.read_token_file(args.token_file, "--token-file")
    return Client(
        args.address,
        token=token,
        root_certificates=args.tls_ca_file,
        private_key=args.tls_key_file,
        certificate_chain=args.tls_cert_file,
    )


def _host_port(address: str) -> tuple[str, int] | None:
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in host:
        return None
    return host, int(port)


def unreachable(target: str) -> str | None:
    """Why nothing can answer at ``target`` (every address refuses connections, or its
    name does not resolve), or None: something listens, or it cannot be told here (a
    slow network, a target that is not ``host:port``)."""
    try:
        listed = addresses(target)
    except (OSError, ValueError):
        return None
    refused = 0
    for address in listed:
        host_port = _host_port(address)
        if host_port is None:
            return None
        host, port = host_port
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            return f"cannot resolve {host!r}: {error.strerror}"
        for family, kind, protocol, _, sockaddr in infos:
            with socket.socket(family, kind, protocol) as probe:
                probe.settimeout(_CONNECT_TIMEOUT_S)
                try:
                    probe.connect(sockaddr)
                except ConnectionRefusedError:
                    continue
                except OSError:
                    return None  # Unreachable for now, or slow: gRPC gets --timeout.
            return None
        refused += 1
    if refused and refused == len(listed):
        return "connection refused: no server is listening there"
    return None


def _temporary(path: str) -> bool:
    """Whether ``path`` is a checkpoint in a directory that ``tempfile.mkdtemp`` made
    (a server started without a checkpoint directory)."""
    parent = os.path.dirname(path.rstrip("/"))
    return re.fullmatch(
        r"tmp[a-z0-9_]{8}", os.path.basename(parent)
    ) is not None and os.path.dirname(parent) in (tempfile.gettempdir(), "/tmp", "/var/tmp")


def _size(path: str) -> str:
    """``, 12.3 MB`` for a checkpoint directory on this machine, else nothing."""
    try:
        size = sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    except OSError:
        return ""
    if size < 1_000_000:
        return f", {size / 1e3:.1f} kB"
    return f", {size / 1e6:.1f} MB"


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Runs one command; returns the exit status."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        from reverb_py import run

        return run.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.timeout <= 0:
        print("reverb-py: --timeout must be positive", file=stderr)
        return 2
    if args.address is None:
        args.address = os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    try:
        client = _client(args)
    except ValueError as error:
        print(f"reverb-py: {error}", file=stderr)
        return 2
    say: Callable[[str], None] = lambda text: print(text, file=stdout)  # noqa: E731
    tell: Callable[[str], None] = lambda text: print(text, file=stderr, flush=True)  # noqa: E731
    reason = unreachable(args.address)
    if reason is not None:
        tell(f"reverb-py: cannot reach {args.address}: {reason}")
        return 1
    try:
        # Every command first waits (at most --timeout) for the server to answer.
        infos = client.server_info(timeout=args.timeout)
        if args.command == "info":
            say(format_info(infos))
        elif args.command == "checkpoint":
            tell(f"writing a checkpoint of {args.address}...")
            started = time.monotonic()
            path = client.checkpoint()
            say(path)
            tell(f"checkpoint written in {time.monotonic() - started:.2f} s{_size(path)}: {path}")
            if _temporary(path):
                tell(
                    f"reverb-py: warning: {os.path.dirname(path)} is a temporary directory: "
                    "the server will not load this checkpoint when it restarts (start it "
                    "with --checkpoint-dir or checkpoint_dir)"
                )
        elif args.command == "reset":
            if args.table not in infos:
                print(
                    f"reverb-py: no table {args.table!r} (tables: {', '.join(sorted(infos))})",
                    file=stderr,
                )
                return 1
            if not args.yes:
                size = infos[args.table].current_size
                stdout.write(
                    f"Remove all {size} items of table {args.table!r} at {args.address}? [y/N] "
                )
                stdout.flush()
                answer = stdin.readline().strip().lower()
                if answer not in ("y", "yes"):
                    say("not reset")
                    return 3
            client.reset(args.table)
            say(f"table {args.table!r} reset")
    except errors.DeadlineExceededError:
        print(
            f"reverb-py: {args.address} did not answer within {args.timeout:g}s "
            "(not running, or TLS settings that do not match the server's)",
            file=stderr,
        )
        return 1
    except errors.ReverbError as error:
        print(f"reverb-py: {type(error).__name__}: {error}", file=stderr)
        return 1
    return 0
