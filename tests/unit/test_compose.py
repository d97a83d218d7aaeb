"""docker-compose.yml and the Dockerfile: checked as files (no Docker engine needed), and by
``docker compose config`` where the Compose plugin is installed."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hookline.cli.worker import celery_command
from hookline.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
HOOKLINE_SERVICES = ("worker", "flower", "web", "receiver", "exporter")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict[str, Any]]:
    return compose["services"]


def argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in env.items()}


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|h|m|s)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(value: str | int | float) -> float:
    """Seconds in a Compose duration: ``60s``, ``1m30s``, ``1h``, ``500ms`` (a bare number is
    seconds)."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(f"not a Compose duration: {value!r}")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def test_duration_parser() -> None:
    assert duration("60s") == 60
    assert duration("1m30s") == 90
    assert duration("1h2m3s") == 3723
    assert duration("500ms") == 0.5
    assert duration("1.5s") == 1.5
    assert duration(45) == 45
    with pytest.raises(ValueError):
        duration("1 minute")


def test_services_present_and_no_obsolete_version_key(compose, services) -> None:
    assert {"redis", "worker", "flower", "web", "receiver"} <= set(services)
    assert "version" not in compose


def _redis_server_options(redis: dict[str, Any]) -> dict[str, str]:
    """The options of the Redis service's ``redis-server`` (run through ``sh -c 'exec ...'``
    so the password comes from the environment)."""
    command = argv(redis["command"])
    assert command[:2] == ["sh", "-c"], command
    server = shlex.split(command[2])
    assert server[:2] == ["exec", "redis-server"], server
    return dict(zip(server[2::2], server[3::2], strict=False))


def test_redis_persists_and_never_evicts(compose, services) -> None:
    redis = services["redis"]
    options = _redis_server_options(redis)
    assert options.get("--appendonly") == "yes"
    assert options.get("--maxmemory-policy") == "noeviction"
    assert any(str(v).endswith(":/data") for v in redis["volumes"])
    data_volume = next(str(v).split(":")[0] for v in redis["volumes"] if str(v).endswith(":/data"))
    assert data_volume in (compose.get("volumes") or {}), "Redis data must be a named volume"
    assert "redis-cli" in " ".join(argv(redis["healthcheck"]["test"]))


def test_redis_has_a_memory_limit_and_a_required_password(services) -> None:
    """noeviction acts only under a memory limit; the password has no default, so compose
    refuses to start without one, and every client's URL carries it."""
    redis = services["redis"]
    options = _redis_server_options(redis)
    env = environment(redis)
    assert options["--maxmemory"] == "$$REDIS_MAXMEMORY"  # $$: the container's shell expands it
    assert re.fullmatch(r"\$\{REDIS_MAXMEMORY:-\d+[kmg]b\}", env["REDIS_MAXMEMORY"])
    assert options["--requirepass"] == "$$REDIS_PASSWORD"
    required = r"\$\{REDIS_PASSWORD:\?[^}]+\}"
    assert re.fullmatch(required, env["REDIS_PASSWORD"])
    assert re.fullmatch(required, env["REDISCLI_AUTH"]), "the healthcheck's redis-cli needs it"
    for name in ("worker", "flower", "web"):
        assert re.fullmatch(r"redis://:" + required + r"@redis:6379/0",
                            environment(services[name])["REDIS_URL"]), name


def test_worker_scales(services) -> None:
    worker = services["worker"]
    assert "container_name" not in worker, "a fixed name breaks --scale worker=N"
    assert "ports" not in worker, "a published host port breaks --scale worker=N"
    assert "hostname" not in worker, "one hostname for all replicas would repeat the node name"
    command = argv(worker["command"])
    # `hookline worker` names its nodes hookline<n>@%h (hookline/cli/worker.py).
    assert command[:2] == ["hookline", "worker"] and "-n" not in command
    node = celery_command("app", command[2:], 1)[-1]
    assert "%h" in node, "the node name must differ per replica"


