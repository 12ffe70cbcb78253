"""Loading job files from disk: the default name, and files that cannot be used."""

import pickle

import pytest

from spotrun.spec import SpecError, load_spec


def test_job_is_named_after_its_file(tmp_path):
    path = tmp_path / "train-resnet.yaml"
    path.write_text("run: python train.py\n")
    assert load_spec(path).name == "train-resnet"
    assert load_spec(str(path)).name == "train-resnet"


def test_name_in_the_file_wins_over_the_file_name(tmp_path):
    path = tmp_path / "job.yml"
    path.write_text("name: resnet\nrun: python train.py\n")
    assert load_spec(path).name == "resnet"


def test_file_name_that_is_not_a_valid_job_name_asks_for_name(tmp_path):
    path = tmp_path / "my job.yaml"
    path.write_text("run: x\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: name: the file name gives the job the name 'my job', which is not valid; add `name:` to the file"
    )


def test_problems_name_the_file_and_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("run: x\nspot:\n  max_wait: abc\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.source == str(path)
    assert str(caught.value).startswith(f"{path}:3: spot.max_wait: must be a duration")


def test_missing_file_is_a_spec_error(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == f"{path}: no such file"


def test_folder_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="is a folder, not a job file"):
        load_spec(tmp_path)


def test_binary_file_is_a_spec_error(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"run: \xff\xfe\n")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        load_spec(path)


def test_empty_file_is_a_spec_error(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("")
    with pytest.raises(SpecError, match="the file is empty"):
        load_spec(path)


def test_spec_error_survives_pickling():
    with pytest.raises(SpecError) as caught:
        load_spec("/nonexistent/job.yaml")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.problems == caught.value.problems
    assert str(copy) == str(caught.value)


def test_a_nul_byte_is_a_spec_error_not_a_crash() -> None:
    from spotrun.spec import SpecError, parse_spec

    with pytest.raises(SpecError, match="invalid YAML"):
        parse_spec("run: x\x00\n", "job.yaml")
