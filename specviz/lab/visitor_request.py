"""One door for what a visitor asks for. Every event of the page and of the API (Step, Run, Play's timer, A/B and
its sides' overrides, the share link, the sweep) turns its raw inputs into a VisitorRequest here, validated once
at construction: types, finite numbers, ranges, and the public policy (lab.public_policy). The run's own checks
(method, parameters, budget, sampling) are the engine's, made once here: their CheckedRun (engine.checked_run) is
what the Session takes, so nothing downstream parses or checks them again. A refusal is one SpecvizError sentence that names the allowed range or list.

On a public Space any handler can be called with any JSON value (gradio_client, a raw HTTP request), so nothing
here trusts a widget's type: a number may arrive as "nan", 1e400, a list or a dict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from specviz.accept.sampling import SamplingSettings
from specviz.engine.checked_run import CheckedRun
from specviz.errors import SpecvizError
from specviz.methods import METHODS, get_method
from specviz.tree.budget import AUTO_BUDGET, AUTO_TEXT, BUDGET_MAX, Budget
from specviz.runtime.shared_resources import mode_key, model_key
from specviz.lab.lab_state import Settings, parse_prompt
from specviz.lab.input_values import MAX_TOKENS_PRIVATE, flag, scalar, text_value, whole_number
from specviz.lab.public_policy import Policy

# the page's settings widgets by the keyword every model event passes them as (the API's named parameters)
SETTING_NAMES = ("model", "draft_model", "mode", "prompt", "method", "auto_budget", "budget", "temperature", "top_p",
                 "seed")
# every method parameter once (methods share names such as tau); each method reads only its own
PARAMS = list({p.name: p for m in METHODS.values() for p in m.params}.values())
# a side of A/B may change these run settings besides its method's parameters
SIDE_SETTINGS = ("method", "budget", "temperature", "top_p", "seed", "draft_model")
# longest text read for a name (a hub id, a mode): longer is refused before it reaches a loader
MAX_NAME_CHARS = 200


def visitor_budget(value) -> Budget:
    """A visitor's budget: a Budget, "auto" (any case) or a whole number of nodes (1..BUDGET_MAX), refused with the
    range as the page's other numbers are."""
    if isinstance(value, Budget):
        return value
    if isinstance(value, str) and value.strip().lower() == AUTO_TEXT:
        return AUTO_BUDGET
    return Budget(whole_number("budget", value, 1, BUDGET_MAX))


def budget_from_widgets(auto, nodes) -> Budget:
    """The page's Auto checkbox and its budget slider (read only when Auto is off)."""
    return AUTO_BUDGET if flag("auto_budget", auto) else visitor_budget(nodes)


def checked_settings(model: str, prompt: str, method: str, budget, params: Mapping, draft_model: str = "",
                     mode: str = "", temperature=0.0, top_p=1.0, seed=0,
                     policy: Policy = Policy.private(), own_only: bool = False) -> Settings:
    """A run's Settings from loose values (no model needed), each checked once: SpecvizError for bad input.
    params may hold other methods' parameters too (the page sends every widget), unless own_only (a command line
    names only what it means: another method's name is refused)."""
    model = policy.check_model(text_value("model", model, MAX_NAME_CHARS))
    mode = policy.check_mode(text_value("mode", mode, MAX_NAME_CHARS))
    method = text_value("method", method, MAX_NAME_CHARS).strip()
    prompt = text_value("prompt", prompt, policy.max_prompt_chars)
    if not isinstance(params, Mapping):
        raise SpecvizError(f"params must be an object of NAME: VALUE, got {type(params).__name__}.")
    spec = get_method(method)
    own = dict(params) if own_only else {p.name: params[p.name] for p in spec.params if p.name in params}
    draft_name = text_value("draft_model", draft_model, MAX_NAME_CHARS).strip() if spec.uses_draft_model else ""
    draft_name = policy.check_draft(draft_name) if spec.uses_draft_model else ""
    sampling = SamplingSettings.checked(temperature, top_p, seed)  # the number types refused one by one first
    run = CheckedRun.check(spec.name, own, visitor_budget(budget), sampling)
    policy.check_params(spec.name, run.param_values)
    model_prompt = parse_prompt(prompt)  # an empty or malformed prompt is refused before any model runs
    return Settings(model_key(model), prompt, run, draft_name, mode_key(mode), policy.max_prompt_tokens, model_prompt)