def test_worker_healthcheck_pings_its_own_node(services) -> None:
    worker = services["worker"]
    command = argv(worker["command"])
    node = celery_command("app", command[2:], 1)[-1]
    health = worker["healthcheck"]
    assert health["test"][0] == "CMD-SHELL"
    # %h is the container's hostname; $$ stops Compose from interpolating $HOSTNAME itself.
    assert f"-d {node.replace('%h', '$$HOSTNAME')}" in health["test"][1]
    assert "inspect ping" in health["test"][1]
    assert duration(health["timeout"]) < duration(health["interval"])
    assert duration(health["start_period"]) > 0


def test_workers_wait_for_a_healthy_redis(services) -> None:
    for name in ("worker", "flower", "web"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name


def test_worker_grace_period_covers_soft_shutdown_and_an_attempt(services) -> None:
    worker = services["worker"]
    env = environment(worker)
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"
    soft = float(env["CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT"])
    defaults = Settings()
    attempt = float(env.get("HOOKLINE_CONNECT_TIMEOUT", defaults.connect_timeout)) + float(
        env.get("HOOKLINE_READ_TIMEOUT", defaults.read_timeout)
    )
    assert duration(worker["stop_grace_period"]) > soft + attempt


def test_worker_environment(services) -> None:
    env = environment(services["worker"])
    assert env["REDIS_URL"].endswith("@redis:6379/0")
    assert env["HOOKLINE_LOG_FORMAT"] == "json"
    assert env["HOOKLINE_METRICS_PORT"].isdigit()


def test_ssrf_allowlist_is_empty_unless_the_demo_sets_the_receiver_alone(compose,
                                                                         services) -> None:
    """By default the SSRF guard refuses every private address (no compose service, not the
    Docker host's gateway); the demo admits one address: the receiver's, on an internal
    network of its own, and the receiver exists only in the demo profile."""
    import ipaddress

    assert environment(services["worker"])["HOOKLINE_ALLOWED_NETWORKS"] == (
        "${HOOKLINE_ALLOWED_NETWORKS:-}")
    receiver = services["receiver"]
    assert receiver["profiles"] == ["demo"]
    address = receiver["networks"]["demo"]["ipv4_address"]
    demo = compose["networks"]["demo"]
    assert demo["internal"] is True
    subnet = ipaddress.ip_network(demo["ipam"]["config"][0]["subnet"])
    assert ipaddress.ip_address(address) in subnet
    assert "demo" in services["worker"]["networks"]
    for name, service in services.items():
        if name not in ("worker", "receiver"):
            assert "demo" not in (service.get("networks") or []), name
    header = COMPOSE_FILE.read_text().split("services:")[0]
    assert f"HOOKLINE_ALLOWED_NETWORKS={address}/32 docker compose --profile demo up" in header
    # The getting-started page of the docs shows the same command.
    assert f"HOOKLINE_ALLOWED_NETWORKS={address}/32 docker compose --profile demo up" in (
        ROOT / "docs" / "getting-started.md").read_text()


def test_dead_letter_spool_is_per_replica_storage(services) -> None:
    """The spool (dead letters while Redis is down) sits on a volume of the worker's own: an
    anonymous volume (no host path, no shared named volume), so replicas never share a file."""
    worker = services["worker"]
    spool = environment(worker)["HOOKLINE_DLQ_SPOOL"]
    volumes = [str(v) for v in worker.get("volumes", [])]
    anonymous = [v for v in volumes if ":" not in v]
    assert any(spool.startswith(v.rstrip("/") + "/") for v in anonymous), volumes
    assert f"HOOKLINE_DLQ_SPOOL={spool}" in DOCKERFILE.read_text()


def test_one_exporter_serves_the_gauges_and_workers_their_counters(services) -> None:
    """Each worker replica serves its own counters on the compose network (no host port, so
    --scale works); one `hookline metrics` service serves the Redis-read gauges, never
    scaled, published on loopback only. Both listen on the container's interfaces: the
    default (127.0.0.1) would be unreachable for Prometheus."""
    worker = environment(services["worker"])
    assert worker["HOOKLINE_METRICS_ADDRESS"] == "0.0.0.0"
    assert "ports" not in services["worker"]
    exporters = [name for name, service in services.items()
                 if argv(service.get("command", []))[:2] == ["hookline", "metrics"]]
    assert exporters == ["exporter"]
    exporter = services["exporter"]
    command = argv(exporter["command"])
    assert command[command.index("--address") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert [str(p) for p in exporter["ports"]] == [f"127.0.0.1:{port}:{port}"]
    assert "deploy" not in exporter and "scale" not in exporter
    assert f":{port}/metrics" in " ".join(argv(exporter["healthcheck"]["test"]))


def test_flower_bounded_and_behind_basic_auth(services) -> None:
    flower = services["flower"]
    command = " ".join(argv(flower["command"]))
    assert "flower" in command
    assert "--max_tasks=" in command
    assert "--purge_offline_workers=" in command
    assert "--basic-auth" not in command and "--basic_auth" not in command, (
        "credentials belong in the environment, not in a command line shown by ps"
    )
    auth = environment(flower)["FLOWER_BASIC_AUTH"]
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", auth), "no default password"
    assert any(str(port).endswith(":5555") for port in flower["ports"])


def test_web_runs_the_flask_example_on_port_8000(services) -> None:
    web = services["web"]
    command = argv(web["command"])
    assert command[:3] == ["flask", "--app", "examples.flask_app.app"]
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # reachable through the port
    assert "127.0.0.1:8000:8000" in [str(port) for port in web["ports"]]
    env = environment(web)
    assert env["REDIS_URL"] == environment(services["worker"])["REDIS_URL"]  # the workers' Redis
    assert env["ORDERS_WEBHOOK_ENDPOINT"]


def test_every_hookline_process_reads_the_same_configuration(services) -> None:
    """One configuration, the environment: the worker, Flower and the web app see the same
    Redis and broker, and agree on every Hookline variable more than one of them sets."""
    readers = {name: environment(services[name]) for name in ("worker", "flower", "web")}
    for variable in ("REDIS_URL", "HOOKLINE_BROKER_URL", "CELERY_VISIBILITY_TIMEOUT"):
        assert len({env.get(variable) for env in readers.values()}) == 1, variable
    shared = {variable for env in readers.values() for variable in env
              if variable.startswith("HOOKLINE_")}
    for variable in shared:
        values = {env[variable] for env in readers.values() if variable in env}
        assert len(values) == 1, f"{variable} differs between services: {values}"


def test_no_hookline_settings_outside_the_environment(services) -> None:
    """The web app takes no Hookline setting from its own config: no framework settings module
    or config file named in the command, no HOOKLINE dict smuggled through a variable."""
    for name in HOOKLINE_SERVICES:
        service = services[name]
        command = " ".join(argv(service.get("command", [])))
        assert "HOOKLINE" not in command, name
        env = environment(service)
        assert "HOOKLINE" not in env, name
        assert "DJANGO_SETTINGS_MODULE" not in env or name != "worker", (
            "the worker never reads Django settings"
        )


def test_web_healthcheck_asks_a_route_the_app_has(services) -> None:
    from examples.flask_app.app import create_app
    from hookline.core import config

    health = services["web"]["healthcheck"]
    probe = " ".join(argv(health["test"]))
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\S*?)'", probe)
    assert url, probe
    assert url.group(1) == "8000"
    saved = config._configured
    try:
        routes = {rule.rule: rule.methods for rule in create_app().url_map.iter_rules()}
    finally:
        config._configured = saved  # init_app only validates; restored in case that changes
    assert "GET" in routes[url.group(2)]
    assert "POST" in routes["/orders"]
    assert duration(health["timeout"]) < duration(health["interval"])


def _package_install() -> str:
    """The Dockerfile's ``RUN pip install ... .[extras]`` line: the distribution itself."""
    install = [line for line in DOCKERFILE.read_text().splitlines()
               if re.match(r"RUN pip install --no-cache-dir [\"']?\.(\[|[\"' ]|$)", line)]
    assert len(install) == 1, install
    return install[0]


def test_image_installs_the_extras_its_services_need() -> None:
    """flask for ``web`` and flower for ``flower`` are extras now, not dependencies."""
    extras = re.search(r"\.\[([\w,\s-]+)\]", _package_install())
    assert extras, _package_install()
    assert {"flask", "flower"} <= {name.strip() for name in extras.group(1).split(",")}


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_image_extras_exist_in_pyproject() -> None:
    extras = re.search(r"\.\[([\w,\s-]+)\]", _package_install())
    assert extras
    declared = _pyproject()["project"]["optional-dependencies"]
    assert {name.strip() for name in extras.group(1).split(",")} <= set(declared)


def test_something_releases_scheduled_retries(services) -> None:
    """Due retries leave the schedule only through a releaser: the workers' own thread
    (HOOKLINE_RELEASER=worker, the default) or a service running `hookline releaser`."""
    workers_release = environment(services["worker"]).get("HOOKLINE_RELEASER", "worker") == "worker"
    releaser_services = [name for name, service in services.items()
                         if argv(service.get("command", []))[:2] == ["hookline", "releaser"]]
    assert workers_release or releaser_services


def test_one_image_for_every_built_service(services) -> None:
    built = {name: s for name, s in services.items() if "build" in s}
    assert set(HOOKLINE_SERVICES) <= set(built)
    dockerfiles = set()
    for service in built.values():
        build = service["build"]
        if isinstance(build, str):
            build = {"context": build}
        context, dockerfile = build.get("context", "."), build.get("dockerfile", "Dockerfile")
        dockerfiles.add((ROOT / context / dockerfile).resolve())
    assert dockerfiles == {DOCKERFILE.resolve()}
    assert len({s.get("image") for s in built.values()}) == 1


def _modules(command: list[str]) -> list[str]:
    """Python modules a command imports: ``python -m X``, ``celery -A X``, ``flask --app X``."""
    modules = []
    for flag in ("-m", "-A", "--app"):
        if flag in command:
            modules.append(command[command.index(flag) + 1].split(":")[0])
    modules += [part.split("=", 1)[1].split(":")[0] for part in command
                if part.startswith(("-A=", "--app="))]
    return modules


def _copies() -> list[tuple[str, set[str]]]:
    """(working directory, sources) of each COPY/ADD from the build context, in order."""
    workdir, found = "/", []
    for line in DOCKERFILE.read_text().splitlines():
        parts = line.split()
        if parts and parts[0].upper() == "WORKDIR":
            workdir = parts[1].rstrip("/") or "/"
        if parts and parts[0].upper() in ("COPY", "ADD") and not parts[1].startswith("--from"):
            found.append((workdir, {p.rstrip("/") for p in parts[1:-1]
                                    if not p.startswith("--")}))
    return found


def _copied_into_image() -> set[str]:
    return {source for _, sources in _copies() for source in sources}


def _final_workdir() -> str:
    workdirs = re.findall(r"^WORKDIR\s+(\S+)", DOCKERFILE.read_text(), re.M)
    assert workdirs, "the Dockerfile sets no WORKDIR"
    return workdirs[-1].rstrip("/")


def _copied_into_workdir() -> set[str]:
    """What sits in the directory the image's commands run in (``celery -A``, ``python -m`` and
    ``flask --app`` import from there)."""
    final = _final_workdir()
    return {source for workdir, sources in _copies() if workdir == final for source in sources}


def _installed_packages() -> list[str]:
    return _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]


