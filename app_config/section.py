"""Building blocks every configuration section shares."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterator
from ipaddress import IPv4Network, collapse_addresses
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from annotated_types import MaxLen
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo

from app_config.text_rules import TEXT_MAX, key_problem, text_problem, texts

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
    """Parse strictly, and say which network was probably meant when host bits are set. Only
    text: pydantic would read a number (or true) as an address."""
    if isinstance(value, IPv4Network):
        return value
    if not isinstance(value, str):
        raise ValueError("not an IPv4 CIDR; expected text a.b.c.d/n such as 10.0.0.0/16")
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
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() else value


# The largest integer CloudFormation, JSON and the jsii bridge (JavaScript numbers) carry exactly.
EXACT_INTEGER_MAX = 2**53 - 1


def unicode_text() -> dict[str, Any]:
    """Field arguments for the few settings whose service takes Unicode letters (AWS tags);
    every other text setting is ASCII (app_config/text_rules.py)."""
    return {"json_schema_extra": {"unicode": True}}


class Section(BaseModel):
    """Every section rejects unknown keys (a typo must fail, not silently fall back to a
    default), refuses NaN and infinity, and checks every text value it is given by the rules in
    app_config/text_rules.py, so that each new field is covered by them without a line of its
    own. Where a field takes a list, a single value is taken as a one-item list."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_text(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name]
        if _holds_section(field.annotation):
            return _one_item_list(field.annotation, value)
        value = _one_item_list(field.annotation, value)
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        limit = _max_length(field)
        for where, text, is_key in texts(value):
            problem = text_problem(
                text, unicode_letters=bool(extra.get("unicode")), max_length=limit
            ) or (key_problem(text) if is_key else "")
            if problem:
                raise ValueError(f"{where}: {problem}" if where else problem)
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _no_switch_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads true as 1 and false as 0 where a number is expected, so a YAML or JSON
        `max_size: true` (a key meant for a switch, a value from the line above) would deploy
        one node, silently. A count, a size or a duration is never a switch."""
        if isinstance(value, bool) and _takes_a_number(cls.model_fields[info.field_name]):
            raise ValueError(
                f"{str(value).lower()} is a switch (a YAML or JSON boolean), not a number; "
                "write the number itself"
            )
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _exact_numbers(cls, value: Any) -> Any:
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and abs(value) > EXACT_INTEGER_MAX
        ):
            raise ValueError(
                f"{value} is beyond {EXACT_INTEGER_MAX:,}, the largest integer CloudFormation "
                "and the CDK carry exactly"
            )
        return value


def _takes_a_number(field: FieldInfo) -> bool:
    """Whether the setting is a number (int or float, optional or not) and never a switch."""
    kinds = set(_scalar_kinds(field.annotation))
    return bool(kinds & {int, float}) and bool not in kinds


def _scalar_kinds(annotation: Any) -> Iterator[Any]:
    """The types a scalar setting takes: Annotated and unions unwrapped, lists and maps not."""
    origin = get_origin(annotation)
    if origin is Annotated:
        yield from _scalar_kinds(get_args(annotation)[0])
    elif origin in (Union, UnionType):
        for arg in get_args(annotation):
            yield from _scalar_kinds(arg)
    elif origin is None:
        yield annotation


def _holds_section(annotation: Any) -> bool:
    """Whether a field's type is, or contains, a section (their own fields check their text)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_section(arg) for arg in get_args(annotation))


def _one_item_list(annotation: Any, value: Any) -> Any:
    """A scalar where a list is expected becomes a one-item list: `-c
    cluster.admin_principal_arns=arn:...` means a list of that one ARN."""
    if value is None or isinstance(value, list | tuple):
        return value
    return [value] if _is_list(annotation) else value


def _is_list(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is list:
        return True
    if origin in (Union, UnionType):
        return any(_is_list(arg) for arg in get_args(annotation) if arg is not NoneType)
    if origin is Annotated:
        return _is_list(get_args(annotation)[0])
    return False


def _max_length(field: FieldInfo) -> int:
    """The field's own length limit, where it has one, else the limit for any text."""
    if _is_list(field.annotation) or get_origin(field.annotation) is dict:
        return TEXT_MAX  # a length in metadata is then the number of items
    limits = [item.max_length for item in field.metadata if isinstance(item, MaxLen)]
    return min(limits, default=TEXT_MAX)


def require_listed_once(
    values: list[Any], what: str, key: Callable[[Any], Hashable] = lambda item: item, why: str = ""
) -> None:
    """A list whose entries each stand for one thing (a CIDR, a security group, an address, a
    principal): an entry given twice is a copy-paste or one meant to be another, which the
    consuming service either refuses or counts once, and it uses up the list's limit; so it is
    named (``why``: the service's own rule, where it has one)."""
    seen: set[Hashable] = set()
    for value in values:
        if key(value) in seen:
            raise ValueError(f"lists {value} twice; each {what} may appear once{why}")
        seen.add(key(value))


def listed_once(what: str, key: Callable[[Any], Hashable] = lambda item: item) -> AfterValidator:
    """require_listed_once as a list setting's type."""

    def check(values: list[Any]) -> list[Any]:
        require_listed_once(values, what, key)
        return values

    return AfterValidator(check)


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
