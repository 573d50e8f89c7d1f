"""A run's checked settings: the method, its resolved parameters, the budget and the sampling settings, as every
run's check leaves them. Only CheckedRun.check makes one (the constructor refuses any other caller), so a Session
or a command handed one knows it was checked and checks nothing again: the page's door (lab.visitor_request) makes
it once, the engine takes it as it is."""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.accept.sampling import SamplingSettings
from specviz.methods import get_method
from specviz.tree.budget import AUTO_BUDGET, Budget


class _Seal:
    """Proof that check() made the record; it pickles as the module's one instance (a state travels)."""

    def __reduce__(self):
        return "_SEAL"


_SEAL = _Seal()


@dataclass(frozen=True)
class CheckedRun:
    method: str
    params: tuple[tuple[str, object], ...]  # sorted (name, value): every parameter of the method, resolved
    budget: Budget
    sampling: SamplingSettings
    seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.seal is not _SEAL:
            raise TypeError("a CheckedRun is made by CheckedRun.check, which checks what it holds")

    @classmethod
    def check(cls, method: str, params: dict | None = None, budget: Budget | int | str = AUTO_BUDGET,
              sampling: SamplingSettings = SamplingSettings()) -> "CheckedRun":
        """Every check a run makes of its settings, once (SpecvizError with a sentence for the user): the method's
        name, its parameters' names, values and cross-checks, the budget, the sampling settings, and the
        parameters that mean nothing at this temperature."""
        spec = get_method(method)
        resolved = spec.resolve_params(params)
        # settings built directly (not by SamplingSettings.checked) may hold any value
        sampling = SamplingSettings.checked(sampling.temperature, sampling.top_p, sampling.seed)
        spec.check_sampling(resolved, sampling)
        return cls(spec.name, tuple(sorted(resolved.items())), Budget.parse(budget), sampling, _SEAL)

    @property
    def param_values(self) -> dict:
        return dict(self.params)
