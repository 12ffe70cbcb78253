"""Validation of job-file text: accepted values, defaults, and problems that name their field and line."""

from textwrap import dedent

import pytest

from spotrun.spec import CheckpointSpec, JobSpec, Problem, Resources, SpecError, SpotSpec, parse_spec
from spotrun.spec import expansion

FULL_JOB = dedent(
    """\
    name: resnet-50.v2
    run: python train.py --epochs 90
    setup: pip install -r requirements.txt
    workdir: code
    env:
      WANDB_MODE: offline
      SEED: 42
      LR: 0.1
      DEBUG: false
    resources:
      cloud: aws
      instance_type: p3.2xlarge
      accelerators: V100:1
      nodes: 2
    spot:
      use_spot: true
      fallback: wait
      max_price: 1.25
      zones: [us-east-1a, us-east-1b]
      max_wait: 12h
      deadline: 2030-01-02T03:04:05+02:00
      policy: deadline-aware
      preemptions_before_fallback: 5
      fallback_window: 30m
      notice_grace: 45s
      restart_overhead: 4m
    checkpoint:
      dir: /scratch/ckpt
      store: s3://bucket/jobs/resnet
      sync_interval: 2m
      final_backup_timeout: 10m
    max_restarts_on_error: 0
    estimated_duration: 6h
    """
)


def problems_of(text: str, **kwargs) -> list[Problem]:
    with pytest.raises(SpecError) as caught:
        parse_spec(text, source="job.yaml", **kwargs)
    return caught.value.problems


def only_problem(text: str) -> Problem:
    problems = problems_of(text)
    assert len(problems) == 1, problems
    return problems[0]


def test_full_job_file_is_read_field_by_field():
    spec = parse_spec(FULL_JOB)

    assert spec.name == "resnet-50.v2"
    assert spec.run == "python train.py --epochs 90"
    assert spec.setup == "pip install -r requirements.txt"
    assert spec.workdir == "code"
    assert spec.env == {"WANDB_MODE": "offline", "SEED": "42", "LR": "0.1", "DEBUG": "false"}
    assert spec.resources == Resources(cloud="aws", instance_type="p3.2xlarge", accelerators={"V100": 1}, nodes=2)
    assert spec.spot.use_spot is True
    assert spec.spot.fallback == "wait"
    assert spec.spot.max_price == 1.25
    assert spec.spot.zones == ["us-east-1a", "us-east-1b"]
    assert spec.spot.max_wait == 12 * 3600
    assert spec.spot.deadline.isoformat() == "2030-01-02T03:04:05+02:00"
    assert spec.spot.policy == "deadline-aware"
    assert spec.spot.preemptions_before_fallback == 5
    assert spec.spot.fallback_window == 1800
    assert spec.spot.notice_grace == 45
    assert spec.spot.restart_overhead == 240
    assert spec.checkpoint == CheckpointSpec(
        dir="/scratch/ckpt", store="s3://bucket/jobs/resnet", sync_interval=120, final_backup_timeout=600
    )
    assert spec.max_restarts_on_error == 0
    assert spec.estimated_duration == 6 * 3600


def test_defaults_fill_everything_but_run():
    spec = parse_spec("run: python train.py")

    assert spec.name is None
    assert spec.setup is None and spec.workdir is None and spec.estimated_duration is None
    assert spec.env == {}
    assert spec.resources == Resources(cloud="local", instance_type="local.cpu", accelerators=None, nodes=1)
    assert spec.spot == SpotSpec(
        use_spot=True,
        fallback="on-demand",
        max_price=None,
        zones=None,
        max_wait=None,
        deadline=None,
        policy="default",
        preemptions_before_fallback=3,
        fallback_window=3600.0,
        notice_grace=30.0,
    )
    assert spec.checkpoint == CheckpointSpec(dir="checkpoints", store=None, sync_interval=30.0)
    assert spec.checkpoint.final_backup_timeout is None  # the agent's own default (6 h)
    assert spec.max_restarts_on_error == 3


def test_default_name_applies_only_when_the_file_has_none():
    assert parse_spec("run: x", default_name="train").name == "train"
    assert parse_spec("name: mine\nrun: x", default_name="train").name == "mine"


