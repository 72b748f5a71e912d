"""`make gpu-bench`: how fast the deployed serving path is, on real engines on one GPU.

Beside `make gpu-check` (which proves the deployed configuration is correct on real engines),
this tier measures it: vLLM's own load generator (`vllm bench serve`) at a concurrency sweep
against the two engines without Serve (direct), one engine alone (aggregated) and the Serve
application as synthesized (deployed), each figure recorded in a dated JSON file under
docs/gpu-bench/ and rendered into docs/verification.md by `python -m tools.gpu_bench report`.
"""
