"""Building blocks every configuration section shares."""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _cidr(value: object) -> object:
    """Parse strictly, and say which network was probably meant when host bits are set."""
    if not isinstance(value, str):
        return value
    try:
        return IPv4Network(value)
    except ValueError:
        try:
            meant = IPv4Network(value, strict=False)
        except ValueError:
            raise ValueError("not an IPv4 CIDR; expected a.b.c.d/n such as 10.0.0.0/16") from None
        raise ValueError(f"host bits are set; did you mean {meant}?") from None


CidrBlock = Annotated[IPv4Network, BeforeValidator(_cidr)]


class Section(BaseModel):
    """Every section rejects unknown keys: a typo must fail, not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
