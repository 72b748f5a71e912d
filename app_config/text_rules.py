"""Rules every piece of text in the configuration obeys, whatever setting it is.

The services that consume settings take plain text: EKS, EC2, IAM and Kubernetes names are ASCII;
CloudFormation and CDK read `${...}` inside a string as a substitution or a token, and IAM reads
`${aws:...}` as a policy variable; a map key `Ref` or `Fn::...` is an intrinsic function. None of
that may come from a user. Each rule returns the reason in words, or None; the Section base class
(app_config/section.py) applies them to every text value of every section, so a new field is
covered without a line of its own.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

# The longest text any setting takes. AWS's longest identifiers are ARNs (2048 characters, IAM
# API reference, "IAM identifiers"); every shorter limit is the field's own.
TEXT_MAX = 2048
# Sequences that something downstream would interpret instead of passing through: CloudFormation
# Fn::Sub and CDK string tokens (`${Token[...]}`, `${AWS::Region}`), CDK list tokens
# (`#{Token[...]}`), IAM policy variables (`${aws:username}`), Kubernetes variable references in
# a container's command, args and env (`$(VAR)`), template engines and Helm (`{{ }}`).
INTERPRETED = ("${", "#{", "$(", "{{", "}}")
# Map keys CloudFormation reads as an intrinsic function when a map holds only that key (template
# reference, "Intrinsic function reference"); tags and labels become such maps.
INTRINSIC_KEYS = frozenset({"Ref", "Condition"})
INTRINSIC_PREFIX = "Fn::"
# Unicode categories that are never text a service takes: controls (NUL, newline, tab, DEL, C1),
# format characters (zero-width, bidirectional overrides), surrogates (what bytes that are not
# UTF-8 decode to), private use and unassigned code points.
_INVISIBLE = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "bytes that are not UTF-8",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
}


def text_problem(text: str, *, unicode_letters: bool = False, max_length: int = TEXT_MAX) -> str:
    """Why a text value is refused, or "" when it passes.

    ``unicode_letters`` is for the few settings whose service takes Unicode letters (AWS tag
    keys and values); there the text must still be in its canonical (NFKC) form, which refuses
    full-width look-alikes and digits from other scripts' compatibility forms.
    """
    for index, character in enumerate(text):
        kind = _INVISIBLE.get(unicodedata.category(character))
        if kind:
            where = "at the end" if index == len(text) - 1 else f"at position {index}"
            return f"contains {kind} ({character!a}) {where}; remove it"
    if len(text) > max_length:
        return f"{len(text)} characters; at most {max_length}"
    if text != text.strip():
        return "has leading or trailing spaces; remove them"
    marker = next((marker for marker in INTERPRETED if marker in text), None)
    if marker:
        return (
            f"contains {marker!r}, which CloudFormation, the CDK, IAM or Kubernetes would "
            "interpret as a substitution or template instead of passing it on; settings take "
            "literal text"
        )
    if not unicode_letters and not text.isascii():
        character = next(c for c in text if not c.isascii())
        return (
            f"contains {character!a} ({_unicode_name(character)}), not ASCII; the service "
            "that takes this setting accepts ASCII only (a look-alike of a Latin letter or a "
            "digit from another script is a different character)"
        )
    if unicode_letters and unicodedata.normalize("NFKC", text) != text:
        return (
            f"is not in canonical Unicode form (NFKC gives {unicodedata.normalize('NFKC', text)!r}"
            "): full-width letters, ligatures and compatibility digits are look-alikes; type "
            "the plain characters"
        )
    mixed = _mixed_script_word(text) if unicode_letters else None
    if mixed:
        return (
            f"the word {mixed[0]!a} mixes {mixed[1]} letters, which look alike: a look-alike "
            "letter makes a different key or value; type it in one script"
        )
    if any(segment in (".", "..") for segment in text.split("/")):
        return "has a '.' or '..' path segment; name the path itself, without relative steps"
    return ""


def key_problem(key: str) -> str:
    """Why a map key is refused beyond the text rules: CloudFormation intrinsics."""
    if key in INTRINSIC_KEYS or key.startswith(INTRINSIC_PREFIX):
        return (
            f"{key!r} is a CloudFormation intrinsic function name; as a map key it would be "
            "evaluated instead of passed on: choose another key"
        )
    return ""


def texts(value: object, where: str = "") -> Iterator[tuple[str, str, bool]]:
    """Every text inside a raw value: (where it is, in words; the text; whether it is a map
    key). ``where`` is '' for the value itself."""
    if isinstance(value, str):
        yield where, value, False
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from texts(item, f"{where} item {index}".strip())
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield f"{where} key {key!a}".strip(), key, True
            yield from texts(item, f"{where} value of {key!a}".strip())


def _mixed_script_word(text: str) -> tuple[str, str] | None:
    """A word whose letters come from more than one script (a Latin 'a' beside a Cyrillic one),
    the mark of a look-alike (Unicode TS #39, mixed-script detection), with the scripts."""
    for word in re.findall(r"[^\W\d_]+", text):
        scripts = sorted({unicodedata.name(letter, "UNKNOWN").split()[0] for letter in word})
        if len(scripts) > 1:
            return word, " and ".join(script.title() for script in scripts)
    return None


def _unicode_name(character: str) -> str:
    return unicodedata.name(character, "unnamed").lower()
