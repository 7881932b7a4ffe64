"""A worker's speculative decoding: its settings, draft model, measured costs and counters.

The engine asks :meth:`Speculation.resolve` which mode a request runs in, and
gets a fresh drafter and controller per request from here.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Final

from reame.shared.config import Config
from reame.shared.modes import SpeculativeMode, choices
from reame.worker.fingerprint import model_fingerprint
from reame.worker.kv import KvCache
from reame.worker.model import Model, ModelError
from reame.worker.speculative import cost_file, costs
from reame.worker.speculative.adaptive import (
    DEFAULT_COSTS,
    LookupController,
    ModelController,
    StepCosts,
    lookup_can_pay,
    model_can_pay,
)
from reame.worker.speculative.draft_model import ModelDrafter, vocabulary_problem
from reame.worker.speculative.loop import Controller, Drafter, Tally
from reame.worker.speculative.ngram import LookupDrafter

log = logging.getLogger(__name__)

PARAM: Final = "reame.speculative"  # the request field that picks a mode
DRAFT_KV_TYPE: Final = "f16"  # the draft's cache is small; a quantized one would need flash attention


class SpeculationError(ValueError):
    """A request asked for a speculative mode this worker cannot serve."""


def check_mode(asked: str | None, has_draft: bool) -> None:
    """Refuse a mode that does not exist, or model mode without a draft model."""
    if asked is None:
        return
    if asked not in SpeculativeMode.__members__.values():
        raise SpeculationError(f"{PARAM} must be one of {choices(SpeculativeMode)}; got {asked!r}")
    if asked == SpeculativeMode.MODEL and not has_draft:
        raise SpeculationError(
            f"{PARAM} 'model' needs a draft model, and this server has none (speculative.draft_model_path)"
        )


@dataclasses.dataclass
class Counters:
    """Totals over the worker's life, for metrics."""

    requests: int = 0  # requests decoded with speculation on
    steps: int = 0  # verification decodes
    draft_tokens: int = 0
    accepted_tokens: int = 0
    switched_off: int = 0  # requests in which the draft model was switched off


