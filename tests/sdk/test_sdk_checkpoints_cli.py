"""`spotrun checkpoints list / export` and `spotrun.load_checkpoint`: a store's checkpoints told apart (complete,
cut short, damaged), and a checkpoint's state written whole to one file that torch.load reads without spotrun."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import spotrun
from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.cli.formats import byte_size
from spotrun.control import jobs as jobs_api
from spotrun.sdk import layout
from spotrun.spec import parse_spec


@pytest.fixture
def store_of_three(tmp_path: Path) -> tuple[Path, list[dict[str, torch.Tensor]]]:
    """Checkpoints of 1, 2 and 3 steps (the third damaged) and a save cut short at 4; the model's weights at each."""
    model = nn.Linear(3, 2)
    state = spotrun.torch_state(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), extra={"note": "x"})
    weights = []
    with spotrun.Checkpointer(tmp_path / "store", keep_last=None, signals=()) as ckpt:
        for step in range(3):
            with torch.no_grad():
                model.weight.add_(1.0)
            ckpt.save(state, step)
            weights.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
    damaged = tmp_path / "store" / layout.checkpoint_name(3) / "shared.pt"
    damaged.write_bytes(damaged.read_bytes()[:-10] + b"0123456789")
    cut_short = tmp_path / "store" / layout.checkpoint_name(4)
    cut_short.mkdir()
    (cut_short / "shared.pt").write_bytes(b"half")
    return tmp_path / "store", weights