def test_every_command_module_exists_and_is_in_the_image(services) -> None:
    copied, beside = _copied_into_image(), _copied_into_workdir()
    for name, service in services.items():
        commands = [argv(service["command"])] if "command" in service else []
        test = (service.get("healthcheck") or {}).get("test")
        if test and test[0] == "CMD-SHELL":
            commands.append(shlex.split(test[1]))
        for command in commands:
            for module in _modules(command):
                path = ROOT / module.replace(".", "/")
                assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), (
                    f"{name}: {module} is not in the repository"
                )
                if "build" not in service:
                    continue
                top = module.split(".")[0]
                if any(fnmatch.fnmatch(top, pattern) for pattern in _installed_packages()):
                    # Installed from the distribution: its sources are copied for the build.
                    assert top in copied, f"{name}: {module} is not built into the image"
                else:
                    # Not in the wheel (app, examples): it must sit in the working directory.
                    assert top in beside, f"{name}: {module} is not in {_final_workdir()}"


def test_the_wheel_ships_hookline_only() -> None:
    """A host project has its own ``app``, ``tasks`` and ``celeryconfig``: the distribution
    must not install modules of those names over them."""
    assert _installed_packages() == ["hookline*"]


def test_checkout_entry_points_sit_beside_the_installed_package() -> None:
    """``celery -A app worker`` runs in the image although the wheel does not ship ``app``: the
    checkout's entry points are copied into the working directory, the package is installed."""
    beside = _copied_into_workdir()
    assert {"app", "tasks", "celeryconfig.py"} <= beside, beside
    assert "hookline" not in beside, (
        "a hookline/ source tree in the working directory would shadow the installed package"
    )
    assert "hookline" in _copied_into_image(), "the package's sources are needed to build it"
    for needed in ("pyproject.toml", "README.md", "LICENSE"):  # readme, license-files
        assert needed in _copied_into_image(), needed


