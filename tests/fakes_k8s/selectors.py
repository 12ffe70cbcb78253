"""The matching rules the fake API server and scheduler share: label and field selectors, node affinity, taints
and tolerations, and resource quantities. They follow the Kubernetes semantics a provider relies on; anything the
fake does not understand is refused (ValueError), so a test never passes on a selector that was silently ignored."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kubernetes.utils import parse_quantity

Obj = dict[str, Any]
_SET = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*(?:(==|=|!=)\s*([\w./-]*))?\s*$")


def lookup(obj: Any, path: str) -> Any:
    """The value at a dotted path such as `involvedObject.name`, or None."""
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _terms(selector: str) -> list[str]:
    """Split at commas that are not inside `in (a, b)`."""
    return [term for term in re.split(r",(?![^(]*\))", selector) if term.strip()]


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-separated (all must hold)."""
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _terms(selector or ""):
        if found := _SET.match(term):
            key, op, values = found[1], found[2], {v.strip() for v in found[3].split(",")}
            checks.append(lambda labels, k=key, vs=values, op=op: (labels.get(k) in vs) == (op == "in")
                          if k in labels or op == "in" else True)
        elif found := _EQUALITY.match(term):
            negated, key, op, value = found.groups()
            if op is None:
                checks.append(lambda labels, k=key, n=bool(negated): (k in labels) != n)
            elif negated:
                raise ValueError(f"invalid label selector term {term!r}")
            else:
                checks.append(lambda labels, k=key, v=value, eq=op != "!=": (labels.get(k) == v) == eq)
        else:
            raise ValueError(f"unable to parse requirement {term!r}")
    return lambda labels: all(check(labels or {}) for check in checks)


def field_matcher(selector: str | None) -> Callable[[Obj], bool]:
    """`path=value`, `path==value` and `path!=value`, comma-separated, over the object's JSON."""
    checks: list[Callable[[Obj], bool]] = []
    for term in _terms(selector or ""):
        found = re.fullmatch(r"\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
        if not found:
            raise ValueError(f"invalid field selector term {term!r}")
        path, op, value = found.groups()
        checks.append(lambda obj, p=path, v=value, eq=op != "!=": (str(lookup(obj, p) or "") == v) == eq)
    return lambda obj: all(check(obj) for check in checks)


def _expression_holds(labels: dict[str, str], expression: Obj) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"the fake does not support the node selector operator {op!r}")


def node_selected(pod: Obj, node: Obj) -> bool:
    """spec.nodeSelector (every label equal) and required node affinity (terms ORed, expressions ANDed)."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
        return False
    required = lookup(pod["spec"], "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(all(_expression_holds(labels, e) for e in term.get("matchExpressions") or [])
               for term in required.get("nodeSelectorTerms") or [])


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Obj, node: Obj) -> Obj | None:
    """The first NoSchedule/NoExecute taint of the node that none of the pod's tolerations tolerates."""
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def quantity(text: str | int | float) -> float:
    """A resource quantity ("500m", "2", "512Mi", "1G", "1.5", "1e3") as a number (cores, bytes, devices)."""
    try:
        return float(parse_quantity(text))
    except ValueError:
        raise ValueError(f"quantities must match the regular expression, not {text!r}") from None


def pod_requests(pod: Obj) -> dict[str, float]:
    """What the pod's containers need: limits, falling back to requests, per resource, summed over containers."""
    total: dict[str, float] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for name, amount in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            total[name] = total.get(name, 0.0) + quantity(amount)
    return total