def test_spec_is_immutable():
    spec = parse_spec("run: x")
    with pytest.raises(ValueError):
        spec.run = "y"


@pytest.mark.parametrize(
    ("accelerators", "expected"),
    [
        ("V100:1", {"V100": 1}),
        ("A100:8", {"A100": 8}),
        ("V100", {"V100": 1}),
        ("{V100: 2, T4: 1}", {"V100": 2, "T4": 1}),
    ],
)
def test_accelerators_are_normalized_to_counts(accelerators, expected):
    spec = parse_spec(f"run: x\nresources:\n  cloud: gcp\n  accelerators: {accelerators}\n")
    assert spec.resources.accelerators == expected
    assert spec.resources.instance_type is None  # the provider picks a type that carries them


def test_local_cloud_with_accelerators_gets_no_default_instance_type():
    spec = parse_spec("run: x\nresources:\n  accelerators: V100\n")
    assert spec.resources.instance_type is None


def test_env_values_keep_the_text_the_user_wrote():
    spec = parse_spec("run: x\nenv:\n  VERSION: 1.10\n  MODE: 0755\n  FLAG: yes\n  WHEN: 2025-01-01\n  EMPTY: ''\n")
    assert spec.env == {"VERSION": "1.10", "MODE": "0755", "FLAG": "yes", "WHEN": "2025-01-01", "EMPTY": ""}


def test_env_scalars_become_strings_when_built_from_python():
    spec = JobSpec.model_validate({"run": "x", "env": {"A": 1, "B": 2.5, "C": True, "D": "d"}})
    assert spec.env == {"A": "1", "B": "2.5", "C": "true", "D": "d"}


