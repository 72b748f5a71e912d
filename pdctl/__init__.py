"""pdctl: the operator's companion to the CDK app; reads the same configuration."""
