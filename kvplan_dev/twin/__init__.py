"""The twin: kvplan's loop on one machine with real parts everywhere except the GPU (issue 25; dev/test tooling).

- :mod:`.control`: etcd, kube-apiserver, and the real kube-controller-manager and kube-scheduler built from the
  same ``k8s.io/kubernetes`` module (Deployments become ReplicaSets and Pods; Pods are placed by GPUs and node
  selectors);
- :mod:`.nodes`: Node objects with ``nvidia.com/gpu`` allocatable and the GPU product label of a catalogue GPU;
- :mod:`.agent`: the node agent standing in for the kubelet: each Pod bound to a twin node runs as a real
  ``vllm serve`` on CPU (:mod:`.pod_command` turns the Pod's container into that process, :mod:`.volumes` mounts
  its ConfigMaps the way the kubelet does), with Pod status written from the process and its health endpoint;
- :mod:`.step_clock`: the engine step time of the layout the Pod asks for, from kvcore's measured step-time model,
  which the token-fabricating executor sleeps for;
- :mod:`.scrape`: the file-based service discovery Prometheus scrapes the Pods' real ``/metrics`` through.

Nothing here is shipped: it is test tooling in ``kvplan_dev``.
"""
