"""kvplan_operator: the KVPlan operator (kopf). Installed from the ``operator/`` folder under this name.

A reconcile (``reconcile``) runs five phases, one module each, top to bottom: ``observe`` (every read),
``decide`` (pure: kvcore plan, hold vs free, disruption budget), ``build`` (pure: one desired state and each
target's writes), ``apply`` (ordered writes, stopping at the first failure) and ``record`` (status, conditions,
events, metrics). ``targets/`` holds one module per kind of object written (Deployments, the state and router
ConfigMaps, the HTTPRoute, InferencePools). At the bottom: ``run`` (run context, dependencies, the phase failure
type) and ``desired`` (desired-state types). Helpers: ``spec`` (CR -> validated spec), ``conditions``, ``policy``
(the disruption rule), ``translate`` (CR <-> kvcore vocabulary), ``status``, ``history`` (Prometheus histories),
``prom`` (the Prometheus client and URL policy) and ``kube`` (the only module importing ``kubernetes``, behind the
``KubeApi`` protocol). ``handlers`` wires it to kopf; ``main`` is the ``kvplan-operator`` command. See
docs/operator.md.
"""
