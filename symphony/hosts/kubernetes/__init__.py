"""Agent runs as pods in a Kubernetes cluster, through `kubectl` (spec Appendix B)."""
