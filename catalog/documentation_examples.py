"""Values AWS's documentation uses as examples, which an example configuration copies and a real
deployment never has.

Account ids: 123456789012 throughout the AWS documentation, and the IAM User Guide's
111122223333, 444455556666 and 777788889999 ("IAM identifiers", policy examples). Resource ids
in the documentation run the hexadecimal digits in order (cr-1234567890abcdef0,
sg-0123456789abcdef0) or backwards (cr-0fedcba9876543210): an id whose hexadecimal part is such a
run is an example, not a resource anybody created.
"""

from __future__ import annotations

EXAMPLE_ACCOUNT_IDS = frozenset({"123456789012", "111122223333", "444455556666", "777788889999"})
_ASCENDING = "0123456789abcdef" * 3
_DESCENDING = _ASCENDING[::-1]
# Shorter runs occur in real ids by chance; 12 digits in order do not (16**-11 per position).
_RUN = 12


def is_example_account(account: str) -> bool:
    return account in EXAMPLE_ACCOUNT_IDS


def is_example_resource_id(resource_id: str) -> bool:
    """cr-0123456789abcdef0 and the like: the hexadecimal part holds a run of 12 digits in
    ascending or descending order."""
    digits = resource_id.partition("-")[2].lower()
    return any(
        digits[start : start + _RUN] in run
        for run in (_ASCENDING, _DESCENDING)
        for start in range(max(0, len(digits) - _RUN + 1))
    )
