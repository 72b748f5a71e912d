"""Building blocks every configuration section shares."""

from __future__ import annotations

from collections.abc import Collection, Hashable
from ipaddress import IPv4Network, collapse_addresses
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

ANYWHERE = IPv4Network("0.0.0.0/0")
# More than this many addresses is "the internet" for consent: a /8 is more than any single
# organisation's egress ranges, so a list covering more needs the same explicit flag as 0.0.0.0/0.
BROADEST_WITHOUT_CONSENT = 2**24
# Ranges that never reach a public endpoint from the internet (RFC 1918 private, RFC 6598 shared,
# loopback, link-local, multicast, "this network", reserved): as a public endpoint's allowed
# sources they admit nobody, or are a mistake.
NOT_ON_THE_INTERNET = tuple(
    IPv4Network(cidr)
    for cidr in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)

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


def matching(pattern: str, rule: str) -> dict[str, Any]:
    """Field arguments for a text setting with a pattern: the pattern, and the rule it encodes
    in words, which errors show instead of the regular expression (app_config/errors.py)."""
    return {"pattern": pattern, "json_schema_extra": {"rule": rule}}


def int_from_text(value: object) -> object:
    """`-c key=64` arrives as text; pydantic does not coerce text to a Literal of numbers."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


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
    """The internet only with an explicit flag, judged by the addresses the list covers (so
    0.0.0.0/1 + 128.0.0.0/1 counts as 0.0.0.0/0): a typo must not open something to it."""
    covered = sum(network.num_addresses for network in collapse_addresses(cidrs))
    if covered > BROADEST_WITHOUT_CONSENT and not consent:
        whole = "all of IPv4" if covered == ANYWHERE.num_addresses else f"{covered:,} addresses"
        raise ValueError(
            f"covers {whole}, which opens {exposes} to the internet; list your own CIDRs "
            f"(at most a /8 in all without consent), or set {consent_field}: true"
        )


def require_internet_sources(cidrs: list[IPv4Network], what: str, limit: int) -> None:
    """Sources of a public endpoint: addresses clients on the internet can have, and no more
    entries than the service takes."""
    for cidr in cidrs:
        clash = next((r for r in NOT_ON_THE_INTERNET if cidr.overlaps(r)), None)
        if clash is not None:
            raise ValueError(
                f"{cidr} overlaps {clash}, which is not an internet address range; {what} sees "
                "clients' public addresses, so list those (a private range admits nobody)"
            )
    if len(cidrs) > limit:
        raise ValueError(f"{len(cidrs)} CIDRs; {what} takes at most {limit}")


LogRetentionDays = Annotated[int, one_of(LOG_RETENTION_DAYS, "a retention CloudWatch Logs accepts")]