@pytest.mark.parametrize(
    ("text", "field", "line", "message"),
    [
        ("run: x\nfoo: 1\n", "foo", 2, "unknown field 'foo'"),
        ("run: x\nspot:\n  max_wiat: 3\n", "spot.max_wiat", 3, "unknown field 'max_wiat' (did you mean 'max_wait'?)"),
        ("run: x\ncheckpoint:\n  dir: a\n  bogus: 1\n", "checkpoint.bogus", 4, "unknown field 'bogus'"),
        ("name: job\n", "run", None, "field required"),
        ("run: ''\n", "run", 1, "must not be empty"),
        ("run: '   '\n", "run", 1, "must not be empty"),
        ("run: 123\n", "run", 1, "must be a string; got 123"),
        ("name: 'has space'\nrun: x\n", "name", 1, "starting with a letter or digit; got 'has space'"),
        ("name: -dash\nrun: x\n", "name", 1, "got '-dash'"),
        (f"name: {'a' * 64}\nrun: x\n", "name", 1, "1 to 63 letters"),
        ("run: x\nenv:\n  1BAD: v\n", "env.1BAD", 3, "'1BAD' is not a valid environment variable name"),
        ("run: x\nenv:\n  BAD-NAME: v\n", "env.BAD-NAME", 3, "not a valid environment variable name"),
        ("run: x\nenv:\n  A:\n    nested: v\n", "env.A", 3, "must be a string, number or true/false; got a mapping"),
        ("run: x\nenv:\n  A: [1, 2]\n", "env.A", 3, "got a list"),
        ("run: x\nenv:\n  A:\n", "env.A", 3, "got null"),
        ("run: x\nenv: [A]\n", "env", 2, "must be a mapping"),
        ("run: x\nresources:\n  cloud: aws\n", "resources.instance_type", 2, "required when cloud is 'aws'"),
        ("run: x\nresources:\n  nodes: 0\n", "resources.nodes", 3, "must be at least 1; got 0"),
        ("run: x\nresources:\n  nodes: '2'\n", "resources.nodes", 3, "must be a whole number; got '2'"),
        ("run: x\nresources:\n  nodes: 1.5\n", "resources.nodes", 3, "must be a whole number"),
        ("run: x\nresources:\n  accelerators: V100:0\n", "resources.accelerators", 3, "at least 1"),
        ("run: x\nresources:\n  accelerators: 'V100:x'\n", "resources.accelerators", 3, "got 'V100:x'"),
        ("run: x\nresources:\n  accelerators: 'a:1:2'\n", "resources.accelerators", 3, "like 'V100:1'"),
        ("run: x\nresources:\n  accelerators: 4\n", "resources.accelerators", 3, "like 'V100:1'"),
        ("run: x\nresources:\n  accelerators: {}\n", "resources.accelerators", 3, "must not be empty"),
        (
            "run: x\nresources:\n  accelerators:\n    V100: 0\n",
            "resources.accelerators.V100",
            4,
            "must be at least 1; got 0",
        ),
        ("run: x\nresources:\n  accelerators: {V100: true}\n", "resources.accelerators.V100", 3, "whole number"),
        ("run: x\nspot:\n  use_spot: 1\n", "spot.use_spot", 3, "must be true or false; got 1"),
        ("run: x\nspot:\n  fallback: never\n", "spot.fallback", 3, "must be 'on-demand' or 'wait'; got 'never'"),
        ("run: x\nspot:\n  max_price: 0\n", "spot.max_price", 3, "must be greater than 0"),
        ("run: x\nspot:\n  max_price: -1.5\n", "spot.max_price", 3, "must be greater than 0; got -1.5"),
        ("run: x\nspot:\n  max_price: .inf\n", "spot.max_price", 3, "finite"),
        ("run: x\nspot:\n  max_price: cheap\n", "spot.max_price", 3, "must be a number; got 'cheap'"),
        ("run: x\nspot:\n  zones: []\n", "spot.zones", 3, "must not be empty"),
        ("run: x\nspot:\n  zones: us-east-1a\n", "spot.zones", 3, "must be a list"),
        ("run: x\nspot:\n  zones:\n    - a\n    - b\n    - a\n", "spot.zones", 3, "lists 'a' more than once"),
        ("run: x\nspot:\n  zones:\n    - a\n    - 7\n", "spot.zones[1]", 5, "must be a string; got 7"),
        ("run: x\nspot:\n  max_wait: abc\n", "spot.max_wait", 3, "must be a duration like 90s, 10m, 2h"),
        ("run: x\nspot:\n  max_wait: -5\n", "spot.max_wait", 3, "must not be negative"),
        ("run: x\nspot:\n  notice_grace: soon\n", "spot.notice_grace", 3, "got 'soon'"),
        ("run: x\nspot:\n  restart_overhead: -1m\n", "spot.restart_overhead", 3, "must not be negative"),
        ("run: x\nspot:\n  fallback_window: 0\n", "spot.fallback_window", 3, "must be greater than 0"),
        ("run: x\nspot:\n  preemptions_before_fallback: 0\n", "spot.preemptions_before_fallback", 3, "at least 1"),
        ("run: x\nspot:\n  policy: ''\n", "spot.policy", 3, "must not be empty"),
        ("run: x\nspot: fast\n", "spot", 2, "must be a mapping of fields; got 'fast'"),
        ("run: x\ncheckpoint:\n  sync_interval: 0\n", "checkpoint.sync_interval", 3, "greater than 0"),
        ("run: x\ncheckpoint:\n  final_backup_timeout: 0\n", "checkpoint.final_backup_timeout", 3, "greater than 0"),
        ("run: x\ncheckpoint:\n  final_backup_timeout: -5m\n", "checkpoint.final_backup_timeout", 3, "must not be negative"),
        ("run: x\ncheckpoint:\n  final_backup_timeout: soon\n", "checkpoint.final_backup_timeout", 3, "must be a duration"),
        ("run: x\ncheckpoint:\n  dir: ''\n", "checkpoint.dir", 3, "must not be empty"),
        ("run: x\nmax_restarts_on_error: -1\n", "max_restarts_on_error", 2, "must be at least 0; got -1"),
        ("run: x\nestimated_duration: forever\n", "estimated_duration", 2, "must be a duration"),
        ("run: x\n3: y\n", "3", 2, "field names must be text; `3` reads as a number: quote it ('3')"),
        ("run: x\n~: y\n", "~", 2, "`~` reads as null"),
        ("run: x\non: push\n", "on", 2, "`on` reads as true or false"),
        ("run: x\nenv:\n  A: b\n  2024-01-01: y\n", "env.2024-01-01", 4, "`2024-01-01` reads as a date"),
    ],
)
def test_bad_value_is_reported_with_field_line_and_message(text, field, line, message):
    problem = only_problem(text)
    assert (problem.field, problem.line) == (field, line)
    assert message in problem.message


