"""Reads PromQL with a parser we did not write (promql-parser) and lists its series selectors."""

from __future__ import annotations

from dataclasses import dataclass

import promql_parser

CHILDREN = ("lhs", "rhs", "expr", "param", "args", "vector_selector")


@dataclass(frozen=True)
class Selector:
    name: str | None  # the metric name, or None when matched by a __name__ regex
    labels: dict[str, str]  # label -> value or regex, from every matcher


def selectors(query: str) -> list[Selector]:
    """Raises ValueError (from the parser) when the query is not valid PromQL."""
    found: list[Selector] = []
    _walk(promql_parser.parse(query), found)
    return found


def _walk(node: object, found: list[Selector]) -> None:
    if type(node).__name__ == "VectorSelector":
        matchers = {m.name: m.value for m in node.matchers.matchers}
        found.append(Selector(node.name or None, matchers))
        return
    for attribute in CHILDREN:
        child = getattr(node, attribute, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and type(item).__module__.startswith("promql"):
                _walk(item, found)
