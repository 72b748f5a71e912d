"""The app's own Python inside Ray Serve: small, versioned, delivered with the manifests.

The Ray pods run AWS's Ray LLM image unmodified. This package reaches them as a ConfigMap
rendered with the RayService (serving_manifests/serve_extensions.py): every file of this folder
ending in .py, mounted read-only on every Ray pod (head and workers) at a folder on the Ray
container's PYTHONPATH. The ConfigMap's name carries a digest of the files, so a change of the
package is a change of the pod templates: KubeRay rolls it out as a new Ray cluster, like every
other Serve change (docs/architecture.md, "The app's code in the Ray cluster").

Standard library and Ray only (the image's Ray 2.58): nothing else is installed on the pods.
Modules:
  prefix_index   the bounded prefix index and rendezvous hashing (no Ray import)
  prefix_router  PrefixAffinityRouter, the request router for either side
  latency_policy      the latency policy's decisions per side (no Ray import)
  latency_autoscaler  LatencyObjectivePolicy, the application-level autoscaling policy
  latency_window      a replica's latency percentile over a sliding window (no Ray import)
  latency_servers     Ray Serve LLM's P/D servers, reporting their latency to the policy
  pd_builder          Ray's P/D builder with those servers (import_path under policy latency)
"""
