"""A job spec from what a user sends: safe YAML (no tags, bounded size and aliases) to a validated JobSpec."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from common.errors import InvalidSpec, field_errors
from common.spec.job import MAX_SPEC_BYTES, JobSpec

# libyaml's scanner and composer (PyYAML's C loader: a job spec in 0.16 ms, against the pure-Python loader's 2.4 ms,
# every submission's largest cost); tags and objects refused by SafeConstructor's rules either way.
_LOADER = yaml.CSafeLoader


def parse_spec(data: Any) -> JobSpec:
    """Validate a decoded document as a JobSpec, raising InvalidSpec that names the field."""
    if not isinstance(data, dict):
        raise InvalidSpec("job spec must be a mapping of fields", field="(root)")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        first = errors[0]
        raise InvalidSpec(f"{first['field']}: {first['message']}", field=first["field"], details=errors) from None


def load_yaml(text: str | bytes) -> Any:
    """Parse YAML safely (no tags, no objects), refusing oversized documents and alias bombs."""
    if len(text) > MAX_SPEC_BYTES:
        raise InvalidSpec(f"spec is larger than {MAX_SPEC_BYTES} bytes", field="(body)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSpec("spec is not UTF-8 text", field="(body)") from None
    try:
        _check_depth(text)
        loader = _LOADER(text)
        try:
            node = loader.get_single_node()
            if node is not None and _count_nodes(node, budget=10_000) < 0:
                raise InvalidSpec("spec has too many nodes (aliases expand too far)", field="(body)")
            if node is not None:
                _refuse_duplicate_keys(node)
            return loader.construct_document(node) if node is not None else None
        except (ValueError, OverflowError) as exc:  # a scalar YAML resolves but cannot build (a date of month 13)
            raise InvalidSpec(f"malformed YAML: {exc}", field="(body)") from None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidSpec(f"malformed YAML{where}: {problem}", field="(body)") from None


# No job spec nests deeper than a dozen levels; the YAML composer recurses per level and would overflow Python's stack
# near 300, so nesting is counted first, on the scanner's tokens (which it produces without recursion).
MAX_DEPTH = 64
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _check_depth(text: str) -> None:
    depth = 0
    for token in yaml.scan(text, Loader=_LOADER):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                line = token.start_mark.line + 1 if token.start_mark is not None else 0
                raise InvalidSpec(f"spec nests deeper than {MAX_DEPTH} levels (line {line})", field="(body)")
        elif isinstance(token, _CLOSE):
            depth -= 1


def _count_nodes(node: yaml.Node, budget: int) -> int:
    """Walk the node graph counting visits (aliases re-visit); return the budget left, negative if exceeded."""
    stack = [node]
    while stack:
        current = stack.pop()
        budget -= 1
        if budget < 0:
            return budget
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.append(key)
                stack.append(value)
    return budget


def _refuse_duplicate_keys(node: yaml.Node) -> None:
    """A key given twice in one mapping is refused, naming it and where (YAML's loaders keep the last one silently, so
    `duration: 60s` then `duration: 1s` ran for one second). Called after _count_nodes, so the walk is bounded."""
    stack: list[tuple[yaml.Node, str]] = [(node, "")]
    while stack:
        current, path = stack.pop()
        if isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(current.value))
        elif isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in current.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                field = f"{path}.{name}" if path else name
                if isinstance(key, yaml.ScalarNode) and name != "<<":
                    if name in seen:
                        line = key.start_mark.line + 1
                        raise InvalidSpec(f"{field}: given twice (again at line {line}); give it once", field=field)
                    seen.add(name)
                stack.append((value, field))


def parse_spec_yaml(text: str | bytes) -> JobSpec:
    """YAML text to a validated JobSpec."""
    return parse_spec(load_yaml(text))
