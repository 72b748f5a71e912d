"""YAML 1.1's implicit types, refused where they differ from YAML 1.2.

PyYAML resolves plain (unquoted) scalars by YAML 1.1: `no`, `off`, `y` are booleans, `010` is
the octal number 8, `1:30` the sexagesimal number 90, `1_000` a thousand, `0b101` five,
`2026-12-01` a date, `.nan` not a number. YAML 1.2 (2009), and with it most tools a reader
checks a file with, reads `no`, `1:30` and `2026-12-01` as text and `010` as ten. A value the
two read differently is refused here with what YAML 1.1 made of it and the way to write what was
meant, whatever the setting: the same file must not mean two things.

Sources: YAML 1.1 type repository (yaml.org/type/bool.html, int.html, float.html,
timestamp.html) as PyYAML 6.0 implements it (`yaml/resolver.py`, `Resolver.add_implicit_resolver`);
YAML 1.2.2 section 10.3, the core schema.
"""

from __future__ import annotations

import re

from yaml.nodes import ScalarNode

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

# What YAML 1.2's core schema reads the same way (10.3.2): true/false, decimal, 0o and 0x
# integers, decimal floats; PyYAML 1.1 does not resolve 0o at all, so it stays text there.
_CORE_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_CORE_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)|0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def implicit_typing_problem(node: ScalarNode) -> str | None:
    """What is wrong with a plain scalar YAML 1.1 types differently from YAML 1.2, or None."""
    if node.style is not None:  # quoted, literal or folded: text in both
        return None
    text = node.value
    if node.tag == _BOOL and not _CORE_BOOL.fullmatch(text):
        meaning = "true" if text.lower() in ("yes", "y", "on") else "false"
        return (
            f"{text!r} is read by YAML 1.1 as the boolean {meaning} and by YAML 1.2 as text: "
            f"write {meaning} for a switch, or quote it ('{text}') for text"
        )
    if node.tag == _INT and not _CORE_INT.fullmatch(text) and not _same_in_both(text):
        return (
            f"{text!r} is a YAML 1.1 number ({_kind_of_int(text)}) that YAML 1.2 reads "
            "otherwise: write the number in plain decimal, or quote it for text"
        )
    if node.tag == _FLOAT and not _CORE_FLOAT.fullmatch(text):
        return (
            f"{text!r} is not a plain decimal number (YAML reads it as "
            f"{'not-a-number or infinity' if 'n' in text.lower() else 'a YAML 1.1 float'}); "
            "no setting takes it: write a decimal number, or quote it for text"
        )
    if node.tag == _TIMESTAMP:
        return (
            f"{text!r} is read by YAML 1.1 as a date and by YAML 1.2 as text; no setting is a "
            f"date: quote it ('{text}')"
        )
    return None


def _same_in_both(text: str) -> bool:
    """A leading-zero integer whose octal and decimal readings agree (`07`, `00`)."""
    digits = text.lstrip("+-")
    return digits.isdigit() and set(digits) <= set("01234567") and int(digits, 8) == int(digits)


def _kind_of_int(text: str) -> str:
    digits = text.lstrip("+-")
    if ":" in digits:
        return "sexagesimal, base 60"
    if digits.startswith("0b"):
        return "binary"
    if "_" in digits:
        return "with '_' separators"
    if digits.startswith("0"):
        return f"octal, {int(digits.replace('_', ''), 8) if digits.isdigit() else '?'}"
    return "YAML 1.1 only"
