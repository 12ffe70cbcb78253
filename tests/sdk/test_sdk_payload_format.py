"""The payload format (tensorfile) and the manifest checksums: tensors round-trip bit for bit with their
dtype, shape, strides and sharing; new manifests record xxh3_128; checkpoints written by the previous SDK
(torch.save files, sha256 manifests) still restore; damage is reported, never decoded."""

from __future__ import annotations

import hashlib
import io
import json
import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xxhash

import spotrun
from spotrun.sdk import layout, tensorfile
from spotrun.sdk.errors import NoValidCheckpoint


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),))


def round_trip(value: Any) -> tuple[Any, bytes]:
    buffer = io.BytesIO()
    tensorfile.write(value, buffer)
    data = buffer.getvalue()
    chunks: list[bytes] = []
    decode = tensorfile.read(io.BytesIO(data), len(data), lambda chunk: chunks.append(bytes(chunk)))
    assert b"".join(chunks) == data  # every byte passes the checksum callback, in order
    return decode(), data


def test_tensors_round_trip_bit_for_bit_with_layout_and_sharing() -> None:
    base = torch.randn(6, 4)
    nan = torch.tensor([float("nan"), -0.0, float("inf")])
    value = OrderedDict(
        base=base,
        view=base[1:5:2, ::2],  # shares base's storage, with an offset and strides
        transposed=torch.randn(3, 5).t(),
        bf16=torch.randn(7).bfloat16(),
        ints=torch.arange(-3, 3, dtype=torch.int64),
        flags=torch.tensor([True, False]),
        scalar=torch.tensor(2.5, dtype=torch.float64),
        empty=torch.empty(0, 3),
        nan=nan,
        grad=torch.ones(2, requires_grad=True),
        quantized=torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),  # pickled by torch itself
        other=(random.getstate(), np.random.get_state(), {"lr": 0.1}),
    )
    value._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    with pytest.warns(UserWarning):
        loaded, _ = round_trip(value)
    assert list(loaded) == list(value) and loaded._metadata == value._metadata
    for key in ("base", "view", "transposed", "bf16", "ints", "flags", "scalar", "empty", "nan", "grad"):
        saved, back = value[key], loaded[key]
        assert (back.dtype, back.shape, back.stride(), back.storage_offset()) == (
            saved.dtype, saved.shape, saved.stride(), saved.storage_offset()), key
        assert back.requires_grad == saved.requires_grad, key
        assert torch.equal(storage_bytes(back), storage_bytes(saved)), key  # bit for bit, NaN payloads too
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert torch.equal(loaded["quantized"].int_repr(), value["quantized"].int_repr())
    assert loaded["other"][0] == value["other"][0] and np.array_equal(loaded["other"][1][1], value["other"][1][1])


def test_tensor_bytes_are_written_raw_and_aligned() -> None:
    tensor = torch.arange(1000, dtype=torch.float32)
    _, data = round_trip({"t": tensor})
    raw = tensor.numpy().tobytes()
    offset = data.index(raw)
    assert offset % tensorfile.ALIGNMENT == 0 and len(data) % tensorfile.ALIGNMENT == 0


@pytest.mark.parametrize("cut", [lambda d: d[:-70], lambda d: d + b"\0" * 64, lambda d: d[:20]])
def test_a_file_of_the_wrong_length_is_a_format_error(cut: Any) -> None:
    _, data = round_trip({"t": torch.ones(100)})
    damaged = cut(data)
    with pytest.raises(tensorfile.FormatError):
        tensorfile.read(io.BytesIO(damaged), len(damaged), lambda chunk: None)


def test_new_manifests_record_xxh3_128(tmp_path: Path) -> None:
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=torch.nn.Linear(3, 2)), 0)
    folder = tmp_path / layout.checkpoint_name(1)
    manifest = json.loads((folder / layout.MANIFEST_NAME).read_text())
    assert manifest["format"] == layout.MANIFEST_FORMAT == 2
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert entry == {"size": len(data), "xxh3_128": xxhash.xxh3_128(data).hexdigest()}
        assert data.startswith(tensorfile.MAGIC)


def test_manifests_name_the_runs_total_steps_when_told(tmp_path: Path) -> None:
    with spotrun.Checkpointer(tmp_path, signals=(), total_steps=50) as ckpt:
        ckpt.save(spotrun.torch_state(model=torch.nn.Linear(3, 2)), 9)
    manifest = json.loads((tmp_path / layout.checkpoint_name(10) / layout.MANIFEST_NAME).read_text())
    assert manifest["step"] == 10 and manifest["total_steps"] == 50
    assert 0 < manifest["save_seconds"] < 60  # how long the save took, for the agent's slow-save check
    with spotrun.Checkpointer(tmp_path / "untold", signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=torch.nn.Linear(3, 2)), 0)
    assert "total_steps" not in json.loads((tmp_path / "untold" / layout.checkpoint_name(1) / layout.MANIFEST_NAME).read_text())


@pytest.mark.parametrize("total", [0, -3, 2.5, True, "50"])
def test_a_total_that_is_not_a_whole_number_of_steps_is_refused(tmp_path: Path, total: Any) -> None:
    with pytest.raises(ValueError, match="total_steps"):
        spotrun.Checkpointer(tmp_path, signals=(), total_steps=total)
    assert not tmp_path.joinpath(layout.checkpoint_name(1)).exists()


def write_previous_sdk_checkpoint(root: Path, steps: int, model: torch.nn.Module) -> None:
    """A checkpoint as the SDK wrote it before: torch.save payloads, manifest format 1 with sha256."""
    folder = root / layout.checkpoint_name(steps)
    folder.mkdir(parents=True)
    payloads = {"shared.pt": {"model": model.state_dict()}, "rank-00000.pt": {}}
    files = {}
    for name, payload in payloads.items():
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        (folder / name).write_bytes(buffer.getvalue())
        files[name] = {"size": len(buffer.getvalue()), "sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}
    manifest = {"format": 1, "step": steps, "files": files, "world_size": 1}
    (folder / layout.MANIFEST_NAME).write_text(json.dumps(manifest))


def test_checkpoints_of_the_previous_sdk_still_restore_and_are_verified(tmp_path: Path) -> None:
    saved = torch.nn.Linear(5, 4)
    write_previous_sdk_checkpoint(tmp_path, 7, saved)
    model = torch.nn.Linear(5, 4)
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=model, rng=False)) == 7
    assert torch.equal(model.weight, saved.weight) and torch.equal(model.bias, saved.bias)

    shared = tmp_path / layout.checkpoint_name(7) / "shared.pt"
    data = bytearray(shared.read_bytes())
    data[len(data) // 2] ^= 1
    shared.write_bytes(bytes(data))
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt, pytest.raises(NoValidCheckpoint, match="size/checksum"):
        ckpt.restore(spotrun.torch_state(model=model, rng=False))


def test_an_entry_without_a_known_checksum_is_corrupt(tmp_path: Path) -> None:
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=torch.nn.Linear(3, 2)), 0)
    manifest_path = tmp_path / layout.checkpoint_name(1) / layout.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"].values():
        entry["md5"] = entry.pop("xxh3_128")
    manifest_path.write_text(json.dumps(manifest))
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt, pytest.raises(NoValidCheckpoint, match="no checksum"):
        ckpt.restore(spotrun.torch_state(model=torch.nn.Linear(3, 2)))