@pytest.mark.parametrize("source", sorted(_copied_into_image()))
def test_dockerfile_copies_files_that_exist(source: str) -> None:
    # README.md among them: pyproject's `readme` field names it.
    assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"


def test_dockerfile_runs_unprivileged() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert _package_install()


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".venv", ".git", "*.log"):
        assert entry in ignored
    copied = _copied_into_image()
    assert not copied & set(ignored), "the build context must keep what the Dockerfile copies"


def _compose_plugin() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    result = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                            check=False)
    return docker if result.returncode == 0 else None


#: The variables the file interpolates; the secrets have no default.
SECRETS = {"REDIS_PASSWORD": "0123abcd" * 3, "FLOWER_BASIC_AUTH": "admin:s3cret",
           "HOOKLINE_ENCRYPTION_KEYS": "hlkey_" + "A" * 43}
_OPTIONAL = ("HOOKLINE_ALLOWED_NETWORKS", "REDIS_MAXMEMORY")


def _compose_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*SECRETS, *_OPTIONAL)}
    return {**env, **extra}


def _config(command: list[str], file: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*command, "-f", str(file), "config", "-q"], cwd=ROOT,
                          capture_output=True, text=True, check=False, env=env, timeout=60)


@pytest.mark.skipif(_compose_plugin() is None,
                    reason="the docker CLI's Compose plugin is not installed "
                           "(`docker compose version` fails); the file checks above still run")
