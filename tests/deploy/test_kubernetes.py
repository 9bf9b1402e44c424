"""The Kubernetes recipe in ``deploy/kubernetes``: the manifests against the API schemas,
the files against each other, and the image's entry point and probe run here.

No Docker and no cluster: the image's command runs with this interpreter in place of the
image's ``python``.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

import reverb_py
from reverb_py import cli
from reverb_py.server import _daemon
from tests.integration.test_daemon import kill, read_address

ROOT = pathlib.Path(__file__).parents[2]
RECIPE = ROOT / "deploy" / "kubernetes"
DOCKERFILE = RECIPE / "Dockerfile"
MANIFESTS = sorted(RECIPE.glob("*.yaml"))
# The oldest Kubernetes the manifests are for, and the newest whose schemas are installed.
KUBERNETES_VERSIONS = sorted({"1.31", kubernetes_validate.latest_version().rsplit(".", 1)[0]})
CONFIG_KEY = "server.toml"
TABLE = "replay"


# --- Reading the recipe ---------------------------------------------------------------


def documents() -> list[tuple[str, dict[str, Any]]]:
    """``(file name, resource)`` for every resource of every manifest."""
    return [
        (path.name, document)
        for path in MANIFESTS
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


def resource(kind: str) -> dict[str, Any]:
    [found] = [document for _, document in documents() if document["kind"] == kind]
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = resource("StatefulSet")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    [server] = pod_spec()["containers"]
    found: dict[str, Any] = server
    return found


def config_text() -> str:
    text: str = resource("ConfigMap")["data"][CONFIG_KEY]
    return text


def config(tmp_path: pathlib.Path, text: str | None = None) -> dict[str, Any]:
    """The ConfigMap's config (or ``text``) read by the daemon's own loader."""
    path = tmp_path / CONFIG_KEY
    path.write_text(config_text() if text is None else text)
    settings, _tables, _port = _daemon.read_config(str(path))
    return settings


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile's last stage, continuations joined."""
    instructions = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    last_from = max(index for index, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def instruction(keyword: str) -> str:
    [arguments] = [arguments for name, arguments in dockerfile() if name == keyword]
    return arguments


def exec_form(keyword: str) -> list[str]:
    """ENTRYPOINT or CMD, which must be in JSON (exec) form: SIGTERM reaches the daemon
    itself, not a shell."""
    value = json.loads(instruction(keyword))
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), value
    return value


def image_command() -> list[str]:
    return exec_form("ENTRYPOINT") + exec_form("CMD")


def config_argument(argv: list[str]) -> str:
    index = argv.index("--config")
    return argv[index + 1]


def probe_command() -> list[str]:
    command: list[str] = container()["readinessProbe"]["exec"]["command"]
    return command


def probe_arguments() -> Any:
    """The probe's arguments as the ``reverb-py`` command line parses them."""
    command = probe_command()
    assert command[:3] == ["python", "-m", "reverb_py"], command
    return cli._parser().parse_args(command[3:])


def mount_path(volume: str) -> str:
    [path] = [m["mountPath"] for m in container()["volumeMounts"] if m["name"] == volume]
    return str(path)


def quantity(text: str) -> int:
    """A Kubernetes quantity in binary units (``16Gi``) or bytes, as bytes."""
    units = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|)", text)
    assert match, f"unexpected quantity {text!r}"
    return int(match.group(1)) * units[match.group(2)]


def rewrite(text: str, **values: int | str) -> str:
    """``text`` with the top-level ``key = ...`` line of each key given a new value."""
    for key, value in values.items():
        literal = json.dumps(value)
        text, count = re.subn(rf"^{key} = .*$", f"{key} = {literal}", text, flags=re.MULTILINE)
        assert count == 1, f"{key} is set {count} times in the config"
    return text


# --- The manifests against the Kubernetes schemas ---------------------------------------


def test_the_recipe_has_its_resources() -> None:
    assert sorted(document["kind"] for _, document in documents()) == [
        "ConfigMap",
        "Service",
        "StatefulSet",
    ]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "name, document",
    documents(),
    ids=[f"{name}:{document['kind']}" for name, document in documents()],
)
def test_manifest_validates_strictly(name: str, document: dict[str, Any], version: str) -> None:
    # Strict: a field the API does not have (a misspelling) is an error.
    assert kubernetes_validate.validate(document, version, strict=True) == version


def test_strict_validation_refuses_an_unknown_field() -> None:
    statefulset = copy.deepcopy(resource("StatefulSet"))
    [server] = statefulset["spec"]["template"]["spec"]["containers"]
    server["readinesProbes"] = server.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbes"):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSIONS[0], strict=True)


# --- The files against each other ------------------------------------------------------


def test_the_daemon_accepts_the_config(tmp_path: pathlib.Path) -> None:
    settings = config(tmp_path)
    _, tables, _ = _daemon.read_config(str(tmp_path / CONFIG_KEY))
    assert [table.name for table in tables] == [TABLE]
    checkpoints = _daemon.CheckpointSettings(settings)
    assert checkpoints.directory is not None and checkpoints.on_shutdown
    _daemon.limits_from_config(settings)
    _daemon.log_level(None, settings)
    # The image sets the interface (REVERB_PY_HOST); the config must not override it.
    assert "host" not in settings


