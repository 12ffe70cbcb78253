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


@pytest.mark.parametrize(("text", "message"), [
    ("run: x\nmax_restarts_on_error: " + "9" * 5000 + "\n", "invalid YAML: Exceeds the limit"),
    ("run: x\nmax_restarts_on_error: 0x" + "f" * 4000 + "\n", "max_restarts_on_error: is a number too long"),
    ("run: x\nsetup: &a [*a]\n", "setup[0]: refers to itself (a YAML alias inside its own anchor)"),
    ("run: x\nenv: " + "[" * 1000 + "]" * 1000 + "\n", "invalid YAML: nested too deeply"),  # ~450 reach the limit
    ("run: x\nspot: {deadline: " + "9" * 400 + "}\n", "spot.deadline"),
    ("run: x\nspot: {max_wait: " + "9" * 400 + "}\n", "must be a finite duration; got a number of about 400 digits"),
    ('run: "echo \\ud800"\n', "run: holds an unpaired surrogate ('\\ud800')"),
])
def test_valid_yaml_that_no_job_can_be_is_a_spec_error_not_a_crash(tmp_path, text, message):
    """Each was a traceback in the CLI and a 500 from the API (or, the surrogate, stored and then never started)."""
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert message in str(caught.value)


def test_a_file_that_never_ends_is_read_no_further_than_a_job_file_can_be(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("run: x\n" + "#" * 1_100_000 + "\n")
    with pytest.raises(SpecError, match="holds more than 1,000,000 characters"):
        load_spec(path)
    with pytest.raises(SpecError, match="holds more than 1,000,000 characters"):
        load_spec("/dev/zero")
