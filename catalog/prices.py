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
Other regions list other prices (often 5-30 % higher); instance types absent here have no
catalog price, and `pdctl cost` says so rather than guess. Prices change: the Price List API
(`pdctl cost` with credentials) is the reference.
"""

from __future__ import annotations

LIST_PRICE_REGION = "us-east-1"
INSTANCE_HOURLY_USD: dict[str, float] = {
    "p5.48xlarge": 55.04,  # [ec2]
    "p4d.24xlarge": 21.96,  # [ec2]
    "m7i.xlarge": 0.2016,  # [ec2]
}
EKS_CLUSTER_HOURLY_USD = 0.10  # [eks]
NAT_GATEWAY_HOURLY_USD = 0.045  # [vpc]
INTERFACE_ENDPOINT_HOURLY_USD = 0.01  # [privatelink]
