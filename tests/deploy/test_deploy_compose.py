"""deploy/compose without Docker: generated config fresh, compose file valid and self-consistent.

No Docker engine runs where these tests run, so the stack is never started here. What can be
checked offline is checked: the generated Slurm/clusterd config equals a fresh render of the
shared deploy/local templates, the compose file validates against the compose-spec schema
(and docker-compose 1.29's own parser when installed), and the cross-file facts no schema knows
(node names, topology, volumes, dependencies, paths) agree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterctl.hostlist import expand_hostlist
from clusterd.config import Config, load_config
from deploy.compose import generate  # not installed: found from the checkout (tests/__init__.py)
from deploy.render import RenderError, placeholders, render_file, render_text

ROOT = Path(__file__).resolve().parents[2]

COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
GENERATED = COMPOSE_DIR / "generated"
TEMPLATES = ROOT / "deploy" / "local" / "templates"
COMMON_SH = ROOT / "deploy" / "local" / "lib" / "common.sh"
ONE_SHOT = "service_completed_successfully"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())  # resolves the x- anchors and << merges
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svcs = compose["services"]
    assert isinstance(svcs, dict)
    return svcs


def conf_lines(path: Path) -> Iterator[dict[str, str]]:
    """slurm.conf-style lines as {Key: value} (comments and blank lines skipped)."""
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            yield dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def slurm_nodes() -> dict[str, dict[str, str]]:
    return {d["NodeName"]: d for d in conf_lines(GENERATED / "slurm.conf") if "NodeName" in d}


def slurm_setting(key: str) -> str:
    found = [d[key] for d in conf_lines(GENERATED / "slurm.conf") if key in d]
    assert len(found) == 1, f"{key} set {len(found)} times in generated slurm.conf"
    return found[0]


def slurmd_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("command") == ["slurmd"]}


def replica_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("command") == ["clusterd"]}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Target -> condition (the short list form means service_started)."""
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {k: (v or {}).get("condition", "service_started") for k, v in deps.items()}


def named_volumes(service: dict[str, Any]) -> dict[str, str]:
    """Named volume -> container path (bind mounts, whose source is a path, are left out)."""
    out = {}
    for v in service.get("volumes", []):
        source, target = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
        if not source.startswith((".", "/", "~")):
            out[source] = target
    return out


def mounted_volume(service: dict[str, Any], path: str) -> str | None:
    """The named volume holding ``path`` in this service (the deepest mount wins)."""
    best: tuple[int, str] | None = None
    for vol, target in named_volumes(service).items():
        if (path == target or path.startswith(target.rstrip("/") + "/")) and (best is None or len(target) > best[0]):
            best = (len(target), vol)
    return best[1] if best else None


# ----------------------------------------------------------------- templates and generated files


