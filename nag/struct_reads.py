"""Reading one member of a struct an L1 property holds, without copying the whole struct.

jsii passes a struct from JavaScript to Python by reference, and its Python runtime then copies
it eagerly: one kernel round trip for every property of the struct and of every struct nested in
it, set or not (jsii 1.142, ``_reference_map.resolve``: "This will be slow"). A GPU node's
launch template data holds one network interface per EFA card, 25 properties each, so reading
``launch_template_data`` whole for the IMDSv2 rule took 1,692 of the 3,206 round trips of the
default's synth (2026-12-07), for one member of it.

The first read below takes jsii's reference without copying (the kernel provider's ``get``, the
call ``jsii.get`` makes before it copies); the member is then read through ``jsii.get`` on that
reference, which copies only the member. Both rest on jsii's private kernel types, so jsii is
pinned in requirements.txt, and ``tests/serving/test_serving_rules.py`` bounds the round trips
of a 32-interface launch template and covers a struct, a token and an absent value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsii
from jsii._kernel.types import GetRequest, GetResponse, ObjRef


@dataclass(frozen=True)
class _Reference:
    """A JavaScript object known to jsii only by reference: ``jsii.get`` reads ``__jsii_ref__``."""

    __jsii_ref__: ObjRef


@dataclass(frozen=True)
class StructValue:
    """A struct an L1 property holds, left in JavaScript until a member is asked for."""

    _reference: _Reference

    def member(self, jsii_name: str) -> Any:
        """The member's value (a copied struct, a token or a primitive), by its jsii name."""
        return jsii.get(self._reference, jsii_name)


def struct_property(obj: Any, jsii_name: str, struct: type) -> StructValue | Any:
    """The value of ``obj``'s property ``jsii_name``: a ``StructValue`` when it holds a
    ``struct``, else the value as ``jsii.get`` gives it (a token, a primitive, None)."""
    response = jsii.kernel.provider.get(GetRequest(objref=obj.__jsii_ref__, property=jsii_name))
    if not isinstance(response, GetResponse):  # a getter that calls back into Python
        raise TypeError(f"{jsii_name} of {obj} is not a plain L1 property: read it with jsii.get")
    raw = response.value
    if isinstance(raw, ObjRef) and struct.__jsii_type__ in (raw.interfaces or ()):
        return StructValue(_Reference(raw))
    return jsii.get(obj, jsii_name)
