"""A session's state as bytes that another process of this installation can read: what ZeroGPU needs, where a call
that runs the model may run in a freshly forked worker, its arguments and result pickled.

`dumps(state)` writes every shared read-only resource (runtime.shared_resources) as its key and every tensor on the
CPU; `loads(blob, device)` resolves the keys in this process and places the tensors. KV caches travel as the tokens
they hold and are rebuilt with one prefill where next used (`dumps(state, caches=True)` carries them whole): whole,
they would be hundreds of MB in every reply of a Run. A module or tokenizer that is no registered resource is refused.

Design notes: docs/design.md, "specviz/runtime/state_pickle.py"."""

from __future__ import annotations

import contextvars
import io
import pickle

import torch

from specviz.runtime import draft_model_spec  # noqa: F401 (registers the loaders of the draft models a state holds)
from specviz.runtime import shared_resources

FORMAT = 1


_CACHES_TRAVEL = contextvars.ContextVar("specviz_caches_travel", default=True)


def caches_travel() -> bool:
    """Whether an object being pickled now writes its KV cache (False inside dumps(..., caches=False): it writes
    what it needs to rebuild the cache instead)."""
    return _CACHES_TRAVEL.get()


class StateFormatError(Exception):
    """A state written by another version of specviz (or damaged): it cannot be read here."""


def _by_value_refused(obj) -> bool:
    return isinstance(obj, torch.nn.Module) or type(obj).__name__.endswith("TokenizerFast")


class _Writer(pickle.Pickler):
    def __init__(self, file):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.keys = shared_resources.keys_by_id()
        self.tensors: list[torch.Tensor] = []
        self.tensor_ids: dict[int, int] = {}

    def persistent_id(self, obj):
        key = self.keys.get(id(obj))
        if key is not None:
            return ("shared", key)
        if isinstance(obj, torch.Tensor):
            index = self.tensor_ids.get(id(obj))
            if index is None:
                index = self.tensor_ids[id(obj)] = len(self.tensors)
                self.tensors.append(obj.detach().cpu())
            return ("tensor", index)
        if _by_value_refused(obj):
            raise TypeError(f"a {type(obj).__name__} that is no registered shared resource is part of a session "
                            "state (runtime.shared_resources): it would be copied into every call")
        return None


class _Reader(pickle.Unpickler):
    def __init__(self, file, tensors: list[torch.Tensor]):
        super().__init__(file)
        self.tensors = tensors

    def persistent_load(self, pid):
        kind, value = pid
        if kind == "shared":
            return shared_resources.resolve_key(value)
        if kind == "tensor":
            return self.tensors[value]
        raise pickle.UnpicklingError(f"unknown reference {kind!r}")


def dumps(state, caches: bool = False) -> bytes:
    """The state as bytes: shared resources by key, tensors on the CPU, KV caches as the tokens they hold (caches:
    whole)."""
    body = io.BytesIO()
    writer = _Writer(body)
    mark = _CACHES_TRAVEL.set(caches)
    try:
        writer.dump(state)
    finally:
        _CACHES_TRAVEL.reset(mark)
    return pickle.dumps((FORMAT, torch.__version__, body.getvalue(), writer.tensors), protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes, device: torch.device | str | None = None):
    """dumps's state, its resources resolved in this process and its tensors on device (None: the CPU).
    StateFormatError when the bytes were written by another version or are damaged."""
    try:
        form, torch_version, body, tensors = pickle.loads(blob)
    except Exception as error:
        raise StateFormatError(f"unreadable ({type(error).__name__})") from None
    if form != FORMAT or torch_version != torch.__version__:
        raise StateFormatError(f"written by format {form} with torch {torch_version}; this is format {FORMAT} "
                               f"with torch {torch.__version__}")
    if device is not None and torch.device(device).type != "cpu":
        tensors = [t.to(device) for t in tensors]
    try:
        return _Reader(io.BytesIO(body), tensors).load()
    except (pickle.UnpicklingError, AttributeError, ModuleNotFoundError, ImportError, EOFError, TypeError,
            KeyError, IndexError, ValueError) as error:
        raise StateFormatError(f"unreadable here ({type(error).__name__}: {error})") from None
