"""Building blocks every configuration section shares."""

from __future__ import annotations

from collections.abc import Collection, Hashable
from ipaddress import IPv4Network
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

ANYWHERE = IPv4Network("0.0.0.0/0")

# CloudWatch Logs accepts only these retention periods (AWS::Logs::LogGroup RetentionInDays).
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)


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


def one_of(valid: Collection[Hashable], what: str, hint: str = "") -> AfterValidator:
    """A validator for a value that must come from a table (catalog, region list, ...)."""

    def check(value: Hashable) -> Hashable:
        if value not in valid:
            listed = ", ".join(str(item) for item in sorted(valid))
            raise ValueError(f"not {what}; valid: {listed}{hint}")
        return value

    return AfterValidator(check)


def require_consent_for_anywhere(
    cidrs: list[IPv4Network], consent: bool, consent_field: str, exposes: str
) -> None:
    """0.0.0.0/0 only with an explicit flag: a typo must not open something to the internet."""
    if ANYWHERE in cidrs and not consent:
        raise ValueError(
            f"contains 0.0.0.0/0, which opens {exposes} to the internet; list specific CIDRs, "
            f"or set {consent_field}: true"
        )


LogRetentionDays = Annotated[int, one_of(LOG_RETENTION_DAYS, "a retention CloudWatch Logs accepts")]
