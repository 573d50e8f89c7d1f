"""Run inside a virtual environment with vLLM and SGLang installed (tests/test_engines_own_code.py makes it): the
configs specviz printed, validated by the engines' own classes on this CPU.

    python engine_configs_check.py CONFIGS.json RESULTS.json

CONFIGS.json: {"target": a local model folder, "vllm": [speculative_config JSON text, ...], "sglang": [launch
command text, ...], "refused_vllm": [speculative_config JSON text vLLM must refuse, ...]}. The word TARGET in a
printed config stands for the target and becomes the folder. RESULTS.json: per engine its version (or why it could
not be imported) and per config "ok" with what the engine made of it, or the engine's error."""

import argparse
import json
import shlex
import sys


def vllm_results(target: str, configs: list[str], refused: list[str]) -> dict:
    try:
        import vllm
        from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
    except Exception as exc:  # not installed or not importable here: said, not failed
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    model = ModelConfig(model=target, tokenizer=target)

    def check(text: str) -> dict:
        try:
            made = SpeculativeConfig(**json.loads(text), target_model_config=model,
                                     target_parallel_config=ParallelConfig())
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        return {"ok": True, "method": made.method, "num_speculative_tokens": made.num_speculative_tokens,
                "draft_architectures": list(getattr(made.draft_model_config.hf_config, "architectures", None) or [])}

    return {"version": vllm.__version__, "configs": [check(t) for t in configs], "refused": [check(t) for t in refused]}


def sglang_results(target: str, commands: list[str]) -> dict:
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {exc}"}

    def check(text: str) -> dict:
        words = shlex.split(text.replace("\\\n", " "))
        flags = words[words.index("sglang.launch_server") + 1:]
        flags = [target if w == "TARGET" else w for w in flags] + ["--device", "cpu"]
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        try:
            made = ServerArgs.from_cli_args(parser.parse_args(flags))
        except BaseException as exc:  # argparse exits on an unknown flag
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        return {"ok": True, **{k: getattr(made, k) for k in (
            "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens")}}

    return {"version": sglang.__version__, "configs": [check(t) for t in commands]}


def main(configs_path: str, results_path: str) -> None:
    configs = json.loads(open(configs_path).read())
    results = {"vllm": vllm_results(configs["target"], configs["vllm"], configs.get("refused_vllm", [])),
               "sglang": sglang_results(configs["target"], configs["sglang"])}
    with open(results_path, "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main(*sys.argv[1:3])
