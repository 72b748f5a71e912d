"""On-demand list prices, for `pdctl cost` before an account exists: the AWS Price List API
needs credentials, a first estimate should not.

USD per hour, Linux, shared tenancy, in LIST_PRICE_REGION. Sources:
- [ec2] Amazon EC2 On-Demand pricing, https://aws.amazon.com/ec2/pricing/on-demand/ ; P4d and P5
  after the reduction of 2025-06-05 (AWS What's New, "Announcing up to 45% price reduction for
  Amazon EC2 NVIDIA GPU-accelerated instances").
- [eks] Amazon EKS pricing, https://aws.amazon.com/eks/pricing/ (a cluster in standard support).
- [vpc] Amazon VPC pricing, https://aws.amazon.com/vpc/pricing/ (NAT gateway hour).
- [privatelink] AWS PrivateLink pricing, https://aws.amazon.com/privatelink/pricing/ (an
  interface endpoint, per Availability Zone hour).
The G6, G6e, P5en and P4de prices are the [ec2] page's us-east-1 figures as a published copy
of its table gives them, reviewed there on 2026-09-10 (the page renders its tables from the Price
List at run time, and this project's search index holds no rendering of it); in that copy the
P5, P4d and m7i.xlarge (half of m7i.2xlarge) figures equal the ones this catalog carried before.
Recorded 2026-12-02; `pdctl cost --prices api` reads today's.
Every GPU type the examples (examples/*.yaml) use has a price here
(tests/pdctl/test_pdctl_cost.py checks it), and every G6 and G6e size of catalog/instances.py.
Other regions list other prices (often 5-30 % higher); instance types absent here have no
catalog price, and `pdctl cost` says so rather than guess. Prices change: the Price List API
(`pdctl cost` with credentials) is the reference.
"""

from __future__ import annotations

LIST_PRICE_REGION = "us-east-1"
INSTANCE_HOURLY_USD: dict[str, float] = {
    "p5.48xlarge": 55.04,  # [ec2]
    "p5en.48xlarge": 63.296,  # [ec2]
    "p4d.24xlarge": 21.96,  # [ec2]
    "p4de.24xlarge": 27.44705,  # [ec2]
    # G6 (L4) and G6e (L40S), the trial shapes: the sizes with EFA [ec2]
    "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016,
    "g6.16xlarge": 3.3968,
    "g6.24xlarge": 6.6752,
    "g6.48xlarge": 13.3504,
    "g6e.8xlarge": 4.52856,
    "g6e.12xlarge": 10.49264,
    "g6e.16xlarge": 7.57719,
    "g6e.24xlarge": 15.06559,
    "g6e.48xlarge": 30.13118,
    "m7i.xlarge": 0.2016,  # [ec2]
}
EKS_CLUSTER_HOURLY_USD = 0.10  # [eks]
NAT_GATEWAY_HOURLY_USD = 0.045  # [vpc]
INTERFACE_ENDPOINT_HOURLY_USD = 0.01  # [privatelink]
