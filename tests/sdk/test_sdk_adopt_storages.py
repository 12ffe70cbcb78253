"""Restore hands a CPU module the storages its checkpoint was read into instead of copying them, only where
that cannot be told apart from ``load_state_dict``'s copy: same values, same Parameter objects, same sharing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import spotrun
from spotrun.sdk.adopt import adopt_storages


def fresh_copy(state: dict[str, Any]) -> dict[str, Any]:
    """The state dict as a restore gives it: new tensors, none shared with the live module."""
    return {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in state.items()}


def net(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))


def loaded_plainly(seed: int, saved: dict[str, Any]) -> dict[str, torch.Tensor]:
    """What ``load_state_dict`` alone makes of ``saved``: the reference every adoption must equal."""
    reference = net(seed)
    reference.load_state_dict(fresh_copy(saved))
    return reference.state_dict()


def assert_state_equal(module: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    for key, tensor in module.state_dict().items():
        assert torch.equal(tensor, expected[key]), key


def test_a_restored_cpu_module_takes_the_loaded_storages_and_keeps_its_parameter_objects(tmp_path: Path) -> None:
    source = net(1)
    saved = source.state_dict()
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=source), 0)
    model = net(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    params, addresses = list(model.parameters()), [p.data_ptr() for p in model.parameters()]
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=model)) == 1
    assert_state_equal(model, saved)
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))  # the optimizer's own objects
    assert all(p.data_ptr() != address for p, address in zip(params, addresses, strict=True))  # adopted, not copied
    model(torch.randn(8, 32)).sum().backward()
    optimizer.step()  # the optimizer still moves the module's parameters
    assert not torch.equal(model[0].weight, saved["0.weight"])


def test_adopting_equals_copying_and_moves_every_plain_tensor() -> None:
    saved = net(1).state_dict()
    model, payload = net(2), fresh_copy(saved)
    adopted = adopt_storages(model, payload, {"model": payload})
    assert adopted == sum(t.nbytes for t in payload.values() if isinstance(t, torch.Tensor))
    model.load_state_dict(payload)
    assert_state_equal(model, loaded_plainly(2, saved))
    assert model[0].weight.data_ptr() == payload["0.weight"].data_ptr()


def test_tied_weights_stay_tied() -> None:
    def tied(seed: int) -> torch.nn.Sequential:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False))
        model[1].weight = model[0].weight
        return model

    saved = tied(1).state_dict()
    payload = {"0.weight": saved["0.weight"].clone()}
    payload["1.weight"] = payload["0.weight"]  # a restore shares what was shared when saved
    model = tied(2)
    assert adopt_storages(model, payload, {"model": payload}) == payload["0.weight"].nbytes
    model.load_state_dict(payload)
    assert model[0].weight is model[1].weight and torch.equal(model[0].weight, saved["0.weight"])


def test_live_tensors_sharing_one_storage_are_copied_into_not_untied() -> None:
    model = torch.nn.Linear(4, 4, bias=False)
    flat = torch.zeros(32)
    model.weight = torch.nn.Parameter(flat[:16].view(4, 4))  # a view into a flat buffer, as FSDP keeps them
    model.register_buffer("scale", flat[16:20])
    payload = {"weight": torch.randn(4, 4), "scale": torch.randn(4)}
    assert adopt_storages(model, payload, {"model": payload}) == 0
    model.load_state_dict(payload)
    assert torch.equal(flat[:16].view(4, 4), payload["weight"]) and torch.equal(flat[16:20], payload["scale"])


def test_a_checkpoint_sharing_what_the_module_does_not_is_copied() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    payload = {"0.weight": torch.randn(4, 4)}
    payload["1.weight"] = payload["0.weight"]
    assert adopt_storages(model, payload, {"model": payload}) == 0
    model.load_state_dict(payload)
    assert model[0].weight.data_ptr() != model[1].weight.data_ptr()


def test_a_storage_another_component_holds_is_copied() -> None:
    model = torch.nn.Linear(4, 4)
    payload = fresh_copy(model.state_dict())
    extra = {"ema": payload["weight"]}
    assert adopt_storages(model, payload, {"model": payload, "extra": extra}) == payload["bias"].nbytes
    model.load_state_dict(payload)
    assert model.weight.data_ptr() != extra["ema"].data_ptr()
    assert model.bias.data_ptr() == payload["bias"].data_ptr()


def test_a_module_whose_loading_rewrites_values_is_left_to_load_state_dict() -> None:
    def doubled(seed: int) -> torch.nn.Linear:
        torch.manual_seed(seed)
        module = torch.nn.Linear(4, 4)

        def double(state: dict[str, Any], prefix: str, *args: Any) -> None:
            state[prefix + "weight"] = state[prefix + "weight"] * 2

        module._register_load_state_dict_pre_hook(double)
        return module

    class Custom(torch.nn.Linear):
        def _load_from_state_dict(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
            state[prefix + "weight"] = state[prefix + "weight"].t()
            super()._load_from_state_dict(state, prefix, *args)

    saved = fresh_copy(torch.nn.Linear(4, 4).state_dict())
    for module, expected in ((doubled(0), saved["weight"] * 2), (Custom(4, 4), saved["weight"].t())):
        payload = fresh_copy(saved)
        assert adopt_storages(module, payload, {"model": payload}) == 0
        module.load_state_dict(payload)
        assert torch.equal(module.weight, expected)


def test_tensors_that_do_not_match_exactly_are_copied() -> None:
    model = torch.nn.Linear(4, 4, bias=False)
    wide = torch.randn(4, 8)
    payload = {"weight": wide[:, :4]}  # same values and shape, another layout: not a whole storage
    assert adopt_storages(model, payload, {"model": payload}) == 0
    model.load_state_dict(payload)
    assert torch.equal(model.weight, wide[:, :4]) and model.weight.is_contiguous()


def test_tensors_without_a_plain_storage_are_left_to_load_state_dict() -> None:
    model = torch.nn.Linear(4, 4)
    model.register_buffer("mask", torch.eye(4).to_sparse())  # sparse: no storage to adopt or compare
    saved = {key: value.clone() for key, value in model.state_dict().items()}
    saved["mask"] = (torch.eye(4) * 2).to_sparse()
    payload = {"model": saved}
    assert adopt_storages(model, saved, payload) == saved["weight"].nbytes + saved["bias"].nbytes
    model.load_state_dict(saved)
    assert torch.equal(model.mask.to_dense(), torch.eye(4) * 2)