def test_every_problem_in_a_file_is_reported_at_once_in_file_order():
    text = dedent(
        """\
        name: ok
        run: ""
        resources:
          nodes: 0
        spot:
          max_wait: abc
          zones:
            - a
            - a
          extra: 1
        checkpoint:
          sync_interval: never
        """
    )
    problems = problems_of(text)

    assert [(p.field, p.line) for p in problems] == [
        ("run", 2),
        ("resources.nodes", 4),
        ("spot.max_wait", 6),
        ("spot.zones", 7),
        ("spot.extra", 10),
        ("checkpoint.sync_interval", 12),
    ]


def test_error_text_is_one_line_per_problem_with_source_line_and_field():
    with pytest.raises(SpecError) as caught:
        parse_spec("run: x\nspot:\n  max_wait: abc\nfoo: 1\n", source="job.yaml")

    assert str(caught.value).splitlines() == [
        "job.yaml:3: spot.max_wait: must be a duration like 90s, 10m, 2h, 1h30m or a number of seconds; got 'abc'",
        "job.yaml:4: foo: unknown field 'foo'",
    ]


def test_missing_field_without_a_line_is_shown_without_one():
    with pytest.raises(SpecError) as caught:
        parse_spec("name: job\n", source="job.yaml")
    assert str(caught.value) == "job.yaml: run: field required"


def test_missing_nested_field_points_at_its_enclosing_key():
    problem = only_problem("run: x\n\nresources:\n  cloud: aws\n  nodes: 2\n")
    assert (problem.field, problem.line) == ("resources.instance_type", 3)


def test_a_repeated_key_is_a_problem_naming_both_lines():
    problems = problems_of("run: a\nspot:\n  use_spot: true\n  use_spot: false\nrun: b\n")
    assert [(p.field, p.line, p.message) for p in problems] == [
        ("spot.use_spot", 4, "duplicate key 'use_spot' (first on line 3)"),
        ("run", 5, "duplicate key 'run' (first on line 1)"),
    ]


def test_invalid_default_name_from_the_file_says_where_it_came_from():
    problem = problems_of("run: x", default_name="my job")[0]
    assert problem.field == "name"
    assert "'my job'" in problem.message and "add `name:`" in problem.message


def test_bad_accelerators_do_not_also_blame_instance_type():
    problem = only_problem("run: x\nresources:\n  cloud: aws\n  accelerators: 'V100:0'\n")
    assert problem.field == "resources.accelerators"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("run: [unclosed\n", 2, "invalid YAML"),
        ("run: x\n  bad: indent\n", 2, "invalid YAML: mapping values are not allowed here"),
        ("run: x\n\tname: tab\n", 2, "invalid YAML"),
        ("run: x\n---\nrun: y\n", 2, "one YAML document"),
        ("- run: x\n", 1, "the top level must be a mapping"),
        ("just text\n", 1, "got 'just text'"),
        ("null\n", 1, "got null"),
    ],
)
def test_unusable_yaml_is_a_spec_error_with_its_line(text, line, message):
    problem = only_problem(text)
    assert problem.field == ""
    assert problem.line == line
    assert message in problem.message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file_is_a_spec_error(text):
    problem = only_problem(text)
    assert "the file is empty" in problem.message


def test_a_job_file_that_aliases_expand_past_the_limit_is_refused_before_it_is_stored():
    """100 aliases of one 20 kB text: a 20 kB file stored as a 2 MB spec (the YAML reader takes 3.5 s a MB of text)."""
    text = 'run: "true"\nresources: {cloud: local, instance_type: local.cpu}\nenv:\n  A0: &big "' + "x" * 20_000 + '"\n'
    text += "".join(f"  A{index}: *big\n" for index in range(1, 100))
    with pytest.raises(SpecError, match="expands to more than 1,000,000 characters"):
        parse_spec(text)
    nested = 'run: "true"\nresources: {cloud: local, instance_type: local.cpu}\nx0: &a0 [[], []]\n' + "".join(
        f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]\n" for level in range(1, 8)
    )
    with pytest.raises(SpecError, match="expands to more than"):  # nested aliases of empty lists
        parse_spec(nested)


