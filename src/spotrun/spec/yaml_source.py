"""The YAML text of a job file: its data, and its node tree for finding the line a field is on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from spotrun.spec.errors import Problem, SpecError

# Plain scalars YAML would turn into numbers, booleans or dates; as environment values the user means the text.
_TYPED_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "bool", "timestamp"))
_STR_TAG = "tag:yaml.org,2002:str"
_KEY_READINGS = {
    "tag:yaml.org,2002:null": "null", "tag:yaml.org,2002:bool": "true or false", "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number", "tag:yaml.org,2002:timestamp": "a date",
}
# pydantic marks an error about a mapping's key (not its value) with this last path element.
PYDANTIC_KEY_MARKER = "[key]"


@dataclass(frozen=True)
class YamlSource:
    data: Any
    root: Node | None  # None for an empty document

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of the key (or list item) at `path`; the nearest enclosing key's line when it is missing."""
        node, line = self.root, None
        for part in path:
            if part == PYDANTIC_KEY_MARKER:
                break
            if isinstance(node, MappingNode):
                pair = _last_pair_with_key(node, part)
                if pair is None:
                    break
                key_node, node = pair
                line = _line(key_node)
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = _line(node)
            else:
                break
        return line

    def duplicate_keys(self) -> list[Problem]:
        """YAML lets a later key silently replace an earlier one; in a job file that is always a mistake."""
        problems = []
        for path, mapping in _mappings(self.root, (), set()):
            first_lines: dict[str, int] = {}
            for key_node, _ in mapping.value:
                if not isinstance(key_node, ScalarNode):
                    continue
                if key_node.value in first_lines:
                    problems.append(
                        Problem(
                            field_path((*path, key_node.value)),
                            f"duplicate key {key_node.value!r} (first on line {first_lines[key_node.value]})",
                            _line(key_node),
                        )
                    )
                else:
                    first_lines[key_node.value] = _line(key_node)
        return problems

    def keys_not_text(self) -> list[Problem]:
        """Keys YAML reads as something other than text (`~`, `on`, `1`, `2024-01-01`, a mapping): named as written,
        where pydantic would quote Python's reading of them (`None`, `datetime.date(2024, 1, 1)`)."""
        problems = []
        for path, mapping in _mappings(self.root, (), set()):
            for key_node, _ in mapping.value:
                if isinstance(key_node, ScalarNode) and key_node.tag == _STR_TAG:
                    continue
                written = key_node.value if isinstance(key_node, ScalarNode) else "?"
                reads_as = _KEY_READINGS.get(key_node.tag, "a mapping or list" if written == "?" else "not text")
                message = f"field names must be text; `{written}` reads as {reads_as}"
                if written != "?":
                    message += f": quote it ('{written}') if it is meant as a name"
                problems.append(Problem(field_path((*path, written)), message, _line(key_node)))
        return problems

    def env_as_written(self) -> Any:
        """`data` with each `env` value that YAML read as a number, boolean or date replaced by its text.

        `VERSION: 1.10` means "1.10", not "1.1"; `MODE: 0755` means "0755", not "493".
        """
        data = self.data
        if not isinstance(data, dict) or not isinstance(data.get("env"), dict) or self.root is None:
            return data
        env_pair = _last_pair_with_key(self.root, "env") if isinstance(self.root, MappingNode) else None
        if env_pair is None or not isinstance(env_pair[1], MappingNode):
            return data
        env = dict(data["env"])
        for key_node, value_node in env_pair[1].value:
            if isinstance(value_node, ScalarNode) and value_node.tag in _TYPED_SCALAR_TAGS:
                for key in env:
                    if str(key) == key_node.value:
                        env[key] = value_node.value
        return {**data, "env": env}


def read_yaml(text: str, source: str) -> YamlSource:
    """Parse one YAML document; a syntax error is a SpecError with its line."""
    try:
        loader = yaml.SafeLoader(text)  # a NUL or other unreadable character fails here already
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem("", f"invalid YAML: {exc}")]) from None
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        raise SpecError(source, [_syntax_problem(exc)]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem("", f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise SpecError(source, [Problem("", "invalid YAML: nested too deeply")]) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python reads (4,300)
        raise SpecError(source, [Problem("", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return YamlSource(data, root)


def field_path(path: Sequence[str | int]) -> str:
    """("spot", "zones", 1) -> "spot.zones[1]"."""
    text = ""
    for part in path:
        if part == PYDANTIC_KEY_MARKER:
            continue
        if isinstance(part, int) and text:
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _syntax_problem(exc: yaml.MarkedYAMLError) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    if exc.context == "expected a single document in the stream":
        return Problem("", "a job file holds one YAML document; this one has a second (after a '---' line)", line)
    message = f"invalid YAML: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark is not None:
        message += f" ({exc.context} on line {exc.context_mark.line + 1})"
    return Problem("", message, line)


def _last_pair_with_key(mapping: MappingNode, key: str | int) -> tuple[Node, Node] | None:
    # The last one, because that is the value PyYAML keeps when a key is repeated.
    found = None
    for key_node, value_node in mapping.value:
        if isinstance(key_node, ScalarNode) and key_node.value == str(key):
            found = (key_node, value_node)
    return found


def _mappings(
    node: Node | None, path: tuple[str | int, ...], seen: set[int]
) -> Iterator[tuple[tuple[str | int, ...], MappingNode]]:
    if node is None or id(node) in seen:  # aliases can make the tree a graph
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        yield path, node
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else "?"
            yield from _mappings(value_node, (*path, key), seen)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from _mappings(item, (*path, index), seen)


def _line(node: Node) -> int:
    return node.start_mark.line + 1