def test_docker_compose_config_accepts_the_file() -> None:
    docker = _compose_plugin()
    assert docker is not None
    result = _config([docker, "compose"], COMPOSE_FILE, _compose_env(**SECRETS))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # no warnings (obsolete keys, unset variables)
    for secret in SECRETS:
        missing = _config([docker, "compose"], COMPOSE_FILE,
                          _compose_env(**{k: v for k, v in SECRETS.items() if k != secret}))
        assert missing.returncode != 0 and secret in missing.stderr, secret


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose (v1, Debian's package) is not installed")
def test_docker_compose_v1_validates_the_services_and_requires_the_secrets(tmp_path) -> None:
    """Compose v1 (1.29) checks the services, networks and volumes against its schema and
    interpolates the variables; it predates the top-level ``name``, which is left out here."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    document.pop("name")
    copy = tmp_path / "docker-compose.yml"
    copy.write_text(yaml.safe_dump(document))
    command = [shutil.which("docker-compose") or "docker-compose"]
    result = _config(command, copy, _compose_env(**SECRETS))
    assert result.returncode == 0, result.stderr
    for secret in SECRETS:
        missing = _config(command, copy,
                          _compose_env(**{k: v for k, v in SECRETS.items() if k != secret}))
        assert missing.returncode != 0, secret
        assert f"set {secret}" in missing.stderr, missing.stderr


# -- the RabbitMQ variant: docker-compose.rabbitmq.yml, an override of the file above ----------

RABBITMQ_FILE = ROOT / "docker-compose.rabbitmq.yml"
#: The services that publish or consume deliveries, or read the queues: they need the broker.
BROKER_USERS = ("worker", "flower", "exporter", "web")


@pytest.fixture(scope="module")
def rabbit_override() -> dict[str, Any]:
    return yaml.safe_load(RABBITMQ_FILE.read_text())


def test_the_rabbitmq_override_names_only_services_of_the_base_file_and_its_own(
        rabbit_override, services) -> None:
    added = set(rabbit_override["services"]) - set(services)
    assert added == {"rabbitmq"}
    assert set(BROKER_USERS) <= set(rabbit_override["services"])
    assert "rabbitmq-data" in rabbit_override["volumes"]


def test_the_rabbitmq_override_points_every_broker_user_at_rabbitmq(rabbit_override) -> None:
    for name in BROKER_USERS:
        service = rabbit_override["services"][name]
        url = environment(service)["HOOKLINE_BROKER_URL"]
        assert url.startswith("pyamqp://hookline:") and url.endswith("@rabbitmq:5672/hookline")
        assert service["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_rabbitmq_requires_a_password_persists_and_has_a_healthcheck(rabbit_override) -> None:
    rabbit = rabbit_override["services"]["rabbitmq"]
    env = environment(rabbit)
    assert env["RABBITMQ_DEFAULT_PASS"].startswith("${RABBITMQ_PASSWORD:?")
    assert env["RABBITMQ_DEFAULT_VHOST"] == "hookline"
    assert "guest" not in env.values()
    assert any(str(volume).startswith("rabbitmq-data:/var/lib/rabbitmq")
               for volume in rabbit["volumes"])
    assert "rabbitmq-diagnostics" in argv(rabbit["healthcheck"]["test"])
    assert "ports" not in rabbit


def test_the_rabbitmq_broker_url_passes_hooklines_settings_check(rabbit_override) -> None:
    from hookline.core.config import broker_is_amqp, load_settings

    url = environment(rabbit_override["services"]["worker"])["HOOKLINE_BROKER_URL"]
    url = re.sub(r"\$\{RABBITMQ_PASSWORD:\?[^}]*\}", "0123abcd", url)
    config = load_settings({"REDIS_URL": "redis://:pw@redis:6379/0",
                            "HOOKLINE_BROKER_URL": url})
    assert broker_is_amqp(config.broker_url)


def test_docker_compose_config_accepts_the_rabbitmq_override(tmp_path) -> None:
    if shutil.which("docker") is None or subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False).returncode:
        pytest.skip("the docker CLI's Compose plugin is not installed (`docker compose "
                    "version` fails); the file checks above still run")
    env = {**os.environ, "REDIS_PASSWORD": "x" * 8, "FLOWER_BASIC_AUTH": "a:b",
           "RABBITMQ_PASSWORD": "y" * 8, "HOOKLINE_ENCRYPTION_KEYS": "hlkey_" + "A" * 43}
    result = subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "-f",
                             str(RABBITMQ_FILE), "config", "--quiet"], env=env,
                            capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
