"""Values AWS's documentation uses as examples, which an example configuration copies and a real
deployment never has.

Account ids follow three patterns, which is the rule here (not a list of the ids seen so far):
- a run of consecutive digits: 123456789012 (throughout the AWS documentation: CDK,
  CloudFormation, IAM), 012345678901 (AWS Account Management reference, "View AWS account
  identifiers", read 2026-12-02);
- three runs of four equal, consecutive digits: the IAM User Guide's 111122223333,
  444455556666 and 777788889999 ("IAM identifiers", policy examples);
- one digit twelve times: 111111111111, 000000000000.
The patterns hold 28 of the 10^12 possible ids; the checks that use them name the value they
refused, so the owner of a real one among them would see why. Resource ids in the documentation
run the hexadecimal digits in order (cr-1234567890abcdef0, sg-0123456789abcdef0) or backwards
(cr-0fedcba9876543210): an id whose hexadecimal part is such a run is an example, not a resource
anybody created.
"""

from __future__ import annotations

import re

ACCOUNT_ID = re.compile(r"^\d{12}$")
_DIGIT_RUN = "0123456789" * 3
_ASCENDING = "0123456789abcdef" * 3
_DESCENDING = _ASCENDING[::-1]
# Shorter runs occur in real ids by chance; 12 digits in order do not (16**-11 per position).
_RUN = 12


def is_example_account(account: str) -> bool:
    """An account id that follows one of the patterns above."""
    if not ACCOUNT_ID.match(account):
        return False
    if account in _DIGIT_RUN or len(set(account)) == 1:  # a run (9 wraps to 0); one digit
        return True
    quads = [account[i : i + 4] for i in range(0, 12, 4)]
    if not all(len(set(quad)) == 1 for quad in quads):
        return False
    firsts = [int(quad[0]) for quad in quads]
    return firsts[1] == firsts[0] + 1 and firsts[2] == firsts[1] + 1


def is_example_resource_id(resource_id: str) -> bool:
    """cr-0123456789abcdef0 and the like: the hexadecimal part holds a run of 12 digits in
    ascending or descending order."""
    digits = resource_id.partition("-")[2].lower()
    return any(
        digits[start : start + _RUN] in run
        for run in (_ASCENDING, _DESCENDING)
        for start in range(max(0, len(digits) - _RUN + 1))
    )
