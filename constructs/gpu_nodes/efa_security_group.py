"""The security group EFA needs: all traffic to and from its own members, nothing else.

Built from L1 resources on purpose. The L2 SecurityGroup cannot express this group: with
allow_all_outbound=True it drops a self-referencing egress rule, and with False it removes its
"match no traffic" egress placeholder as soon as a self rule is added, which leaves the group
with no inline egress and so with EC2's default allow-all egress to 0.0.0.0/0.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from constructs import Construct
from nag.serving_checks import EFA_SECURITY_GROUP_METADATA, MATCH_NO_TRAFFIC


class EfaSecurityGroup(Construct):
    """Publishes ``security_group_id``; checked by the Serving-EFASecurityGroupSelfOnly rule."""

    def __init__(
        self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, description: str
    ) -> None:
        super().__init__(scope, construct_id)
        group = ec2.CfnSecurityGroup(
            self,
            "Resource",
            vpc_id=vpc.vpc_id,
            group_description=description,
            # An explicit egress rule that matches nothing replaces EC2's default allow-all.
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    cidr_ip=MATCH_NO_TRAFFIC["cidrIp"],
                    ip_protocol=MATCH_NO_TRAFFIC["ipProtocol"],
                    from_port=MATCH_NO_TRAFFIC["fromPort"],
                    to_port=MATCH_NO_TRAFFIC["toPort"],
                    description="Disallow all traffic",
                )
            ],
        )
        group.add_metadata(EFA_SECURITY_GROUP_METADATA, True)
        self.security_group_id = group.attr_group_id
        # Self references must be separate resources: a resource cannot reference itself.
        ec2.CfnSecurityGroupIngress(
            self,
            "FromItself",
            group_id=self.security_group_id,
            source_security_group_id=self.security_group_id,
            ip_protocol="-1",
            description="EFA traffic from members of this group",
        )
        ec2.CfnSecurityGroupEgress(
            self,
            "ToItself",
            group_id=self.security_group_id,
            destination_security_group_id=self.security_group_id,
            ip_protocol="-1",
            description="EFA traffic to members of this group",
        )
