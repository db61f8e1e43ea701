"""The measured time model (issue 22): config.json models, the GPU catalogue, the step-time shape, the bad-input list
and ``kvcore profile``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.errors import InputError
from kvcore.profiles.arch import from_hf_config
from kvcore.profiles.gpus import CATALOGUE, gpu_from_spec
from kvcore.profiles.models import CONFIGS, get_model
from kvcore.profiles.steptime import (FIRST_TOKEN, GRAPH, check_fits, layout, prefill_time, step_time,
                                      tokens_per_s_per_gpu)

LLAMA = dict(CONFIGS["llama-70b"][1])


def _lay(gpu: str = "A100-80GB", model: str = "llama-2-70b", tp: int = 4, pp: int = 1):  # type: ignore[no-untyped-def]
    return layout(CATALOGUE[gpu], get_model(model), tp, pp)


def test_config_json_gives_the_llama_shape() -> None:
    m = from_hf_config(LLAMA, name="x")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (80, 8192, 64, 8, 128)
    assert m.params == pytest.approx(70.55e9, rel=1e-3) and m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_moe_reads_touched_experts_and_computes_active_ones() -> None:
    mix = get_model("mixtral-8x7b")
    assert mix.params == pytest.approx(46.7e9, rel=0.01) and mix.active_params == pytest.approx(12.9e9, rel=0.01)
    lay = layout(CATALOGUE["H100-SXM"], mix, 2, 1)
    assert step_time(lay, 1024.0, batch=1) < step_time(lay, 1024.0, batch=16)  # more experts touched


@pytest.mark.parametrize("cfg,field", [
    ({**LLAMA, "num_hidden_layers": 0}, "model_config.num_hidden_layers"),
    ({**LLAMA, "num_key_value_heads": 7}, "model_config.num_key_value_heads"),
    ({**LLAMA, "architectures": ["MambaForCausalLM"]}, "model_config.architectures"),
    ({**LLAMA, "sliding_window_pattern": 6}, "model_config.sliding_window_pattern"),
    ({**LLAMA, "quantization_config": {"quant_method": "awq"}}, "model_config.quantization_config.quant_method"),
    ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, "model_config.hidden_size"),
])
def test_bad_configs_name_the_key(cfg: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as exc:
        from_hf_config(cfg)
    assert exc.value.field == field


def test_bad_layouts_name_the_field() -> None:
    with pytest.raises(InputError, match="attention heads") as e1:
        _lay(tp=3)
    assert e1.value.field == "profile.tp"
    with pytest.raises(InputError) as e2:
        layout(CATALOGUE["A10G"], get_model("llama-8b", "fp8"), 1, 1)
    assert e2.value.field == "profile.kv_dtype"
    with pytest.raises(InputError, match="weights") as e3:
        check_fits(_lay(tp=1))
    assert e3.value.field == "profile.tp"
    with pytest.raises(InputError) as e4:
        gpu_from_spec({"memoryBytes": 0, "hbmBytesPerSecond": 1e12, "bf16Flops": 1e14}, field="groups[0].gpu")
    assert e4.value.field == "groups[0].gpu.memoryBytes"


def test_step_time_has_the_measured_shape() -> None:
    tp4, tp8 = _lay(tp=4), _lay(tp=8)
    # rising from batch 1 (inside a CUDA graph the matmuls add to the weight read): vLLM's own TP4 runs rise from
    # 29 ms at batch 3-8 to 36 ms at 39-64 (A100, kvcore/data/profiling/published_vllm_runs.json)
    assert 1.2 < step_time(tp4, 1024.0, batch=64) / step_time(tp4, 1024.0, batch=1) < 1.6
    assert step_time(tp4, 1024.0, batch=256) > 1.5 * step_time(tp4, 1024.0, batch=1)
    # context costs: batch 32 at 8k context is slower than at 512
    assert step_time(tp4, 8192.0, batch=32) > step_time(tp4, 512.0, batch=32)
    # prefill is its own roofline: 2,048 tokens take far longer than 128
    assert prefill_time(tp4, 2048) > 5 * prefill_time(tp4, 128)
    # TP4 beats TP8 per GPU, as measured
    assert tokens_per_s_per_gpu(tp4) > 1.1 * tokens_per_s_per_gpu(tp8)


def test_vllm_defaults_per_gpu() -> None:
    assert CATALOGUE["A100-80GB"].vllm_max_num_seqs == 256
    assert CATALOGUE["H100-SXM"].vllm_max_num_seqs == 1024 and CATALOGUE["H200"].vllm_max_num_batched_tokens == 8192
    assert CATALOGUE["B200"].vllm_max_num_batched_tokens == 16384 and CATALOGUE["L4"].vllm_max_num_seqs == 256
    assert CATALOGUE["MI300X"].resource == "amd.com/gpu"


def test_cli_profile_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["profile", "--gpu", "A100-80GB", "--model", "llama-70b", "--tp", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["decode_step_s"]) == {"1", "16", "32", "64", "128", "256"}
    assert set(out["decode_step_s_ctx"]) == {"512", "2048", "8192"}
    assert set(out["prefill_s"]) == {"128", "512", "2048", "8192"}
    # the first token: the prefill plus the server's share for the layout's 4 GPUs
    server = FIRST_TOKEN.base_s + 4 * FIRST_TOKEN.per_gpu_s
    assert {p: out["first_token_s"][p] - t for p, t in out["prefill_s"].items()} == pytest.approx(
        dict.fromkeys(out["prefill_s"], server))
    assert out["kv_tokens"] > 0 and out["tokens_per_s_per_gpu"] > 0 and "vidur" in out["source"]
    assert "published vLLM runs" in out["source"] and f"{GRAPH.kernel_s * 1e6:.1f} us per kernel" in out["source"]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**LLAMA, "num_hidden_layers": 0}))
    assert main(["profile", "--gpu", "H100-SXM", "--model-config", str(cfg), "--tp", "4"]) == 2
    assert "--model-config.num_hidden_layers" in capsys.readouterr().err
    assert main(["profile", "--gpu", "A10G", "--model", "llama-8b", "--tp", "1", "--kv-dtype", "fp8"]) == 2
    assert "--kv-dtype" in capsys.readouterr().err
    assert main(["profile", "--gpu", "A100-80GB", "--model", "llama-70b", "--tp", "1"]) == 2
    assert "--tp: the weights" in capsys.readouterr().err
    assert main(["profile", "--gpu", "TPU", "--model", "llama-70b", "--tp", "1"]) == 2
    assert "--gpu: unknown GPU type" in capsys.readouterr().err


def test_cli_profile_of_a_gpu_given_by_its_figures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the H100-SXM's own datasheet figures in a YAML file give the catalogue H100's profile, under the file's name
    h100 = CATALOGUE["H100-SXM"]
    spec = tmp_path / "my-h100.yaml"
    spec.write_text(f"memoryBytes: {h100.memory_bytes}\nhbmBytesPerSecond: {h100.hbm_bytes_s}\n"
                    f"bf16Flops: {h100.bf16_flops}\nfp8Flops: {h100.fp8_flops}\ninterconnect: nvlink\n"
                    f"interconnectBytesPerSecond: {h100.interconnect_bytes_s}\nfamily: h100\n"
                    f"deviceName: {h100.device_name}\n")
    args = ["--model", "llama-70b", "--tp", "4", "--json"]
    assert main(["profile", "--gpu", "H100-SXM", *args]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert main(["profile", "--gpu-config", str(spec), *args]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert mine["gpu"] == "my-h100"
    for key in ("kv_tokens", "decode_step_s", "decode_step_s_ctx", "prefill_s", "first_token_s",
                "tokens_per_s_per_gpu"):
        assert mine[key] == ref[key], key
    spec.write_text("memoryBytes: 0\nhbmBytesPerSecond: 1.0e12\nbf16Flops: 1.0e14\n")
    assert main(["profile", "--gpu-config", str(spec), *args]) == 2
    assert "--gpu-config.memoryBytes: a GPU with no memory" in capsys.readouterr().err
    spec.write_text("[1, 2]\n")
    assert main(["profile", "--gpu-config", str(spec), *args]) == 2
    assert "--gpu-config" in capsys.readouterr().err


def _instance_with(models: dict[str, object], model: str) -> dict[str, object]:
    import yaml
    inst = yaml.safe_load((Path(__file__).resolve().parents[4] / "examples" / "instance-70b.yaml").read_text())
    for g in inst["groups"]:
        g["model"] = model
    inst["models"] = models
    return inst  # type: ignore[no-any-return]


def test_instance_plans_a_model_given_by_its_config() -> None:
    from kvcore.cli.instance_file import instance_from_mapping
    from kvcore.planner import plan
    base = Path(__file__).resolve().parents[4] / "examples"

    def load_instance(d: dict[str, object]):  # type: ignore[no-untyped-def]
        return instance_from_mapping(d, base=base)
    cfg = {**LLAMA, "num_hidden_layers": 40}  # a 35B Llama-shaped model of our own
    inst = load_instance(_instance_with({"my-35b": cfg}, "my-35b"))
    p = plan(inst)
    assert p.status.value in ("feasible", "optimal") and any(g.replicas > 0 for g in p.groups)
    with pytest.raises(InputError) as exc:
        load_instance(_instance_with({"my-35b": {**cfg, "num_hidden_layers": 0}}, "my-35b"))
    assert exc.value.field == "models.my-35b.num_hidden_layers"