@dataclass(frozen=True)
class VisitorRequest:
    """What one event asks for, checked: the run's settings (a change of any restarts the generation) and how
    many new tokens it may produce."""
    settings: Settings
    max_new_tokens: int
    # every method parameter the page sent (scalars, checked by the method that reads them): an A/B side that
    # names another method takes that method's parameters from here, as the page's widgets show them
    page_params: tuple[tuple[str, object], ...] = ()

    @property
    def budget(self) -> Budget:
        return self.settings.budget

    @classmethod
    def from_inputs(cls, values: Mapping, max_new_tokens, policy: Policy) -> "VisitorRequest":
        """The page's widgets (or an API call's named parameters) by SETTING_NAMES and parameter names."""
        if not isinstance(values, Mapping):
            raise SpecvizError("settings must be an object of NAME: VALUE.")
        budget = budget_from_widgets(values.get("auto_budget", False), values.get("budget"))
        page_params = {p.name: scalar(p.name, values[p.name]) for p in PARAMS if p.name in values}
        settings = checked_settings(values.get("model"), values.get("prompt"), values.get("method"), budget,
                                    page_params, values.get("draft_model"), values.get("mode"),
                                    values.get("temperature", 0.0), values.get("top_p", 1.0), values.get("seed", 0),
                                    policy)
        return cls(settings, policy.check_new_tokens(max_new_tokens), tuple(sorted(page_params.items())))

    @classmethod
    def of_loose(cls, loose: Mapping, policy: Policy = Policy.private(), max_new_tokens=None,
                 own_only: bool = False) -> "VisitorRequest":
        """A request from checked_settings' keyword arguments (the CLI's, a preset's, a test's)."""
        params = loose.get("params") or {}
        settings = checked_settings(**{**loose, "params": params}, policy=policy, own_only=own_only)
        limit = policy.max_new_tokens or MAX_TOKENS_PRIVATE
        return cls(settings, policy.check_new_tokens(limit if max_new_tokens is None else max_new_tokens),
                   tuple(sorted((k, scalar(k, v)) for k, v in params.items())))

    def loose(self) -> dict:
        """checked_settings' keyword arguments that give this request's settings again."""
        s = self.settings
        return {"model": s.model, "prompt": s.prompt, "method": s.method, "budget": s.budget,
                "params": {**dict(self.page_params), **dict(s.params)}, "draft_model": s.draft_model, "mode": s.mode,
                "temperature": s.sampling.temperature, "top_p": s.sampling.top_p, "seed": s.sampling.seed}

    def with_overrides(self, overrides: Mapping[str, object], policy: Policy) -> "VisitorRequest":
        """These settings with NAME=VALUE overrides (run settings of SIDE_SETTINGS, or the method's parameters),
        checked as any request is: an A/B side, a paper's configuration."""
        loose = self.loose()
        for name in SIDE_SETTINGS:
            if name in overrides:
                loose[name] = overrides[name]
        spec = get_method(text_value("method", loose["method"], MAX_NAME_CHARS))
        own = {p.name for p in spec.params}
        for name, value in overrides.items():
            if name in SIDE_SETTINGS:
                continue
            if name not in own:
                raise SpecvizError(f"{spec.name} has no parameter '{name}' (its parameters: "
                                   f"{', '.join(sorted(own)) or 'none'}; run settings: {', '.join(SIDE_SETTINGS)}).")
            loose["params"][name] = scalar(name, value)
        return replace(self, settings=checked_settings(**loose, policy=policy))