def test_list_tells_intact_damaged_and_cut_short_checkpoints_apart(store_of_three, tmp_path: Path) -> None:
    store, _ = store_of_three
    runner = CliRunner()
    listed = runner.invoke(app, ["checkpoints", "list", str(store), "--verify", "--json"])
    assert listed.exit_code == 1, listed.output  # one is damaged
    rows = json.loads(listed.stdout)
    assert [(row["steps"], row["state"].split(":")[0]) for row in rows] == [
        (1, "intact"), (2, "intact"), (3, "damaged"), (4, "incomplete (no manifest")]
    assert "shared.pt does not match its size/checksum" in rows[2]["state"]
    assert rows[0]["world_size"] == 1 and rows[0]["kind"] == "checkpointer" and rows[0]["bytes"] > 0
    assert 0 < rows[0]["save_seconds"] < 60 and rows[3]["save_seconds"] is None

    unread = json.loads(runner.invoke(app, ["checkpoints", "list", str(store), "--json"]).stdout)
    assert [row["state"].split(" ")[0] for row in unread] == ["complete"] * 3 + ["incomplete"]  # without --verify:
    table = runner.invoke(app, ["checkpoints", "list", str(store)])                              # not read, not judged
    assert table.exit_code == 0 and "steps" in table.output  # the table (its cells wrap at 80 columns)

    missing = runner.invoke(app, ["checkpoints", "list", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no such checkpoint folder" in missing.output  # a bad argument, as a bad path
    assert not (tmp_path / "nowhere").exists()                                        # to `launch` is
    judged = runner.invoke(app, ["checkpoints", "list", str(store), "--verify"], env={"COLUMNS": "300"})
    assert judged.exit_code == 1 and "1 damaged checkpoint(s)" in judged.output


def test_list_shows_what_a_save_cut_short_left_as_found(store_of_three) -> None:
    """It showed "0 B, 0 files" for a folder without a manifest, whatever the save had written there."""
    store, _ = store_of_three
    cut_short = store / layout.checkpoint_name(4)
    (cut_short / "model").mkdir()
    (cut_short / "model" / "rank0.pt").write_bytes(b"x" * 2000)
    rows = json.loads(CliRunner().invoke(app, ["checkpoints", "list", str(store), "--json"]).stdout)
    assert (rows[3]["state"], rows[3]["bytes"], rows[3]["files"]) == (
        "incomplete (no manifest: a save cut short)", 2004, 2)  # shared.pt's 4 bytes ("half") and rank0.pt's
    table = CliRunner().invoke(app, ["checkpoints", "list", str(store)], env={"COLUMNS": "300"})
    row = next(line for line in table.output.splitlines() if "incomplete" in line)
    assert [cell.strip() for cell in row.split("│")[2:5]] == [
        "incomplete (no manifest: a save cut short)", "2.0 KiB", "2"], row


def test_list_says_a_file_is_not_a_checkpoint_folder(tmp_path: Path) -> None:
    """It said "no such checkpoint folder" of a path that exists."""
    file = tmp_path / "model.pt"
    file.write_bytes(b"weights")
    for arguments in (["list", str(file)], ["export", str(tmp_path / "out.pt"), str(file)]):
        refused = CliRunner().invoke(app, ["checkpoints", *arguments], env={"COLUMNS": "300"})
        said = " ".join(refused.output.split())
        assert refused.exit_code == 2 and f"{file}: is a file, not a checkpoint folder" in said, said
    assert file.read_bytes() == b"weights" and not (tmp_path / "out.pt").exists()


def test_list_of_a_folder_of_jobs_folders_names_those_holding_checkpoints(store_of_three, tmp_path: Path) -> None:
    """`checkpoints list $SPOTRUN_HOME/checkpoints` (a folder per job) said "no checkpoints" and nothing more."""
    (tmp_path / "empty-job").mkdir()
    def unwrapped(text: str) -> str:  # rich wraps long paths anywhere, at 80 columns here
        return "".join(text.split())

    listed = CliRunner().invoke(app, ["checkpoints", "list", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert unwrapped(f"{tmp_path}: no checkpoints; folders in it hold some: store (list one of them, or give --job ID)"
                     ) in unwrapped(listed.output), listed.output
    nothing = CliRunner().invoke(app, ["checkpoints", "list", str(tmp_path / "empty-job")])
    assert nothing.exit_code == 0 and unwrapped(nothing.output).endswith("empty-job:nocheckpoints"), nothing.output


def test_list_tells_an_unreadable_manifest_from_a_save_cut_short(store_of_three) -> None:
    store, _ = store_of_three
    (store / layout.checkpoint_name(2) / layout.MANIFEST_NAME).write_text("{not json")
    rows = json.loads(CliRunner().invoke(app, ["checkpoints", "list", str(store), "--json"]).stdout)
    assert [row["state"] for row in rows][1:] == [
        f"damaged: {layout.MANIFEST_NAME} is not a readable manifest", "complete", "incomplete (no manifest: a save cut short)"]
    found = [f for f in (store / layout.checkpoint_name(2)).rglob("*") if f.is_file()]  # the manifest too
    assert (rows[1]["files"], rows[1]["bytes"]) == (len(found), sum(f.stat().st_size for f in found))


@pytest.mark.parametrize(
    ("location", "message"),
    [("foo://bar", "foo://bar: cannot be read: ValueError: Protocol not known: foo"),
     ("s3://no-such-bucket/x", "s3://no-such-bucket/x: cannot be read: ")],
)
def test_a_location_that_cannot_be_read_is_one_error_line(location: str, message: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    runner = CliRunner()
    for arguments in (["list", location], ["export", str(tmp_path / "out.pt"), location]):
        refused = runner.invoke(app, ["checkpoints", *arguments], env={"COLUMNS": "300"})
        assert refused.exit_code == 1 and message in refused.output.replace("\n", ""), refused.output
        assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert not (tmp_path / "out.pt").exists()


def test_export_writes_the_newest_intact_state_whole_and_refuses_what_it_cannot_do(store_of_three, tmp_path: Path) -> None:
    store, weights = store_of_three
    runner = CliRunner()
    out = tmp_path / "model.pt"
    done = runner.invoke(app, ["checkpoints", "export", str(out), str(store), "--component", "model"])
    assert done.exit_code == 0, done.output
    said = done.output.replace("\n", "")
    assert "warning: skipping checkpoint" in said and "ckpt-000000000003: shared.pt does not match" in said
    assert "ckpt-000000000002 (2 steps): 2 tensors" in said  # the damaged 3 skipped
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()  # as any new file, not mkstemp's owner-only
    exported = torch.load(out, weights_only=True)
    assert exported.keys() == weights[1].keys()
    assert all(torch.equal(exported[name], weights[1][name]) for name in exported)

    everything = runner.invoke(app, ["checkpoints", "export", str(tmp_path / "all.pt"), str(store), "--step", "1"])
    assert everything.exit_code == 0, everything.output
    whole = torch.load(tmp_path / "all.pt", weights_only=False)
    assert sorted(whole) == ["extra", "model", "optimizer", "rng"] and whole["extra"] == {"note": "x"}
    assert torch.equal(whole["model"]["weight"], weights[0]["weight"])

    before = out.read_bytes()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    refusals = {
        "exists: give --force": ["checkpoints", "export", str(out), str(store)],
        "no checkpoint of 9 steps (it holds: 1, 2, 3)": ["checkpoints", "export", str(tmp_path / "a.pt"), str(store), "--step", "9"],
        "shared.pt does not match": ["checkpoints", "export", str(tmp_path / "b.pt"), str(store), "--step", "3"],
        "no component 'modle'": ["checkpoints", "export", str(tmp_path / "c.pt"), str(store), "--component", "modle"],
        "one of them": ["checkpoints", "export", str(tmp_path / "d.pt")],
        "is a folder: give the file to write": ["checkpoints", "export", str(store), str(store), "--force"],
        # a FIFO was renamed over (as root, /dev/null became a regular file)
        "is not a regular file": ["checkpoints", "export", str(fifo), str(store), "--force"],
        "all.pt/x.pt: cannot be written": ["checkpoints", "export", str(tmp_path / "all.pt" / "x.pt"), str(store)],
    }
    for message, arguments in refusals.items():
        refused = runner.invoke(app, arguments, env={"COLUMNS": "300"})
        assert refused.exit_code in (1, 2) and message in refused.output.replace("\n", ""), (message, refused.output)
    assert out.read_bytes() == before and fifo.is_fifo()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["all.pt", "model.pt", "pipe", "store"]  # no half-written file


def test_export_of_a_frameworks_checkpoints_says_so_and_not_to_move_them_aside(tmp_path: Path) -> None:
    """A Lightning (or Trainer) store: "no valid checkpoint ... (move these aside to start from scratch)", though
    every checkpoint was intact, only not the Checkpointer's."""
    from spotrun.sdk import foreign

    store = foreign.local_store(tmp_path / "store", "Lightning")
    written = tmp_path / "written"
    written.mkdir()
    (written / "lightning.ckpt").write_bytes(b"a Lightning checkpoint")
    foreign.commit(store, str(written), 40, payload=layout.LIGHTNING_PAYLOAD)
    store.release()
    refused = CliRunner().invoke(app, ["checkpoints", "export", str(tmp_path / "out.pt"), str(tmp_path / "store")],
                                 env={"COLUMNS": "300"})
    said = refused.output.replace("\n", " ")
    assert refused.exit_code == 1, refused.output
    assert "holds another framework's checkpoints, not the Checkpointer's" in said and "move these aside" not in said
    assert "ckpt-000000000040: a lightning checkpoint" in said
    assert not (tmp_path / "out.pt").exists()


def test_a_jobs_own_store_is_found_by_its_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPOTRUN_SERVER", raising=False)
    spec = parse_spec(f"name: kept\nrun: 'true'\nresources: {{cloud: local, instance_type: local.cpu}}\n"
                      f"checkpoint: {{store: '{(tmp_path / 'kept').as_uri()}'}}\n")
    job_id = jobs_api.submit(EmbeddedBackend().store, spec, time.time())
    model = nn.Linear(2, 2)
    with spotrun.Checkpointer(tmp_path / "kept", signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model, rng=False), 4)

    runner = CliRunner()
    listed = runner.invoke(app, ["checkpoints", "list", "--job", str(job_id), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [row["steps"] for row in json.loads(listed.stdout)] == [5]
    unknown = runner.invoke(app, ["checkpoints", "list", "--job", "99"])
    assert unknown.exit_code == 1 and "99" in unknown.output
    (tmp_path / "kept").rename(tmp_path / "moved")  # the job's store, on record, is not there: not a bad argument
    gone = runner.invoke(app, ["checkpoints", "list", "--job", str(job_id)])
    assert gone.exit_code == 1 and "no such checkpoint folder" in gone.output


def test_export_to_safetensors_takes_a_component_of_tensors_tied_weights_included(tmp_path: Path) -> None:
    from safetensors.torch import load_file, safe_open

    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight  # tied: one storage under two names
    with spotrun.Checkpointer(tmp_path / "store", signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1)), 9)
    runner = CliRunner()
    out = tmp_path / "model.safetensors"
    done = runner.invoke(app, ["checkpoints", "export", str(out), str(tmp_path / "store"), "--component", "model"])
    assert done.exit_code == 0, done.output
    loaded = load_file(out)
    assert loaded.keys() == {"0.weight", "1.weight"}
    assert all(torch.equal(loaded[name], model.state_dict()[name]) for name in loaded)
    with safe_open(out, "pt") as opened:
        assert opened.metadata()["spotrun_steps"] == "10"

    refused = runner.invoke(app, ["checkpoints", "export", str(tmp_path / "all.safetensors"), str(tmp_path / "store")],
                            env={"COLUMNS": "300"})
    assert refused.exit_code == 2 and "give one --component of tensors" in refused.output.replace("\n", "")
    assert not (tmp_path / "all.safetensors").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(("field", "value"), [
    ("created", "yesterday"), ("created", 1e300), ("created", -1e18), ("created", float("nan")),
    ("payload", 5), ("payload", ["x"]), ("world_size", "two"), ("total_steps", 2.5),
])
def test_a_manifest_field_of_the_wrong_type_shows_as_unknown_not_a_traceback(store_of_three, field, value) -> None:
    store, _ = store_of_three
    manifest_path = store / layout.checkpoint_name(2) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest[field] = value
    manifest_path.write_text(json.dumps(manifest))
    runner = CliRunner()

    table = runner.invoke(app, ["checkpoints", "list", str(store)], env={"COLUMNS": "200"})
    listed = runner.invoke(app, ["checkpoints", "list", str(store), "--json", "--verify"])

    assert table.exit_code == 0 and table.exception is None, table.output
    assert listed.exception is None or isinstance(listed.exception, SystemExit)
    rows = json.loads(listed.stdout)  # valid JSON: no bare NaN
    row = next(row for row in rows if row["steps"] == 2)
    assert row[{"payload": "kind"}.get(field, field)] in (None, "checkpointer")
    if field == "payload":
        assert row["state"].startswith("damaged: its payload")  # nothing could load it


def test_a_file_entry_whose_size_is_not_a_number_damages_only_its_checkpoint(store_of_three) -> None:
    store, _ = store_of_three
    manifest_path = store / layout.checkpoint_name(2) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["shared.pt"]["size"] = "576"
    manifest_path.write_text(json.dumps(manifest))

    listed = CliRunner().invoke(app, ["checkpoints", "list", str(store), "--json", "--verify"])

    rows = json.loads(listed.stdout)
    assert [(row["steps"], row["state"].split(":")[0]) for row in rows][:2] == [(1, "intact"), (2, "damaged")]


@pytest.mark.parametrize("verify", [[], ["--verify"]])
def test_a_file_size_past_any_files_damages_only_its_checkpoint(store_of_three, verify) -> None:
    """`checkpoints list` ended in a traceback (OverflowError: integer division result too large for a float)."""
    store, _ = store_of_three
    manifest_path = store / layout.checkpoint_name(2) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["shared.pt"]["size"] = 10**400
    manifest_path.write_text(json.dumps(manifest))
    runner = CliRunner()

    table = runner.invoke(app, ["checkpoints", "list", str(store), *verify], env={"COLUMNS": "300"})
    rows = json.loads(runner.invoke(app, ["checkpoints", "list", str(store), "--json", *verify]).stdout)

    assert table.exit_code == 1 and isinstance(table.exception, SystemExit), table.output
    said = "damaged: shared.pt's size in the manifest (about 10^400 B) is past any file's"
    assert said in table.output and f"{2 if verify else 1} damaged checkpoint(s)" in table.output  # --verify: 3 too
    assert [row["state"] for row in rows][:2] == ["intact" if verify else "complete", said]


def test_a_manifest_nested_too_deep_to_read_damages_only_its_checkpoint(store_of_three) -> None:
    """The whole listing failed: "cannot be read: RecursionError: maximum recursion depth exceeded"."""
    store, _ = store_of_three
    (store / layout.checkpoint_name(2) / layout.MANIFEST_NAME).write_text("[" * 100_000 + "]" * 100_000)

    listed = CliRunner().invoke(app, ["checkpoints", "list", str(store), "--json"])

    assert listed.exit_code == 1, listed.output
    rows = json.loads(listed.stdout)
    assert [row["state"] for row in rows][:3] == [
        "complete", f"damaged: {layout.MANIFEST_NAME} is not a readable manifest", "complete"]


SIZES_SHOWN = [
    (0, "0 B"), (1023, "1023 B"), (2048, "2.0 KiB"), (3 * 2**30, "3.0 GiB"), (2**63 - 1, "8589934592.0 GiB"),
    (2**63, "about 10^18 B"), (10**400, "about 10^400 B"), (10**5000, "about 10^5000 B"),
]


@pytest.mark.parametrize(("count", "shown"), SIZES_SHOWN, ids=[shown for _, shown in SIZES_SHOWN])  # no str(10**5000)
def test_byte_size_writes_any_int(count: int, shown: str) -> None:
    assert byte_size(count) == shown


def test_verify_calls_a_checkpoint_with_nothing_to_load_damaged(store_of_three) -> None:
    """A manifest listing no file was "intact", though export and the SDK's restore refuse it."""
    store, _ = store_of_three
    manifest_path = store / layout.checkpoint_name(2) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"] = {}
    manifest_path.write_text(json.dumps(manifest))

    rows = json.loads(CliRunner().invoke(app, ["checkpoints", "list", str(store), "--json", "--verify"]).stdout)

    assert rows[1]["state"] == "damaged: shared.pt is not listed in the manifest"


@pytest.mark.parametrize("name", ["../x", "/etc/hostname", "sub/../../x"])
def test_export_refuses_a_checkpoint_listing_a_file_outside_its_folder_as_verify_does(
    store_of_three, tmp_path: Path, name: str
) -> None:
    """Export read such a checkpoint and exited 0, without a word, though `list --verify` called it damaged."""
    store, weights = store_of_three
    (tmp_path / "x").write_bytes(b"not the checkpoint's")
    manifest_path = store / layout.checkpoint_name(2) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][name] = layout.describe_bytes(b"not the checkpoint's")
    manifest_path.write_text(json.dumps(manifest))
    runner = CliRunner()
    said = f"ckpt-000000000002: {name} is outside the checkpoint"

    rows = json.loads(runner.invoke(app, ["checkpoints", "list", str(store), "--json", "--verify"]).stdout)
    chosen = runner.invoke(app, ["checkpoints", "export", str(tmp_path / "two.pt"), str(store), "--step", "2"],
                           env={"COLUMNS": "300"})
    newest = runner.invoke(app, ["checkpoints", "export", str(tmp_path / "newest.pt"), str(store)],
                           env={"COLUMNS": "300"})

    assert rows[1]["state"].startswith("damaged:") and said in rows[1]["state"]
    assert chosen.exit_code == 1 and said in chosen.output, chosen.output
    assert not (tmp_path / "two.pt").exists()
    told = newest.output.replace("\n", "")  # the newest intact one, the others skipped as any damaged checkpoint is
    assert newest.exit_code == 0 and f"warning: skipping checkpoint {store / said}" in told, told
    assert "ckpt-000000000001 (1 steps)" in told
    assert torch.equal(torch.load(tmp_path / "newest.pt", weights_only=False)["model"]["weight"], weights[0]["weight"])


def test_export_of_a_negative_step_is_a_bad_argument(store_of_three, tmp_path: Path) -> None:
    """No checkpoint can be of -1 steps: it was exit 1, "no checkpoint of -1 steps", as for a step not there."""
    store, _ = store_of_three
    refused = CliRunner().invoke(app, ["checkpoints", "export", str(tmp_path / "a.pt"), str(store), "--step", "-1"],
                                 env={"COLUMNS": "300"})
    assert refused.exit_code == 2 and "Invalid value for '--step'" in refused.output, refused.output
    assert not (tmp_path / "a.pt").exists()
