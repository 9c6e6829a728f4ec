"""``clusterctl checkpoints list|verify|gc`` through argparse, as the main CLI wires it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager, layout
from clusterctl.cli.checkpoints import register

from .helpers import fast_config


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="clusterctl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def make_steps(uri: str, steps: list[int]) -> CheckpointManager:
    ckpt = CheckpointManager(uri, rank=0, world_size=1, keep=0, config=fast_config())
    for s in steps:
        ckpt.save(s, {"w": np.full(1000, s, dtype=np.float32)}).result()
    return ckpt


def test_list_json_and_table(any_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_steps(any_uri, [3, 7]).close()
    assert run(["checkpoints", "list", any_uri, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in out["steps"]] == [3, 7]
    assert out["steps"][0]["world_size"] == 1 and out["steps"][0]["bytes"] > 4000
    assert run(["checkpoints", "list", any_uri]) == 0
    table = capsys.readouterr().out
    assert "3" in table and "7" in table


def test_latest_prints_newest_step_or_minus_one(posix_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["checkpoints", "latest", posix_uri]) == 0
    assert capsys.readouterr().out.strip() == "-1"
    make_steps(posix_uri, [3, 7]).close()
    assert run(["checkpoints", "latest", posix_uri]) == 0
    assert capsys.readouterr().out.strip() == "7"


def test_list_empty(posix_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["checkpoints", "list", posix_uri]) == 0
    assert "no committed checkpoints" in capsys.readouterr().out


def test_verify_ok_and_corrupt(any_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = make_steps(any_uri, [1, 2])
    assert run(["checkpoints", "verify", any_uri, "--json"]) == 0
    assert all(r["ok"] for r in json.loads(capsys.readouterr().out)["steps"])
    [shard] = [o.key for o in ckpt.storage.list_objects(layout.step_prefix(2)) if o.key.endswith(".safetensors")]
    data = bytearray(ckpt.storage.get(shard))
    data[-5] ^= 1
    ckpt.storage.put(shard, bytes(data))
    assert run(["checkpoints", "verify", any_uri]) == 3
    out = capsys.readouterr().out
    assert "step 2: CORRUPT" in out and "step 1: ok" in out
    assert run(["checkpoints", "verify", any_uri, "--step", "1"]) == 0
    capsys.readouterr()
    assert run(["checkpoints", "verify", any_uri, "--step", "9"]) == 2
    assert "step 9 is not committed" in capsys.readouterr().err
    ckpt.close()


def test_gc_dry_run_then_real(posix_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = make_steps(posix_uri, [1])
    debris = "steps/000000000005/deadrun/rank-00000-of-00001.safetensors"
    ckpt.storage.put(debris, b"x" * 100)
    old = time.time() - 7200
    os.utime(os.path.join(posix_uri, debris), (old, old))
    ckpt.close()
    assert run(["checkpoints", "gc", posix_uri, "--dry-run"]) == 0
    assert "would remove 0 object(s)" in capsys.readouterr().out  # default grace is 6 h
    assert run(["checkpoints", "gc", posix_uri, "--grace", "3600", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert debris in out and "would remove 1 object(s)" in out
    assert os.path.exists(os.path.join(posix_uri, debris))
    assert run(["checkpoints", "gc", posix_uri, "--grace", "3600", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objects"] == [debris]
    assert not os.path.exists(os.path.join(posix_uri, debris))
    with CheckpointManager(posix_uri, rank=0, world_size=1) as again:
        assert again.restore()["w"][0] == 1


@pytest.mark.parametrize("uri", ["gs://b/x", "s3://", "s3://bucket/../x", "file://remote/x"])
def test_bad_uri_is_one_line_exit_2(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (["list", uri], ["verify", uri], ["gc", uri]):
        assert run(["checkpoints", *cmd]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.s3
def test_storage_error_exit_1(s3_env: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    assert run(["checkpoints", "list", f"s3://{s3_env.bucket}/x"]) == 1
    err = capsys.readouterr().err
    assert "access denied" in err.lower() and "Traceback" not in err


@pytest.mark.s3
def test_missing_bucket_exit_1(s3_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["checkpoints", "list", "s3://no-such-bucket-here/x"]) == 1
    assert "bucket does not exist" in capsys.readouterr().err


def test_module_entry_point(posix_uri: str, tmp_path: Path) -> None:
    make_steps(posix_uri, [4]).close()
    proc = subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.checkpoints", "checkpoints", "list", posix_uri, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"][0]["step"] == 4
    proc = subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.checkpoints", "checkpoints"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_show_and_export_of_a_resharded_step(any_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import safetensors.numpy

    from .test_reshard import REP, A, C, save_world, state_of

    save_world(any_uri, 2, state_of)
    assert run(["checkpoints", "show", any_uri, "1", "--json"]) == 0
    leaves = {x["key"]: x for x in json.loads(capsys.readouterr().out)["leaves"]}
    assert leaves["a"]["layout"] == "sharded" and leaves["a"]["global_shape"] == [13, 3]
    assert leaves["a"]["dtype"] == "float32" and leaves["a"]["bytes"] == A.nbytes
    assert leaves["b"]["dtype"] == "bfloat16" and leaves["rep/w"]["layout"] == "replicated"
    assert leaves["rep/w"]["bytes"] == REP["w"].nbytes and len(leaves["rep/w"]["ranks"]) == 1
    assert leaves["mine"]["layout"] == "rank-local" and leaves["mine"]["bytes"] == 2 * 8 * 2
    assert run(["checkpoints", "show", "1", any_uri]) == 0  # either order
    assert "sharded" in capsys.readouterr().out
    out = tmp_path / "export"
    assert run(["checkpoints", "export", any_uri, "1", str(out)]) == 0
    a = safetensors.numpy.load_file(str(out / "a.safetensors"))
    np.testing.assert_array_equal(a["a"], A + 1)
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(out / "c.safetensors"))["c"], C)
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(out / "rep.safetensors"))["w"], REP["w"])


def test_show_and_export_bad_input_exit_2(posix_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_steps(posix_uri, [1]).close()
    assert run(["checkpoints", "show", posix_uri, "x"]) == 2
    assert "STEP must be" in capsys.readouterr().err
    assert run(["checkpoints", "show", posix_uri, "9"]) == 2
    assert "not committed" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert run(["checkpoints", "export", posix_uri, "1", str(tmp_path / "file")]) == 2
    assert run(["checkpoints", "show", "s3:/bad", "1"]) == 2
    for step in ("\u0661", "\u00b2", str(2**63)):  # isdigit() took these; int() of '²' then crashed
        assert run(["checkpoints", "show", posix_uri, step]) == 2
        assert "STEP must be a non-negative integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--step", "\u0661"],
        ["verify", "--step", "-1"],
        ["verify", "--step", str(2**63)],
        ["gc", "--grace", "inf"],
        ["gc", "--grace", "nan"],
        ["gc", "--grace", "-1"],
        ["gc", "--grace", "1e3"],
    ],
)
def test_numeric_flags_are_usage_errors(posix_uri: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run(["checkpoints", argv[0], posix_uri, *argv[1:]])
    assert exc.value.code == 2
    assert f"argument {argv[1]}:" in capsys.readouterr().err


def test_export_verifies_checksums(posix_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = make_steps(posix_uri, [1])
    [shard] = [o.key for o in ckpt.storage.list_objects("steps/") if o.key.endswith(".safetensors")]
    data = bytearray(ckpt.storage.get(shard))
    data[-5] ^= 1
    ckpt.storage.put(shard, bytes(data))
    ckpt.close()
    assert run(["checkpoints", "export", posix_uri, "1", str(tmp_path / "out")]) == 3
    assert "xxh3" in capsys.readouterr().err


def _save(uri: str, state: Any) -> None:
    with CheckpointManager(uri, rank=0, world_size=1, keep=0, config=fast_config()) as ckpt:
        ckpt.save(1, state).result()


def test_export_file_names_are_injective(posix_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import safetensors.numpy

    a, b, dot = np.arange(3, dtype=np.float32), np.ones(2, dtype=np.int64), np.zeros(1, dtype=np.float32)
    _save(posix_uri, {"a/b": a, "a_b": b, ".x": dot})
    out = tmp_path / "export"
    assert run(["checkpoints", "export", posix_uri, "1", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["%2Ex.safetensors", "a%2Fb.safetensors", "a_b.safetensors"]
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(out / "a%2Fb.safetensors"))["a/b"], a)
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(out / "a_b.safetensors"))["a_b"], b)


def test_export_refuses_keys_that_share_a_name(
    posix_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(posix_uri, {1: np.ones(2), "1": np.zeros(2)})
    assert run(["checkpoints", "export", posix_uri, "1", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert "top-level keys 1 and '1'" in err and "Traceback" not in err
    assert not (tmp_path / "export").exists()  # refused before writing anything


def test_export_entries_of_any_top_level() -> None:
    """save() takes only mappings, but a step written by other code may hold a list at the top."""
    from clusterctl.checkpoint.contents import _export_files, file_stem

    x, y = np.arange(2), np.ones(1)
    assert _export_files([x, {"w": y}]) == [("0", 0, x), ("1", 1, {"w": y})]
    assert _export_files((x,)) == [("0", 0, x)]
    assert _export_files(x) == [("state", "state", x)]
    assert [file_stem(k) for k in ("model", "a/b", "a_b", "%2F", ".x", "", "é", "a b")] == [
        "model",
        "a%2Fb",
        "a_b",
        "%252F",
        "%2Ex",
        "%",
        "%C3%A9",
        "a%20b",
    ]
