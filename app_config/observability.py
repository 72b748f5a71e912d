"""Observability settings: who gets alarms, the objectives they guard, and what is kept."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, EmailStr, Field

from app_config.section import LogRetentionDays, Section, listed_once

# A bare address, local@domain: what SNS's email protocol takes as a subscription endpoint.
# EmailStr alone also accepts `Name <local@domain>` and keeps only the address, so a display
# name would vanish silently.
_BARE_ADDRESS = re.compile(r"[^\s<>\"(),;:@]+@[^\s<>\"(),;:@]+")
# RFC 5321: a forward path holds at most 254 characters.
EMAIL_MAX = 254


def _bare_address(value: object) -> object:
    if isinstance(value, str) and not _BARE_ADDRESS.fullmatch(value):
        raise ValueError(
            "not a bare e-mail address; write only the address, name@example.com, without a "
            "display name, angle brackets or spaces"
        )
    if isinstance(value, str) and len(value) > EMAIL_MAX:
        raise ValueError(f"{len(value)} characters; an e-mail address has at most {EMAIL_MAX}")
    return value


EmailAddress = Annotated[EmailStr, BeforeValidator(_bare_address)]


class Alarms(Section):
    """Thresholds of the alarms; every alarm notifies the encrypted SNS topic."""

    emails: Annotated[list[EmailAddress], listed_once("address", key=str.lower)] = Field(
        [],
        description="Addresses subscribed to the alarm topic (each must confirm the "
        "subscription e-mail AWS sends).",
    )
    ttft_p95_objective_seconds: float = Field(
        2.0,
        gt=0,
        le=600,
        description="Time-to-first-token objective: alarm when the p95 over 5 minutes exceeds it.",
    )
    itl_p95_objective_seconds: float = Field(
        0.2,
        gt=0,
        le=60,
        description="Inter-token latency objective: alarm when the decode p95 over 5 minutes "
        "exceeds it.",
    )
    node_shortfall_minutes: int = Field(
        20,
        ge=5,
        le=1440,
        description="Alarm when a GPU node group has had fewer nodes in service than desired for "
        "this many minutes (a p5 node takes about 10 to join and load the image).",
    )
    decode_queue_growth_minutes: int = Field(
        10,
        ge=2,
        le=120,
        description="Alarm when decode's waiting requests grow for this many minutes in a row.",
    )
    capacity_shortfall_minutes: int = Field(
        30,
        ge=10,
        le=1440,
        description="Alarm when a side has wanted more Serve replicas than it has healthy for "
        "this many minutes: capacity that did not come (node group at max_size, no "
        "instances, a reservation used up). Adding a replica on a new node takes about 20 "
        "(node join, image pull, model load; docs/operating.md, 'How each side scales').",
    )
    efa_error_events_threshold: int = Field(
        0,
        ge=0,
        description="Alarm when EFA reports more unresponsive or impaired remote connections "
        "than this in 5 minutes, cluster-wide.",
    )


class Observability(Section):
    """Container Insights, Prometheus metrics of Ray and vLLM, the dashboard and the alarms."""

    alarms: Alarms = Field(Alarms(), description="Alarm thresholds and recipients.")
    container_logs: bool = Field(
        True,
        description="Ship container stdout/stderr to CloudWatch Logs (Fluent Bit in the "
        "Container Insights add-on). Off saves ingestion cost; vLLM and NIXL errors appear there.",
    )
    log_retention_days: LogRetentionDays = Field(
        30, description="Retention of the Container Insights log groups, in days."
    )
    scrape_interval_seconds: int = Field(
        30,
        ge=30,
        le=300,
        description="How often the managed Prometheus scraper reads the Ray pods' metrics "
        "(30 s is its minimum).",
    )
    metrics_retention_days: int = Field(
        150,
        ge=1,
        le=1095,
        description="How long Amazon Managed Service for Prometheus keeps samples.",
    )
