import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def cli(*args):
    return subprocess.run([sys.executable, "-m", "specviz", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_generate_json_contract(tmp_path, capsys):
    from specviz.cli import main  # in this process: a process per command costs ~10 s of imports and loading

    trace = tmp_path / "t.json"
    assert main(["generate", "--method", "pld", "--prompt", "Repeat: one two three, one two three.",
                 "--max-new-tokens", "12", "--budget", "8", "--param", "max_ngram=2", "--trace", str(trace),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"method", "output_ids", "text", "new_tokens", "steps", "mean_accepted", "wall_s",
                           "tokens_per_s"}
    assert result["new_tokens"] == len(result["output_ids"]) <= 12
    assert json.loads(trace.read_text())["method"] == "pld"


def test_generate_prompt_file_json_chat(tmp_path, capsys):
    from specviz.cli import main  # in this process: a process per command costs ~10 s of imports and loading

    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "Say yes."}]}))
    assert main(["generate", "--method", "ar", "--prompt-file", str(chat), "--max-new-tokens", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new_tokens"] <= 4


def test_bad_input_gives_message_not_traceback(tmp_path, capsys):
    """Each refusal is one line on stderr with exit status 2. In this process (main() is what `python -m
    specviz` runs; a process per case cost about 10 s of imports each), and one case through a real process."""
    from specviz.cli import main

    for args, expected in [
        (("generate", "--method", "pld", "--prompt", ""), "empty"),
        (("generate", "--method", "pld", "--prompt", "x", "--param", "nope=1"), "no parameter 'nope'"),
        (("generate", "--method", "pld", "--prompt", "x", "--budget", "0"), "budget must be a whole number between 1 and"),
        (("generate", "--method", "pld", "--prompt", "x", "--model", str(tmp_path / "none")), "does not exist"),
        (("generate", "--method", "pld", "--prompt-file", str(tmp_path / "none.txt")), "does not exist"),
        (("bench", "--suite", str(tmp_path / "none.jsonl"), "--methods", "ar"), "does not exist"),
        (("params", "nope"), "Unknown method"),
        (("dev", "app-load", "--part", "versus-bench", "--examples", "code-rename,nope"), "Not example prompts"),
    ]:
        status = main(list(args))
        err = capsys.readouterr().err
        assert status == 2, (args, err)
        assert expected in err and "Traceback" not in err, (args, err)
    out = cli("generate", "--method", "pld", "--prompt", "x", "--param", "nope=1")
    assert out.returncode == 2 and "no parameter 'nope'" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_params_lists_defaults(capsys):
    from specviz.cli import main

    assert main(["params", "pld"]) == 0
    out = capsys.readouterr().out
    assert "max_ngram" in out and "default 3" in out


def test_bench_reports_per_category(tmp_path, capsys):
    from specviz.cli import main

    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps(x) for x in [
        {"id": "a", "category": "copy", "prompt": "Repeat: sun moon star, sun moon star."},
        {"id": "b", "category": "open", "messages": [{"role": "user", "content": "Name a colour."}],
         "max_new_tokens": 6}]))
    report_path = tmp_path / "report.json"
    assert main(["bench", "--suite", str(suite), "--methods", "pld,hf-pld", "--max-new-tokens", "10",
                 "--budget", "8", "--json", str(report_path)]) == 0
    out = capsys.readouterr().out
    assert "lossless" in out and "copy" in out and "hf-pld" in out
    report = json.loads(report_path.read_text())
    assert report["methods"] == ["ar", "pld", "hf-pld"]
    assert report["categories"]["ALL"]["ar"]["speedup"] == 1.0
    assert all(r["lossless"] for r in report["prompts"] if r["method"] == "pld")
    assert len(report["prompts"]) == 6


