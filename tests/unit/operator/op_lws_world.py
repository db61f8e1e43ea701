"""LeaderWorkerSets as the apiserver returns them, shared by ``test_op_lws.py`` and ``test_op_lws_target.py``:
one in vLLM's multiprocessing form (``vllm serve`` argv in command/args) and one in the Ray form of LWS's own vLLM
example (``multi-node-serving.sh`` in a shell string)."""

from __future__ import annotations


def template(name: str, command: list[str], args: list[str] | None = None) -> dict:
    c: dict = {"name": name, "image": "vllm/vllm-openai:v0.33.0", "command": command,
               "resources": {"limits": {"memory": "500Gi"}}}
    if args is not None:
        c["args"] = args
    return {"metadata": {"labels": {"role": name}}, "spec": {"containers": [c]}}


def mp_lws() -> dict:
    argv = ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]
    return {"metadata": {"name": "big", "annotations": {}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": 1,
                "leaderTemplate": template("vllm", argv, ["--port", "8000", "--tensor-parallel-size", "8"]),
                "workerTemplate": template("vllm", argv, ["--tensor-parallel-size", "8"])}}}


def ray_lws() -> dict:
    lead = ("bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader "
            "--ray_cluster_size=$(LWS_GROUP_SIZE); python3 -m vllm.entrypoints.openai.api_server --port 8080 "
            "--model m --tensor-parallel-size 8 --pipeline_parallel_size 2")
    work = "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)"
    return {"metadata": {"name": "big"}, "spec": {"replicas": 2, "leaderWorkerTemplate": {
        "size": 2, "leaderTemplate": template("vllm-leader", ["sh", "-c", lead]),
        "workerTemplate": template("vllm-worker", ["sh", "-c", work])}}}
