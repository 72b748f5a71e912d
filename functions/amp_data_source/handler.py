"""A CloudWatch custom data source that answers with PromQL range queries on the Amazon Managed
Service for Prometheus workspace, so that CloudWatch dashboards can show histogram quantiles
(``LAMBDA('<function>', '<PromQL>')`` in a metric-math expression).

The event and response shapes are CloudWatch's ("Create a custom connector to a data source",
CloudWatch user guide): times in epoch seconds, timestamps on StartTime + n x Period.
Only the standard library and the runtime's botocore: the asset is this one file.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

# Alarms give a data source 4.5 s; dashboards 10 s. Stay inside the tighter one.
QUERY_TIMEOUT_SECONDS = 4
DESCRIPTION = (
    "PromQL range queries on the serving deployment's Amazon Managed Service for Prometheus "
    "workspace. One argument: the query."
)


def handler(event: dict[str, Any], _context: object = None) -> dict[str, Any]:
    kind = event.get("EventType")
    if kind == "DescribeGetMetricData":
        return {"Description": DESCRIPTION, "ArgumentDefaults": [{"Value": "up"}]}
    if kind == "GetMetricData":
        return get_metric_data(event.get("GetMetricDataRequest") or {})
    return _error("Validation", f"unknown EventType {kind!r}")


def get_metric_data(request: dict[str, Any]) -> dict[str, Any]:
    arguments = request.get("Arguments") or []
    if len(arguments) != 1 or not isinstance(arguments[0], str) or not arguments[0].strip():
        return _error("Validation", "expected exactly one argument: a PromQL query")
    try:
        start, end, period = (int(request[key]) for key in ("StartTime", "EndTime", "Period"))
    except (KeyError, TypeError, ValueError):
        return _error("Validation", "StartTime, EndTime and Period must be integers (seconds)")
    form = {"query": arguments[0], "start": start, "end": end, "step": period}
    try:
        answer = query_range(form)
    except urllib.error.HTTPError as error:
        # Prometheus answers a query it cannot run with 400 or 422 and says why.
        code = {403: "Forbidden", 400: "Validation", 422: "Validation"}.get(
            error.code, "InternalError"
        )
        return _error(code, f"workspace answered {error.code}: {_body(error)}")
    except (urllib.error.URLError, TimeoutError) as error:
        return _error("InternalError", f"workspace unreachable: {error}")
    if answer.get("status") != "success":
        return _error("Validation", answer.get("error", "query failed"))
    series = answer.get("data", {}).get("result", [])
    return {"MetricDataResults": [_series(entry, start, end) for entry in series]}


def query_range(form: dict[str, Any]) -> dict[str, Any]:
    """POST /api/v1/query_range, signed with SigV4 for the ``aps`` service."""
    url = os.environ["WORKSPACE_URL"].rstrip("/") + "/api/v1/query_range"
    body = urllib.parse.urlencode(form)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    signed = AWSRequest(method="POST", url=url, data=body, headers=headers)
    credentials = botocore.session.get_session().get_credentials()
    SigV4Auth(credentials, "aps", os.environ["AWS_REGION"]).add_auth(signed)
    request = urllib.request.Request(
        url, data=body.encode(), headers=dict(signed.headers.items()), method="POST"
    )
    with urllib.request.urlopen(request, timeout=QUERY_TIMEOUT_SECONDS) as response:
        return json.load(response)


def _series(entry: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    labels = entry.get("metric", {})
    timestamps, values = [], []
    for timestamp, text in entry.get("values", []):
        value = float(text)
        # NaN (an empty histogram bucket) and infinities are not numbers CloudWatch can plot.
        if start <= timestamp <= end and math.isfinite(value):
            timestamps.append(int(timestamp))
            values.append(value)
    return {
        "StatusCode": "Complete",
        "Label": ",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        "Timestamps": timestamps,
        "Values": values,
    }


def _error(code: str, message: str) -> dict[str, Any]:
    return {"Error": {"Code": code, "Value": message[:1000]}}


def _body(error: urllib.error.HTTPError) -> str:
    try:
        return error.read().decode(errors="replace")[:500]
    except OSError:
        return ""
