"""Lambda function code deployed by the stacks; each subdirectory is one function's asset."""