def test_sweep_reports_mat_difference_and_trigger_rate(tmp_path, capsys):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "a", "category": "copy",
                                 "prompt": "Repeat exactly: the red fox jumps over the lazy dog, the red fox jumps "
                                           "over the lazy dog, the red fox jumps over the lazy dog."}))
    from specviz.cli import main  # in this process (test_bad_input_gives_message_not_traceback runs a real one)

    report_path = tmp_path / "sweep.json"
    assert main(["sweep", "--suite", str(suite), "--vary", "tau=0,5", "--param", "fallback=logits",
                 "--max-new-tokens", "24", "--budget", "32", "--json", str(report_path)]) == 0
    out = capsys.readouterr().out
    assert "differ" in out and "trigger" in out
    report = json.loads(report_path.read_text())
    per_value = report["categories"]["ALL"]
    assert set(per_value) == {"ar", "0", "5"}
    assert per_value["0"]["differing_fraction"] == 0.0          # tau = 0 is lossless
    assert per_value["0"]["relaxed"] == 0 and per_value["0"]["trigger_rate"] > 0
    for args, expected in [(("--vary", "tau"), "--vary takes NAME=V1"), (("--vary", "tau=-1"), "tau must be between"),
                           (("--vary", "nope=1"), "no parameter 'nope'")]:
        assert main(["sweep", "--suite", str(suite), *args, "--max-new-tokens", "4"]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, err


USER_COMMANDS = {"generate", "bench", "sweep", "calibrate", "datastore", "train-head", "export-head", "trained-files",
                 "draft-quality", "static-tree", "space-bundle", "params"}
DEV_COMMANDS = {"overhead", "predict", "memory", "page-faults", "profile", "roofline", "random-model", "long-context",
                "state-cost", "space-figures", "app-load", "record-traces", "structure", "mode-diff", "docs"}


def subcommands(parser) -> dict:
    """A parser's subcommands by name."""
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def test_every_command_is_a_module_that_registers_itself(capsys):
    from specviz.cli import build_parser, main
    from specviz.commands import COMMANDS
    from specviz.commands.dev import DEV_COMMANDS as dev_modules

    for module in (*COMMANDS, *dev_modules):
        assert callable(getattr(module, "register", None)) and callable(getattr(module, "run", None)), module
    # every module in the two folders is registered (common_args is the commands' shared helpers)
    folder = ROOT / "specviz" / "commands"
    stems = lambda modules: {m.__name__.rsplit(".", 1)[-1] for m in modules}  # noqa: E731
    assert {f.stem for f in folder.glob("*.py")} - {"__init__", "common_args"} == stems(COMMANDS)
    assert {f.stem for f in (folder / "dev").glob("*.py")} - {"__init__"} == stems(dev_modules)
    top = subcommands(build_parser())
    assert set(top) == USER_COMMANDS | {"dev"}
    dev = subcommands(top["dev"])
    assert set(dev) == DEV_COMMANDS
    # each name runs its own module's run; the maintenance commands are no longer at the top
    ran = [top[name].get_default("func") for name in USER_COMMANDS] + [dev[name].get_default("func") for name in dev]
    assert sorted(f.__module__ for f in ran) == sorted(m.__name__ for m in (*COMMANDS, *dev_modules))
    assert top["params"].get_default("func").__module__ == "specviz.commands.params"
    assert dev["random-model"].get_default("func").__module__ == "specviz.commands.dev.random_model"
    with pytest.raises(SystemExit) as stopped:
        main(["dev", "--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and all(name in out for name in DEV_COMMANDS), out
    with pytest.raises(SystemExit) as stopped:
        main(["overhead", "--help"])
    assert stopped.value.code == 2 and "invalid choice: 'overhead'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["dev", "static-tree", "--help"])
    assert stopped.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["dev", "app-load", "--help"])
    assert stopped.value.code == 0 and "--part" in capsys.readouterr().out


def test_dev_overhead_drafts_with_the_drafter_named(tiny_models, monkeypatch, capsys):
    """`dev overhead` runs a model-drafting method with the drafter --draft-model names (by default the head, as
    bench and the app do), not always the target's own weights."""
    from specviz.benches import overhead
    from specviz.cli import main

    seen = []

    def fake_step_overhead(lm, suite, method, budget, max_new_tokens, params=None, draft=None):
        seen.append(draft)
        return {"method": method}

    monkeypatch.setattr(overhead, "step_overhead", fake_step_overhead)
    assert main(["dev", "overhead", "--suite", "assets/heldout.jsonl", "--method", "reader", "--budgets", "auto",
                 "--model", tiny_models["same"], "--draft-model", "self-skip:1"]) in (0, None)
    assert len(seen) == 1 and seen[0] is not None and "skip" in seen[0].name, seen
    capsys.readouterr()