def test_generated_files_are_fresh(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(COMPOSE_DIR / "generate.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in GENERATED.iterdir() if p.is_file())
    assert fresh == committed, "deploy/compose/generated holds other files than generate.py writes"
    stale = [n for n in fresh if (tmp_path / n).read_bytes() != (GENERATED / n).read_bytes()]
    assert not stale, f"stale generated files {stale}: run python deploy/compose/generate.py"


def test_every_template_placeholder_is_supplied() -> None:
    values = generate.values()
    # Every deploy/local template is rendered for compose, except SeaweedFS's identities (MinIO here).
    assert sorted(p.name for p in TEMPLATES.iterdir()) == sorted([*values, "s3.json"])
    for name, vals in values.items():
        wanted = placeholders((TEMPLATES / name).read_text())
        assert not wanted - set(vals), f"{name}: no compose value for {sorted(wanted - set(vals))}"
        assert not set(vals) - wanted, f"{name}: values for placeholders it no longer has: {sorted(set(vals) - wanted)}"
    for text in generate.render_all().values():
        assert not re.search(r"@[A-Z_]+@", text)


def test_renderer_refuses_unrendered_placeholders() -> None:
    with pytest.raises(RenderError, match=r"@B@ @C@"):
        render_text("a=@A@ b=@B@ c=@C@", {"A": "1"}, name="t")
    assert render_text("a=@A@\n\n", {"A": "x & @B@"}) == "a=x & @B@\n"  # literal, one pass, one newline


@pytest.mark.parametrize(
    "name", ["slurm.conf", "topology.conf", "gres.conf", "cgroup.conf", "clusterd.toml", "clusterd-ha.toml"]
)
def test_python_render_equals_bash_render(name: str, tmp_path: Path) -> None:
    """The same template and values give the same bytes through deploy/local's bash ``render``."""
    vals = generate.values()[name]
    out = tmp_path / name
    subprocess.run(
        [
            "bash",
            "-c",
            'source "$0"; render "$@"',
            str(COMMON_SH),
            str(TEMPLATES / name),
            str(out),
            *(f"{k}={v}" for k, v in vals.items()),
        ],
        check=True,
        capture_output=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "CLUSTERCTL_STACK_DIR": str(tmp_path)},
    )
    assert out.read_text() == render_file(TEMPLATES / name, vals)


def test_generated_clusterd_config_loads() -> None:
    cfg = load_config(GENERATED / "clusterd.toml", environ={"CLUSTERD_ALLOW_INSECURE": "true"})
    assert cfg.listen == generate.CLUSTERD_LISTEN
    assert cfg.slurm.slurm_conf == generate.SLURM_CONF


# ----------------------------------------------------------------- the compose file itself


def test_compose_file_matches_compose_spec_schema() -> None:
    # check-jsonschema ships the compose-spec schema as a builtin (vendor.compose-spec): no network.
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docker_compose_parses_the_file() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (Debian's 1.29.2, apt install docker-compose) is not installed")
    # `config` only parses and interpolates: no engine is contacted.
    proc = subprocess.run(
        [exe, "-f", str(COMPOSE_FILE), "--profile", "restd", "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_dependencies_exist_and_wait_for_health(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for target, condition in depends_on(svc).items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert condition in ("service_healthy", ONE_SHOT), f"{name} -> {target}: {condition} waits for nothing"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health, which has no check"
            else:
                assert services[target].get("restart") == "no", f"{target} is waited on to exit but restarts"


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        if svc.get("restart") == "no":  # one-shot init: dependents wait for it to exit 0 instead
            waited = [depends_on(s)[name] for s in services.values() if name in depends_on(s)]
            assert waited and set(waited) == {ONE_SHOT}, f"one-shot {name} must be waited on with {ONE_SHOT}"
            continue
        check = svc.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


def test_slurm_nodes_are_the_slurmd_services(services: dict[str, dict[str, Any]]) -> None:
    nodes = slurm_nodes()
    slurmds = slurmd_services(services)
    assert len(slurmds) >= 2
    assert sorted(nodes) == sorted(s.get("hostname", n) for n, s in slurmds.items())
    for name, svc in slurmds.items():
        # Service name = hostname = NodeName = NodeAddr: slurmctld reaches nodes by compose DNS name.
        assert svc.get("hostname") == name and nodes[name]["NodeAddr"] == name
    ctld_host, _, ctld_addr = slurm_setting("SlurmctldHost").rstrip(")").partition("(")
    assert services[ctld_host].get("hostname") == ctld_host and ctld_addr == ctld_host
    assert services[ctld_host]["command"] == ["slurmctld"]
    for part in (d for d in conf_lines(GENERATED / "slurm.conf") if "PartitionName" in d):
        listed = list(nodes) if part["Nodes"] == "ALL" else expand_hostlist(part["Nodes"])  # ALL: every node
        assert sorted(listed) == sorted(nodes), f"partition {part['PartitionName']}"


def test_topology_covers_every_node_once() -> None:
    nodes = set(slurm_nodes())
    switches = list(conf_lines(GENERATED / "topology.conf"))
    leaves = {s["SwitchName"]: expand_hostlist(s["Nodes"]) for s in switches if "Nodes" in s}
    assert len(leaves) >= 2
    placed = [n for members in leaves.values() for n in members]
    assert sorted(placed) == sorted(nodes), "every node on exactly one leaf switch"
    names = {s["SwitchName"] for s in switches}
    for s in switches:
        if "Switches" in s:
            assert set(expand_hostlist(s["Switches"])) <= names, f"{s['SwitchName']} names unknown switches"


def test_fake_gpus_match_gres(services: dict[str, dict[str, Any]]) -> None:
    files = [d["File"] for d in conf_lines(GENERATED / "gres.conf") if d.get("Name") == "gpu"]
    devices = [f for expr in files for f in expand_hostlist(expr)]
    for node in slurm_nodes().values():
        assert f"gpu:{len(devices)}" in node["Gres"].split(",")
    entrypoint = (COMPOSE_DIR / "entrypoint.sh").read_text()
    made = re.search(r"for i in ([\d ]+); do\n.*?/dev/fakegpu\$i", entrypoint, re.S)
    assert made, "entrypoint.sh no longer makes /dev/fakegpuN"
    assert sorted(f"/dev/fakegpu{i}" for i in made.group(1).split()) == sorted(devices)


def test_volumes_are_declared_and_shared_where_slurm_needs_them(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose.get("volumes") or {})
    used = {v for svc in services.values() for v in named_volumes(svc)}
    assert used <= declared, f"undeclared volumes {sorted(used - declared)}"
    assert declared <= used, f"declared but unused volumes {sorted(declared - used)}"
    ctld = services[generate.CTLD_HOST]
    assert mounted_volume(ctld, slurm_setting("StateSaveLocation")), "slurmctld state would die with the container"
    jwt_key = slurm_setting("AuthAltParameters").removeprefix("jwt_key=")
    key_holders = [ctld, *slurmd_services(services).values(), *replica_services(services).values()]
    assert {mounted_volume(s, jwt_key) for s in key_holders} == {"keys"}
    assert mounted_volume(services["keys"], jwt_key) == "keys"
    # Jobs run on the nodes in the directories clusterd creates: one volume for all of them.
    job_root = load_config(GENERATED / "clusterd.toml", environ={}).slurm.job_root
    job_holders = [*replica_services(services).values(), *slurmd_services(services).values()]
    assert {mounted_volume(s, job_root) for s in job_holders} == {"jobs"}


def test_build_paths_exist(services: dict[str, dict[str, Any]]) -> None:
    builds = {(s["build"]["context"], s["build"]["dockerfile"]) for s in services.values() if "build" in s}
    assert builds, "clusterd is built from this repository"
    for context, dockerfile in builds:
        ctx = (COMPOSE_DIR / context).resolve()
        assert ctx == ROOT, "the image is built from the repository root"
        assert (ctx / dockerfile).is_file()
        logical = (ctx / dockerfile).read_text().replace("\\\n", " ").splitlines()
        copies = [line.split()[1:-1] for line in logical if line.startswith("COPY ") and "--from" not in line]
        assert copies
        for src in (s for sources in copies for s in sources):
            assert (ctx / src).exists(), f"{dockerfile}: COPY source {src} is missing"
    assert (COMPOSE_DIR / "entrypoint.sh").stat().st_mode & 0o111, "entrypoint.sh must be executable"


# ----------------------------------------------------------------- HA: postgres + two replicas


def ha_config() -> dict[str, Any]:
    return tomllib.loads((GENERATED / generate.HA_CONFIG).read_text())


def test_ha_config_is_the_single_config_plus_store_ha_and_both_heartbeat_addresses() -> None:
    single = tomllib.loads((GENERATED / "clusterd.toml").read_text())
    ha = ha_config()
    assert {k: v for k, v in ha.items() if k not in ("store", "ha", "liveness")} == single
    assert ha["store"]["url"] == generate.STORE_URL and ha["ha"]["lease_seconds"] > ha["ha"]["renew_seconds"]
    port = single["listen"].rsplit(":", 1)[1]
    assert ha["liveness"]["heartbeat_addr"].split(",") == [f"{r}:{port}" for r in generate.REPLICAS]


def test_ha_config_loads() -> None:
    if not {"store", "ha"} <= {f.name for f in fields(Config)}:
        pytest.skip("this clusterd.config has no [store]/[ha]")
    cfg = load_config(GENERATED / generate.HA_CONFIG, environ={"CLUSTERD_ALLOW_INSECURE": "true"})
    assert asdict(cfg)["store"]["url"] == generate.STORE_URL
    assert cfg.liveness.heartbeat_addr.count(",") == len(generate.REPLICAS) - 1


def test_replicas_share_postgres_tokens_and_jobs_but_not_state(services: dict[str, dict[str, Any]]) -> None:
    replicas = replica_services(services)
    assert sorted(replicas) == sorted(generate.REPLICAS)
    assert all(s.get("hostname") == name for name, s in replicas.items())
    # The [store] url names the postgres service, with the user and database it creates.
    pg = services["postgres"]
    url = ha_config()["store"]["url"]
    m = re.fullmatch(r"postgresql://(\w+)@([\w-]+):5432/(\w+)", url)
    assert m, url
    assert m.group(2) == "postgres" and pg["image"].startswith("postgres:")
    assert (m.group(1), m.group(3)) == (pg["environment"]["POSTGRES_USER"], pg["environment"]["POSTGRES_DB"])
    assert "pg_isready" in pg["healthcheck"]["test"] and mounted_volume(pg, "/var/lib/postgresql/data")
    cfg = load_config(GENERATED / "clusterd.toml", environ={})
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text()
    assert f"generated/{generate.HA_CONFIG}" in dockerfile and "/etc/clusterd/" in dockerfile
    state_volumes, ports = set(), []
    for name, svc in replicas.items():
        env = svc["environment"]
        assert env["CLUSTERD_CONFIG"] == f"/etc/clusterd/{generate.HA_CONFIG}", name
        assert env["PGPASSWORD"] == pg["environment"]["POSTGRES_PASSWORD"], f"{name}: not postgres's password"
        deps = depends_on(svc)
        assert deps.get("postgres") == "service_healthy" and deps.get("tokens") == ONE_SHOT, name
        assert svc.get("restart") == "unless-stopped", f"{name} must come back when it dies"
        assert mounted_volume(svc, cfg.tokens_file) == mounted_volume(services["tokens"], cfg.tokens_file)
        state_volumes.add(mounted_volume(svc, cfg.state_dir))
        ports += [p.rsplit(":", 1)[0] for p in svc["ports"]]
    assert len(state_volumes) == len(replicas), "each replica has its own state_dir volume (audit log)"
    assert None not in state_volumes and not state_volumes & {mounted_volume(services["tokens"], cfg.tokens_file)}
    assert len(ports) == len(set(ports)), f"host ports published twice: {ports}"
