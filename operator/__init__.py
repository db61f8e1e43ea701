"""kvplan_operator: the KVPlan operator (kopf). Installed from the ``operator/`` folder under this name.

Layers (pure first): ``spec`` (CR -> validated spec), ``conditions``, ``builders`` (plan -> patches), ``policy``
(disruption control), ``status``, ``translate`` (spec + observations <-> kvcore); side effects through
``snapshot`` (Prometheus), ``kube`` (the only module calling the Kubernetes API) and ``apply``; ``reconcile``
runs the phases once; ``handlers`` wires it to kopf; ``main`` is the ``kvplan-operator`` command. See
docs/operator.md.
"""
