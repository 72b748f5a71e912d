"""What the observability stack tells AWS's managed Prometheus and CloudWatch, computed from the
configuration and catalog/metrics.py: scrape configuration, PromQL, alert rules."""