def test_nested_aliases_are_refused_without_counting_each_use(monkeypatch):
    """Lists nested 12 deep, each of ten aliases of the one below: 10**12 uses, refused once the sizes add up, each
    aliased list counted once. Counted use by use, 642,828 texts were read before the limit; 7 deep took 5 s."""
    nested = 'run: "true"\nresources: {cloud: local, instance_type: local.cpu}\nx0: &a0 [a, b]\n' + "".join(
        f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]\n" for level in range(1, 13)
    )
    read: list[object] = []
    text_of = expansion._text
    monkeypatch.setattr(expansion, "_text", lambda data, path: read.append(data) or text_of(data, path))
    with pytest.raises(SpecError, match="expands to more than"):
        parse_spec(nested)
    assert len(read) < 100, f"{len(read):,} texts read to size a 300-byte file"


def test_a_nul_character_is_refused_naming_its_field_and_line():
    text = 'run: "echo \\0"\nresources: {cloud: local, instance_type: local.cpu}\nenv: {"K": "a\\0b"}\n'
    with pytest.raises(SpecError) as refused:
        parse_spec(text, source="job.yaml")
    assert [(p.field, p.line) for p in refused.value.problems] == [("run", 1), ("env.K", 3)]
    assert all("NUL character" in p.message for p in refused.value.problems)


@pytest.mark.parametrize("count", ["²", "0", "9" * 5000])
def test_an_accelerator_count_that_is_no_plain_whole_number_is_named(count: str) -> None:
    """"²" is a digit to Python, and int() refused it with its own words; 5,000 digits were past int()'s limit."""
    with pytest.raises(SpecError, match="the count after ':' must be a whole number of at least 1"):
        parse_spec(f'run: x\nresources: {{cloud: aws, accelerators: "V100:{count}"}}\n')


@pytest.mark.parametrize("distributed", [
    "{launcher: torchrun, procs_per_node: 4}", "{launcher: torchrun}", "{gang_timeout: 5m}",
])
def test_a_distributed_block_for_one_node_is_refused_as_it_would_be_ignored(distributed):
    """`run` ran once, with no rendezvous: its ranks waited for one and every attempt failed (a helper, following
    the docs, was billed for four)."""
    with pytest.raises(SpecError) as refused:
        parse_spec(f"run: python train.py\nresources: {{nodes: 1}}\ndistributed: {distributed}\n", source="job.yaml")
    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("distributed", 3)
    assert "multi-node jobs only" in problem.message and "torchrun --standalone" in problem.message


def test_a_distributed_block_of_its_defaults_or_for_several_nodes_is_taken_and_a_stored_one_read_back():
    parse_spec("run: x\ndistributed: {launcher: env}\n")  # says nothing new: every stored spec holds the defaults
    several = parse_spec("run: x\nresources: {nodes: 2}\ndistributed: {launcher: torchrun, procs_per_node: 4}\n")
    assert JobSpec.model_validate(parse_spec("run: x\n").to_json()) == parse_spec("run: x\n")
    stored_before = {**several.to_json(), "resources": {**several.to_json()["resources"], "nodes": 1}}
    assert JobSpec.stored(stored_before).distributed.procs_per_node == 4


@pytest.mark.parametrize("text, field, hint", [
    ("distributed: {nodes: 2}", "distributed.nodes", "did you mean 'resources.nodes'?"),
    ("nodes: 2", "nodes", "did you mean 'resources.nodes'?"),
    ("spot: {instance_type: p3.2xlarge}", "spot.instance_type", "did you mean 'resources.instance_type'?"),
    ("resources: {nodse: 2}", "resources.nodse", "did you mean 'nodes'?"),  # a typo where it stands comes first
])
def test_an_unknown_field_named_as_one_elsewhere_in_the_file_says_where_that_one_goes(text, field, hint):
    with pytest.raises(SpecError) as refused:
        parse_spec(f"run: x\n{text}\n")
    [problem] = refused.value.problems
    assert problem.field == field and problem.message.endswith(f"({hint})"), problem