def test_the_ports_agree(tmp_path: pathlib.Path) -> None:
    port = _daemon.port_from_config(config(tmp_path))
    [service_port] = resource("Service")["spec"]["ports"]
    [container_port] = container()["ports"]
    assert service_port["port"] == port
    assert service_port["targetPort"] == container_port["name"] == "grpc"
    assert container_port["containerPort"] == port
    assert int(instruction("EXPOSE").split("/")[0]) == port
    assert probe_arguments().address == f"127.0.0.1:{port}"


def test_the_checkpoint_dir_is_the_persistent_volume(tmp_path: pathlib.Path) -> None:
    directory = config(tmp_path)["checkpoint_dir"]
    [claim] = resource("StatefulSet")["spec"]["volumeClaimTemplates"]
    assert mount_path(claim["metadata"]["name"]) == directory
    assert instruction("VOLUME").split() == [directory]


def test_the_config_is_mounted_where_the_image_reads_it() -> None:
    # The container keeps the image's command: no command or args in the manifest.
    assert "command" not in container() and "args" not in container()
    [volume] = [v for v in pod_spec()["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == resource("ConfigMap")["metadata"]["name"]
    assert "items" not in volume["configMap"]
    mounted = f"{mount_path(volume['name'])}/{CONFIG_KEY}"
    assert config_argument(image_command()) == mounted


def test_the_probe_is_a_reverb_py_command_within_its_timeout() -> None:
    arguments = probe_arguments()
    assert arguments.command == "info"
    assert arguments.timeout < container()["readinessProbe"]["timeoutSeconds"]
    assert image_command()[0] == probe_command()[0] == "python"


def test_the_service_is_headless_and_selects_the_pods() -> None:
    service = resource("Service")
    statefulset = resource("StatefulSet")
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= labels.items()
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]


def test_the_pods_run_as_the_image_user() -> None:
    context = pod_spec()["securityContext"]
    assert context["runAsNonRoot"] is True
    assert str(context["runAsUser"]) == instruction("USER")
    # The volume is writable by that user's group.
    assert context["fsGroup"] == context["runAsGroup"]


def test_the_grace_period_leaves_time_for_the_shutdown_checkpoint() -> None:
    assert pod_spec()["terminationGracePeriodSeconds"] >= 60


def test_the_table_fits_in_memory_and_its_checkpoints_on_the_volume(
    tmp_path: pathlib.Path,
) -> None:
    settings = config(tmp_path)
    table_bytes = sum(table["max_bytes"] for table in settings["tables"])
    memory = quantity(container()["resources"]["limits"]["memory"])
    assert table_bytes < memory
    [claim] = resource("StatefulSet")["spec"]["volumeClaimTemplates"]
    storage = quantity(claim["spec"]["resources"]["requests"]["storage"])
    assert (settings["keep_checkpoints"] + 1) * table_bytes <= storage


def test_the_readme_names_the_real_image_and_target(tmp_path: pathlib.Path) -> None:
    readme = (RECIPE / "README.md").read_text()
    image = container()["image"]
    assert f"docker build -f deploy/kubernetes/Dockerfile -t {image} ." in readme
    service = resource("Service")["metadata"]["name"]
    port = _daemon.port_from_config(config(tmp_path))
    assert f"dns:///{service}.<namespace>.svc.cluster.local:{port}" in readme
    assert " ".join(probe_command()) in readme


# --- The image's entry point, run here -------------------------------------------------


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; killed if still running at its end."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for process in started:
            kill(process)


def test_the_entry_point_serves_and_checkpoints_on_sigterm(
    tmp_path: pathlib.Path, processes: list[subprocess.Popen[str]]
) -> None:
    checkpoints = tmp_path / "checkpoints"
    local_config = tmp_path / "local.toml"
    local_config.write_text(rewrite(config_text(), port=0, checkpoint_dir=str(checkpoints)))
    # Only the port and the checkpoint directory differ from the ConfigMap's config.
    expected = {**config(tmp_path), "port": 0, "checkpoint_dir": str(checkpoints)}
    assert _daemon.load_config(str(local_config)) == expected

    argv = image_command()
    assert argv[0] == "python"
    command = [sys.executable, *argv[1:]]
    command[command.index(config_argument(argv))] = str(local_config)
    # Without the image's REVERB_PY_HOST the daemon binds localhost.
    env = {key: value for key, value in os.environ.items() if key != "REVERB_PY_HOST"}
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    processes.append(process)
    address = read_address(process)

    probe = [sys.executable, *probe_command()[1:]]
    probe[probe.index(probe_arguments().address)] = address
    ready = subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert TABLE in ready.stdout

    client = reverb_py.Client(address)
    client.insert([1.0], priorities={TABLE: 1.0})
    assert client.server_info(timeout=30)[TABLE].current_size == 1

    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "shutdown checkpoint written to" in output, output
    complete = [path for path in checkpoints.iterdir() if (path / "DONE").is_file()]
    assert len(complete) == 1, sorted(checkpoints.iterdir())
