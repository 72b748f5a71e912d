"""Every name the app derives from settings, against the rule of the service that takes it.

The names are built by the functions the constructs and renderers use (app_config/derived_names.py
lists them and the services' rules with sources); a name a service would refuse is an error
naming the setting it carries and the most characters that setting may have there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.derived_names import derived_names
from app_config.errors import Finding
from app_config.rules import Rule

if TYPE_CHECKING:
    from app_config.model import Settings


def name_problems(settings: Settings) -> Iterator[Finding]:
    for derived in derived_names(settings):
        problem = derived.rule.problem(derived.name)
        if not problem:
            continue
        settings_named = " + ".join(path for path, _ in derived.settings)
        room = (
            f"; {settings_named} may have at most {derived.room} characters here"
            if derived.room < sum(len(value) for _, value in derived.settings)
            else ""
        )
        yield Finding(
            derived.path,
            f"makes {derived.what} {derived.name!r}: {problem} ({derived.rule.source}){room}",
            derived.settings[0][1],
        )


RULES = (
    Rule(
        "derived-name",
        frozenset({"prefix", "cluster", "gpu_nodes", "serving", "observability"}),
        name_problems,
    ),
)