class Speculation:
    """What one worker needs to decode speculatively."""

    def __init__(
        self, mode: SpeculativeMode, draft_min: int, draft_max: int, draft: Model | None = None, adaptive: bool = True
    ) -> None:
        check_mode(mode, draft is not None)
        if not 1 <= draft_min <= draft_max:
            raise ValueError(f"need 1 <= draft_min <= draft_max, got {draft_min} and {draft_max}")
        self.mode = mode
        self.draft_min = draft_min
        self.draft_max = draft_max
        self.draft = draft
        self.draft_kv = KvCache(draft) if draft is not None else None
        self.adaptive = adaptive
        self.costs: StepCosts = DEFAULT_COSTS
        self.available = True  # False when the target's cache cannot drop positions
        self.counters = Counters()
        # Where the costs are kept for every worker and restart (None: measured by this worker alone).
        self.kept: tuple[Path | None, cost_file.CostKey] | None = None

    def resolve(self, asked: SpeculativeMode | None) -> SpeculativeMode:
        """Return the mode a request runs in; raise :class:`SpeculationError` for a bad request.

        Model mode runs plainly when the measured costs say the draft model cannot pay
        (then it does not even read the prompt), and lookup mode when no draft length
        could pay (then it does not even index the prompt).
        """
        check_mode(asked, self.draft is not None)
        mode = self.mode if asked is None else asked
        if not self.available:
            return SpeculativeMode.OFF
        if self.adaptive and mode == SpeculativeMode.MODEL and not self.model_pays:
            return SpeculativeMode.OFF
        if self.adaptive and mode == SpeculativeMode.LOOKUP and not self.lookup_pays:
            return SpeculativeMode.OFF
        return mode

    @property
    def lookup_pays(self) -> bool:
        """Tell whether lookup drafts could speed decoding up, at the measured batch costs."""
        return lookup_can_pay(dataclasses.replace(self.costs, draft=0.0), self.draft_min, self.draft_max)

    @property
    def model_pays(self) -> bool:
        """Tell whether the draft model could speed decoding up, at the measured costs."""
        return model_can_pay(self.costs, self.draft_min, self.draft_max)

    def calibrate(self, target: KvCache, filler: int, n_batch: int, threads: int = 0) -> None:
        """Check that rejected positions can be dropped, then measure the step costs.

        Drafts are capped to fit a decode batch of ``n_batch`` tokens; ``threads``: the
        decode threads, which decide the clock (worker.speculative.costs.clock).
        """
        if n_batch < 2:
            log.warning("model.n_batch %d leaves no room for drafts: speculative decoding is off", n_batch)
            self.available = False
            return
        self.draft_max = min(self.draft_max, n_batch - 1)
        self.draft_min = min(self.draft_min, self.draft_max)
        target.reset()
        target.append((filler, filler), logits_last=True)
        if not target.truncate(1):  # recurrent caches cannot cut a sequence
            log.warning("this model's KV cache cannot drop positions: speculative decoding is off")
            self.available = False
            return
        target.reset()  # measuring empties the cache; kept costs must leave it as empty

        def measure() -> StepCosts:
            return costs.measure(target, self.draft_min, self.draft_max, filler, n_batch, self.draft_kv, threads)

        self.costs = measure() if self.kept is None else cost_file.load_or_measure(*self.kept, measure)
        log.info(
            "speculative decoding: default %s, drafts of %d to %d; batch costs in one-token decodes: %s%s",
            self.mode, self.draft_min, self.draft_max,
            ", ".join(f"{size}: {cost:.2f}" for size, cost in self.costs.points),
            f"; a draft-model token: {self.costs.draft:.2f}" if self.draft is not None else "",
        )
        if not self.lookup_pays:
            log.warning(
                "a verification batch costs nearly as much as its tokens decoded one by one here, so lookup "
                "cannot speed decoding up and will decode plainly (more threads per worker make batches "
                "relatively cheaper; BENCHMARKS.md, \"Batch costs\")",
            )
        if self.draft is not None and not self.model_pays:
            log.warning(
                "the draft model costs %.2f target decodes per token: it cannot speed decoding up here, "
                "so model mode will decode plainly", self.costs.draft,
            )

    def drafter(self, mode: SpeculativeMode, n_batch: int, scope: str = "") -> Drafter:
        """Return a drafter for one request in ``mode`` (lookup or model) and cache ``scope``."""
        if mode == SpeculativeMode.MODEL and self.draft_kv is not None:
            # The draft model reuses its cache like the target: never across scopes (worker.kv).
            self.draft_kv.enter_scope(scope)
            return ModelDrafter(self.draft_kv, n_batch)
        return LookupDrafter()

    def controller(self, mode: SpeculativeMode) -> Controller:
        """Return the draft-length controller for one request in ``mode``."""
        if mode == SpeculativeMode.MODEL:
            return ModelController(self.costs, self.draft_min, self.draft_max, self.adaptive)
        lookup_costs = dataclasses.replace(self.costs, draft=0.0)
        return LookupController(lookup_costs, self.draft_min, self.draft_max, self.adaptive)

    def count(self, tally: Tally, controller: Controller) -> None:
        """Add a finished request to the worker's counters."""
        counters = self.counters
        counters.requests += 1
        counters.steps += tally.steps
        counters.draft_tokens += tally.drafted
        counters.accepted_tokens += tally.accepted
        counters.switched_off += controller.switched_off

    def close(self) -> None:
        """Free the draft model (idempotent)."""
        if self.draft is not None:
            self.draft.close()


def load_draft(config: Config, target: Model) -> Model | None:
    """Load the configured draft model, refusing one whose vocabulary differs from the target's."""
    path_text = config.speculative.draft_model_path
    if not path_text:
        return None
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ModelError(f"speculative.draft_model_path {path} is not a file")
    draft = Model(path, target.n_ctx, config.model.n_batch, config.workers.threads, DRAFT_KV_TYPE)
    problem = vocabulary_problem(target, draft)
    if problem is not None:
        draft.close()
        raise ModelError(f"the draft model {path} cannot draft for {target.path}: {problem}")
    return draft


def from_config(config: Config, target: Model, fingerprint: bytes | None = None) -> Speculation:
    """Build a worker's speculation from its configuration (loads the draft model, if any).

    With the target's ``fingerprint``, the step costs are kept on disk (worker.speculative.cost_file).
    """
    section = config.speculative
    draft = load_draft(config, target)
    try:
        speculation = Speculation(section.mode, section.draft_min, section.draft_max, draft)
        if fingerprint is not None:
            speculation.kept = (cost_file.directory(config), cost_key(config, target, fingerprint, draft))
        return speculation
    except (ValueError, OSError) as err:
        if draft is not None:
            draft.close()
        raise ModelError(str(err)) from err


def cost_key(config: Config, target: Model, fingerprint: bytes, draft: Model | None) -> cost_file.CostKey:
    """Everything the measured costs depend on (n_batch as the context got it: capped to n_ctx)."""
    import llama_cpp

    draft_print = model_fingerprint(draft.path, draft.kv_type, draft.flash_attn).hex() if draft is not None else ""
    return cost_file.CostKey(
        model=fingerprint.hex(), draft_model=draft_print, threads=config.workers.threads, n_batch=target.n_batch,
        draft_min=config.speculative.draft_min, draft_max=config.speculative.draft_max,
        llama_cpp=llama_cpp.__version__, cpu=cost_file.this_cpu(), repack=target.repack,
    )
