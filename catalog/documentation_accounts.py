"""AWS account ids that AWS documentation uses as examples: placeholders, never a real target.

The examples in this repository (examples/*.yaml) carry them where a user must put their own
account (`arn:aws:iam::123456789012:role/Admin`); deployed as they are, EKS access entries name a
principal that does not exist and the deploy fails late, or an account that is someone else's.

The ids follow three patterns, which is the rule here (not a list of the ids seen so far):
- a run of consecutive digits: 123456789012 (the CDK, CloudFormation and IAM guides' usual
  example), 012345678901 (AWS Account Management reference, "View AWS account identifiers");
- three runs of four equal, consecutive digits: 111122223333 and 444455556666 (IAM user guide,
  "IAM JSON policy elements: Principal" and its cross-account examples), 777788889999;
- one digit twelve times: 111111111111, 000000000000.
AWS's pages on docs.aws.amazon.com, as named; the Account Management example was read on
2026-12-02. The patterns hold 28 of the 10^12 possible ids; a check that uses this rule names
the value it refused, so the owner of a real one among them would see why.
"""

from __future__ import annotations

import re

ACCOUNT_ID = re.compile(r"^\d{12}$")
# The account field of an ARN: arn:<partition>:<service>:<region>:<account>:<resource>
ARN_ACCOUNT = re.compile(r"^arn:aws[a-z-]*:[^:]*:[^:]*:(\d{12}):")
_DIGITS = "0123456789" * 3


def is_documentation_account(account_id: str) -> bool:
    """True for an id that follows one of the patterns above."""
    if not ACCOUNT_ID.match(account_id):
        return False
    if account_id in _DIGITS:  # a run of consecutive digits, wrapping 9 -> 0
        return True
    if len(set(account_id)) == 1:
        return True
    quads = [account_id[i : i + 4] for i in range(0, 12, 4)]
    if all(len(set(quad)) == 1 for quad in quads):
        firsts = [int(quad[0]) for quad in quads]
        return firsts[1] == firsts[0] + 1 and firsts[2] == firsts[1] + 1
    return False


def documentation_account_in(value: str) -> str | None:
    """The example account id a setting's value holds (an account id, or an ARN's account)."""
    if ACCOUNT_ID.match(value):
        return value if is_documentation_account(value) else None
    match = ARN_ACCOUNT.match(value)
    if match and is_documentation_account(match.group(1)):
        return match.group(1)
    return None
