"""Screen, verify, audit: a screen's estimates checked by exact interventions.

>>> import torch
>>> from interv.audit import Screen, verify_screen
>>> exact = torch.tensor([5.0, -4.0, 0.1, 3.0, 0.2, 0.0])
>>> estimate = exact + torch.tensor([0.5, -0.5, 0.0, -2.0, 0.0, 0.0])
>>> audit = verify_screen(Screen(top_k=2, audit=3, alpha=None), estimate, exact.__getitem__)
>>> audit.top().tolist()
[0, 1]

A screen (attribution patching, EAP, EAP-IG) estimates every candidate's effect at
once; it is wrong where the metric saturates or effects cancel. :func:`verify_screen`
turns the estimates into checked numbers:

1. **verify**: the candidates with the largest ``|estimate|`` are intervened on exactly,
   in estimate order, ``top_k`` of them at first;
2. **audit**: a uniform random sample (seeded) of the candidates that were *not*
   verified is intervened on exactly too;
3. **miss rate**: with ``t`` the ``top_k``-th largest ``|exact|`` among the verified
   candidates (the smallest effect in the reported exact top-k), a *miss* is an audited
   candidate with ``|exact| > t``: one that belongs in the top-k but was ranked out of
   the verified set by the screen. The miss rate is ``misses / audited``, with a
   one-sided Clopper-Pearson upper bound at ``level`` (default 95%) for the rate over
   all unverified candidates;
4. **adaptive stopping** (``alpha`` set): while the bound is ``>= alpha``, ``step``
   more candidates are verified in estimate order (audited ones among them count as
   verified; the audit is topped up from the same seeded permutation, so it stays a
   uniform sample of what is still unverified), until the bound falls below ``alpha``,
   the ``budget`` of exact evaluations is spent, or every candidate is checked. The
   outcome says which stopped it.

The bound is computed at each look; stopping on it after several looks makes it
slightly optimistic, so the outcome also carries a Bonferroni-corrected bound over the
looks taken (:attr:`Audit.miss_bound_corrected`).

A rate below ``alpha`` still allows ``alpha`` times the unverified candidates to beat the
top-k (12 of 250 at 5%). The outcome therefore also bounds their *number*: the audit is a
sample without replacement from the unverified candidates, so with ``x`` misses among its
``a`` the finite-population (hypergeometric) upper bound ``D`` on the misses among all
``N_u`` unverified gives at most ``D - x`` *unchecked* candidates that beat the k-th
verified one (:attr:`Audit.unchecked_bound`). ``Screen(bound="any")`` extends the
verification until that count is bounded by zero: until an unchecked miss is excluded at
``alpha`` (the audit then sees no miss in at least ``1 - alpha`` of the unverified
candidates: keeping the exact top-k with that confidence costs nearly a full check unless
the estimates put the top-k first).

Every candidate keeps one status: ``"exact (verified)"``, ``"exact (audit)"`` or
``"estimated"`` (the screen's estimate, not intervened: :meth:`Audit.estimate_sentence` says
by which estimator). Ranking uses exact values only.
Pure tensors; no model. The caller's ``evaluate`` does the interventions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch

from interv._checks import as_finite, as_int
from interv._schema import AtLeast, Finite, Within, parse
from interv.errors import IntervError
from interv.stats import bootstrap_indices, percentile_interval, spearman

__all__ = [
    "BOUNDS",
    "ESTIMATED",
    "ESTIMATORS",
    "EXACT_AUDIT",
    "EXACT_VERIFIED",
    "STOPPED_BY",
    "UNRECORDED_ESTIMATE",
    "Audit",
    "Screen",
    "clopper_pearson_upper",
    "hypergeometric_upper",
    "verify_screen",
]

EXACT_VERIFIED = "exact (verified)"
EXACT_AUDIT = "exact (audit)"
ESTIMATED = "estimated"
STOPPED_BY = ("bound", "budget", "all checked", "one look")
UNRECORDED_ESTIMATE = (
    "estimated by a screen whose estimator is not recorded (a semantics line written before "
    "interv named estimators may misname it), not intervened"
)
"""The sentence of an estimated value whose screen is not at hand (a saved report written
before rows named their estimator, whose own semantics line may misname it; a result built
without its screens)."""


StoredScore = Annotated[float, Within(0.0)] | Literal["inf"] | None
"""A stored reliability score (:func:`scores_to_json`): a finite value, ``"inf"`` (only the
first-order term is 0: the least reliable estimate), or null (not a number)."""


def scores_to_json(scores: torch.Tensor) -> list[float | str | None]:
    """Reliability scores ``[n]`` as JSON: finite ones as numbers, ``inf`` as ``"inf"``, NaN
    as null (:func:`scores_from_json` reads them back)."""
    return [
        float(r) if math.isfinite(r) else "inf" if r == math.inf else None for r in scores.tolist()
    ]


def scores_from_json(stored: Sequence[float | str | None]) -> torch.Tensor:
    """The reliability scores :func:`scores_to_json` wrote (null: NaN; audits stored before
    ``"inf"`` was written hold null for it too)."""
    return torch.tensor(
        [math.inf if r == "inf" else math.nan if r is None else float(r) for r in stored],
        dtype=torch.float64,
    )


def _estimated_by(method: str) -> str:
    """The sentence of a value a screen estimated with ``method`` (its estimator in words)."""
    return f"estimated by {method}, not intervened"


# Fewer checked candidates than this: no rank correlation (n/a), as for prompts.


def clopper_pearson_upper(successes: int, trials: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper confidence bound of a binomial proportion.

    The ``p`` with ``P[X <= successes | trials, p] = 1 - level``: the rate is below it
    with probability at least ``level``. ``0 / n`` gives ``1 - (1 - level) ** (1 / n)``
    (about ``3 / n`` at 95%); ``n / n`` gives 1; no trials give 1 (nothing is known).

    Args:
        successes: observed count, ``0 <= successes <= trials``.
        trials: number of draws.
        level: confidence level in (0, 1).

    Returns:
        The bound, a fraction in [0, 1].
    """
    successes = as_int(successes, "successes", minimum=0)
    trials = as_int(trials, "trials", minimum=0)
    if successes > trials:
        raise IntervError(f"successes ({successes}) must not exceed trials ({trials})")
    if not 0 < level < 1:
        raise IntervError(f"level must lie in (0, 1); got {level}")
    if trials == 0 or successes == trials:
        return 1.0
    tail = 1.0 - level
    if successes == 0:
        return 1.0 - tail ** (1.0 / trials)

    def cdf(p: float) -> float:  # P[X <= successes], summed in log space
        log_p, log_q = math.log(p), math.log1p(-p)
        terms = [
            math.lgamma(trials + 1)
            - math.lgamma(i + 1)
            - math.lgamma(trials - i + 1)
            + i * log_p
            + (trials - i) * log_q
            for i in range(successes + 1)
        ]
        top = max(terms)
        return math.exp(top) * sum(math.exp(term - top) for term in terms)

    low, high = successes / trials, 1.0  # cdf falls from >= 1 - level to 0 on this range
    for _ in range(100):
        middle = (low + high) / 2
        if cdf(middle) > tail:
            low = middle
        else:
            high = middle
    return high


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeometric_tail(observed: int, sample: int, population: int, marked: int) -> float:
    """``P[X <= observed]`` for ``X`` the marked items in a uniform sample of ``sample``
    drawn without replacement from ``population`` items of which ``marked`` are marked."""
    total = _log_choose(population, sample)
    terms = [
        _log_choose(marked, i) + _log_choose(population - marked, sample - i) - total
        for i in range(max(0, sample - (population - marked)), min(observed, marked, sample) + 1)
    ]
    if not terms:
        return 0.0
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def hypergeometric_upper(observed: int, sample: int, population: int, level: float) -> int:
    """One-sided upper confidence bound on the number of marked items in a finite
    ``population`` from ``observed`` marked ones in a uniform sample of ``sample`` without
    replacement: the largest ``D`` with ``P[X <= observed | D] > 1 - level`` (at least
    ``observed``; the whole unsampled rest when nothing is sampled)."""
    observed = as_int(observed, "observed", minimum=0)
    sample = as_int(sample, "sample", minimum=0)
    population = as_int(population, "population", minimum=0)
    if observed > sample or sample > population:
        raise IntervError(
            f"need observed <= sample <= population; got {observed}, {sample}, {population}"
        )
    if not 0 < level < 1:
        raise IntervError(f"level must lie in (0, 1); got {level}")
    low, high = observed, population - (sample - observed)  # the tail falls in between
    while low < high:
        middle = (low + high + 1) // 2
        if hypergeometric_tail(observed, sample, population, middle) > 1 - level:
            low = middle
        else:
            high = middle - 1
    return low


BOUNDS: tuple[str, ...] = ("rate", "any")
"""What the adaptive verification bounds: the miss *rate* (Clopper-Pearson, below
``alpha``), or *any* unchecked miss (finite-population, excluded at ``alpha``)."""

ESTIMATORS: tuple[str, ...] = ("attribution", "integrated", "gim", "hvp")
"""How a node screen (``run(screen=...)``) estimates: the gradient at the base run,
integrated gradients along the path to the interventions (``steps`` points), GIM's modified
backward, or the HVP correction (the second-order term along each intervention added)."""


@dataclass(frozen=True)
class Screen:
    """How a screen's estimates are checked: a frozen, printable value.

    Attributes:
        top_k: the number of candidates reported as the exact top-k; the first
            ``top_k`` by ``|estimate|`` are verified exactly.
        audit: the size of the uniform random sample of unverified candidates checked
            exactly (0: no audit, and then no miss-rate bound).
        alpha: stop verifying once the upper bound on the miss rate is below it; None
            verifies ``top_k`` once and stops.
        budget: the most exact evaluations (verified plus audited); None: no limit.
        step: how many more candidates each extra look verifies; None: ``top_k``.
        level: confidence level of the miss-rate bound and the rank-correlation
            interval.
        seed: seed of the audit's permutation and of the bootstrap.
        bound: what the adaptive verification bounds (:data:`BOUNDS`): ``"rate"``
            (default) the miss rate, ``"any"`` any unchecked candidate beating the k-th
            verified one (module docstring).
        estimator: how node screens (``run(screen=...)``) estimate (:data:`ESTIMATORS`):
            ``"attribution"`` (the gradient at the base run), ``"integrated"``
            (integrated gradients, ``steps`` points) or ``"gim"`` (the gradient at the base
            run by GIM's modified backward with its defaults, ``interv.engine.backward.GIM()``:
            no Taylor term) or ``"hvp"`` (Zhang & Wang's HVP correction: the gradient's estimate
            plus the second-order term ``1/2 delta^T H delta`` along each intervention's change
            ``delta``, a Hessian-vector product per intervention, with a reliability score
            :attr:`Audit.reliability`; :func:`interv.engine.screening.second_order_estimates`).
            Edge screens choose theirs by :func:`interv.circuits.discover`'s ``method``,
            ``gim`` and ``hvp``.
        steps: the integrated gradients' points (``"integrated"`` only, refused with another
            estimator; 1 is attribution).
        hvp_steps: the multi-step HVP estimate's segments (``"hvp"`` only; 1: the single HVP
            correction).
    """

    top_k: int = 20
    audit: int = 60
    alpha: float | None = 0.05
    budget: int | None = None
    step: int | None = None
    level: float = 0.95
    seed: int = 0
    bound: str = "rate"
    estimator: str = "attribution"
    steps: int = 5
    hvp_steps: int = 1

    def __post_init__(self) -> None:
        as_int(self.top_k, "Screen top_k", minimum=1)
        as_int(self.audit, "Screen audit", minimum=0)
        as_int(self.seed, "Screen seed")
        if self.alpha is not None:
            alpha = as_finite(self.alpha, "Screen alpha")
            if not 0 < alpha < 1:
                raise IntervError(f"Screen alpha must lie in (0, 1) or be None; got {alpha}")
        if self.budget is not None:
            as_int(self.budget, "Screen budget", minimum=1)
            if self.budget < self.top_k:
                raise IntervError(
                    f"Screen budget ({self.budget} exact evaluations) must be at least "
                    f"top_k ({self.top_k})"
                )
        if self.step is not None:
            as_int(self.step, "Screen step", minimum=1)
        level = as_finite(self.level, "Screen level")
        if not 0 < level < 1:
            raise IntervError(f"Screen level must lie in (0, 1); got {level}")
        if self.bound not in BOUNDS:
            raise IntervError(f"unknown Screen bound {self.bound!r}; choose one of {BOUNDS}")
        if self.estimator not in ESTIMATORS:
            raise IntervError(
                f"unknown Screen estimator {self.estimator!r}; choose one of {ESTIMATORS}"
            )
        as_int(self.steps, "Screen steps (integrated-gradient points)", minimum=1)
        as_int(self.hvp_steps, "Screen hvp_steps (the multi-step HVP's segments)", minimum=1)
        if self.steps != 5 and self.estimator != "integrated":
            raise IntervError(
                f"Screen steps ({self.steps}) applies with estimator='integrated' only; got "
                f"estimator={self.estimator!r}"
            )
        if self.hvp_steps != 1 and self.estimator != "hvp":
            raise IntervError(
                f"Screen hvp_steps ({self.hvp_steps}) applies with estimator='hvp' only; got "
                f"estimator={self.estimator!r}"
            )

    def estimate_method(self) -> str:
        """This screen's estimator in words (:attr:`estimator`, with ``steps`` or ``hvp_steps``
        where they apply), e.g. ``"attribution (first-order)"``: the name an
        :class:`Audit` records as its :attr:`~Audit.method`."""
        if self.estimator == "integrated":
            if self.steps == 1:  # one path point: the gradient at the base run
                return "integrated gradients with 1 path point (attribution, first-order)"
            return f"integrated gradients ({self.steps} path points)"
        if self.estimator == "gim":
            return "GIM's modified backward (gradient-based; no Taylor term)"
        if self.estimator == "hvp":
            if self.hvp_steps == 1:
                return "attribution with Zhang & Wang's HVP correction (second-order)"
            return (
                f"Zhang & Wang's multi-step HVP estimate ({self.hvp_steps} segments, "
                "second-order in each)"
            )
        return "attribution (first-order)"

    def estimate_sentence(self) -> str:
        """The sentence of a value this screen estimated and did not intervene on, e.g.
        ``"estimated by integrated gradients (5 path points), not intervened"``: its
        estimator (:meth:`estimate_method`) named."""
        return _estimated_by(self.estimate_method())

    def describe(self) -> str:
        """The checking rule in one sentence."""
        if self.alpha is None:
            stop = "once"
        elif self.bound == "rate":
            stop = (
                f"until the {self.level:.0%} upper bound on the miss rate is below {self.alpha:g}"
            )
        else:
            stop = (
                f"until an unchecked candidate beating the top-{self.top_k} threshold is "
                f"excluded at {self.alpha:g} (finite-population bound)"
            )
        budget = "" if self.budget is None else f" (at most {self.budget} exact evaluations)"
        estimate = {
            "attribution": "",
            "integrated": f"integrated-gradient estimates ({self.steps} points); ",
            "gim": "GIM-style estimates (the gradient of GIM's modified backward, its defaults); ",
            "hvp": "HVP-corrected estimates (the first-order estimate plus 1/2 delta^T H delta "
            "along each intervention, Zhang & Wang), with their reliability scores; "
            if self.hvp_steps == 1
            else f"multi-step HVP estimates ({self.hvp_steps} segments, Zhang & Wang), with "
            "their reliability scores; ",
        }[self.estimator]
        return (
            f"{estimate}the top {self.top_k} by |estimate| verified by exact intervention, "
            f"{self.audit} of the rest audited uniformly at random (seed {self.seed}), "
            f"verification extended {stop}{budget}"
        )


@dataclass(frozen=True, eq=False)
class Audit:
    """The outcome of :func:`verify_screen`: estimates, exact values where checked, the audit.

    Per-candidate fields are ``[n_candidates]`` in the caller's candidate order and in
    the metric's unit.

    Attributes:
        screen: the checking rule.
        estimates: float64 screen estimates (signed).
        exact: float64 exact effects where checked, NaN elsewhere.
        status: each candidate's status (:data:`EXACT_VERIFIED`, :data:`EXACT_AUDIT`,
            :data:`ESTIMATED`).
        order: candidate indices by descending ``|estimate|`` (ties by index).
        n_verified: how many candidates of ``order`` were verified.
        audited: indices of the audited candidates (unverified, uniformly drawn).
        threshold: the ``top_k``-th largest ``|exact|`` among verified candidates.
        misses: audited candidates with ``|exact| > threshold``.
        miss_bound: one-sided Clopper-Pearson upper bound of the miss rate at
            ``screen.level`` (0 when nothing is left unverified, 1 with no audit).
        looks: how many times the bound was computed.
        stopped_by: ``"bound"``, ``"budget"``, ``"all checked"`` or ``"one look"``.
        rank_agreement: Spearman's rho of estimate and exact over every checked
            candidate (NaN below :data:`interv.stats.MIN_ITEMS`).
        rank_interval: its percentile bootstrap interval over checked candidates.
        method: the screen's estimator, in words: a node screen's
            :meth:`Screen.estimate_method` (e.g. ``"attribution (first-order)"``), recorded
            with the audit so that a stored one reads back what it was made with.
        unchecked_bound: at ``screen.level``, at most this many unchecked candidates (not
            verified, not audited) have ``|exact| > threshold`` (finite-population bound
            from the audit; 0 when every candidate is checked); None for an audit stored
            before it was computed.
        reliability: ``[n_candidates]`` float64 Zhang & Wang's reliability score of each
            prompt-mean estimate, ``|second-order term| / |first-order term|`` at the base
            run, for ``Screen(estimator="hvp")`` (stored by :func:`scores_to_json`: ``inf``,
            only the first-order term 0, as ``"inf"``, NaN as null); None for other estimators
            and for a screen resumed from estimates stored without them.
    """

    screen: Screen
    estimates: torch.Tensor
    exact: torch.Tensor
    status: tuple[str, ...]
    order: torch.Tensor
    n_verified: int
    audited: torch.Tensor
    threshold: float
    misses: int
    miss_bound: float
    looks: int
    stopped_by: str
    rank_agreement: float
    rank_interval: tuple[float, float]
    method: str = field(default="a first-order screen")
    unchecked_bound: int | None = None
    reliability: torch.Tensor | None = None

    def estimate_sentence(self) -> str:
        """The sentence of the values this audit left estimated, its estimator named: for a
        node screen its :attr:`screen`'s :meth:`Screen.estimate_sentence`; for a stored audit
        the estimator it records (:attr:`method`), as written (audits stored before screens
        had estimators record ``"attribution (first-order)"``, which they were)."""
        return _estimated_by(self.method)

    @property
    def n_candidates(self) -> int:
        """Number of candidates screened."""
        return int(self.estimates.numel())

    @property
    def checked(self) -> torch.Tensor:
        """``[n_candidates]`` bool: True where the value is exact."""
        return ~self.exact.isnan()

    @property
    def n_checked(self) -> int:
        """Exact evaluations spent (verified plus audited)."""
        return int(self.checked.sum())

    @property
    def n_unverified(self) -> int:
        """Candidates outside the verified set (audited ones included)."""
        return self.n_candidates - self.n_verified

    @property
    def miss_rate(self) -> float:
        """``misses / audited`` (NaN with no audit)."""
        n = int(self.audited.numel())
        return self.misses / n if n else float("nan")

    @property
    def miss_bound_corrected(self) -> float:
        """The miss-rate bound at level ``1 - (1 - level) / looks`` (Bonferroni over looks)."""
        if self.n_unverified == 0:
            return 0.0
        level = 1 - (1 - self.screen.level) / max(self.looks, 1)
        return clopper_pearson_upper(self.misses, int(self.audited.numel()), level)

    @property
    def value(self) -> torch.Tensor:
        """``[n_candidates]`` the exact value where checked, the estimate elsewhere.

        Mixed on purpose for plotting only: read :attr:`status` beside it.
        """
        return torch.where(self.checked, self.exact, self.estimates)

    def top(self, k: int | None = None) -> torch.Tensor:
        """Indices of the ``k`` (default ``top_k``) largest ``|exact|`` among checked ones.

        Only exact values are ranked; an estimate never enters the ranking.
        """
        k = self.screen.top_k if k is None else as_int(k, "k", minimum=1)
        checked = self.checked.nonzero().flatten()
        if k > checked.numel():
            raise IntervError(
                f"k must be at most the {checked.numel()} checked candidates; got {k}"
            )
        ranked = torch.sort(-self.exact[checked].abs(), stable=True).indices
        return checked[ranked[:k]]

    def miss_rate_against(self, exact_all: torch.Tensor) -> float:
        """The true miss rate given every candidate's exact effect (a full sweep).

        The fraction of unverified candidates whose ``|exact|`` exceeds
        :attr:`threshold`; what the audit estimates.
        """
        exact_all = torch.as_tensor(exact_all, dtype=torch.float64).flatten()
        if exact_all.numel() != self.n_candidates:
            raise IntervError(
                f"exact_all must have one value per candidate ({self.n_candidates}); "
                f"got {exact_all.numel()}"
            )
        unverified = torch.ones(self.n_candidates, dtype=torch.bool)
        unverified[self.order[: self.n_verified]] = False
        if not unverified.any():
            return 0.0
        return float((exact_all[unverified].abs() > self.threshold).double().mean())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (NaN exact values as None); :meth:`from_dict` inverts it."""

        def floats(values: torch.Tensor) -> list[float | None]:
            return [None if math.isnan(v) else v for v in values.tolist()]

        return {
            "screen": dataclasses.asdict(self.screen),
            "estimates": self.estimates.tolist(),
            "exact": floats(self.exact),
            "status": list(self.status),
            "order": self.order.tolist(),
            "n_verified": self.n_verified,
            "audited": self.audited.tolist(),
            "threshold": self.threshold,
            "misses": self.misses,
            "miss_bound": self.miss_bound,
            "looks": self.looks,
            "stopped_by": self.stopped_by,
            "rank_agreement": None if math.isnan(self.rank_agreement) else self.rank_agreement,
            "rank_interval": [None if math.isnan(v) else v for v in self.rank_interval],
            "method": self.method,
            "unchecked_bound": self.unchecked_bound,
            "reliability": None if self.reliability is None else scores_to_json(self.reliability),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Audit:
        """The audit :meth:`to_dict` wrote, read through its schema (:class:`StoredAudit`:
        a damaged field is named)."""
        stored = parse(StoredAudit, data, "audit")
        return cls(
            screen=stored.screen,
            estimates=torch.tensor(stored.estimates, dtype=torch.float64),
            exact=torch.tensor(stored.exact, dtype=torch.float64),
            status=tuple(stored.status),
            order=torch.tensor(stored.order, dtype=torch.long),
            n_verified=stored.n_verified,
            audited=torch.tensor(stored.audited, dtype=torch.long),
            threshold=stored.threshold,
            misses=stored.misses,
            miss_bound=stored.miss_bound,
            looks=stored.looks,
            stopped_by=stored.stopped_by,
            rank_agreement=stored.rank_agreement,
            rank_interval=stored.rank_interval,
            method=stored.method,
            unchecked_bound=stored.unchecked_bound,
            reliability=None
            if stored.reliability is None
            else scores_from_json(stored.reliability),
        )

    def describe(self) -> str:
        """What was checked and what the audit says, in one sentence."""
        audited = int(self.audited.numel())
        bound = (
            "nothing left unverified"
            if self.n_unverified == 0
            else f"miss rate <= {self.miss_bound:.3g} ({self.screen.level:.0%} one-sided "
            f"Clopper-Pearson, {self.misses} of {audited} audited above the top-"
            f"{self.screen.top_k} threshold {self.threshold:.3g})"
        )
        if self.unchecked_bound is not None and self.n_unverified:
            bound += (
                f"; at most {self.unchecked_bound} of the "
                f"{self.n_unverified - audited} unchecked candidates above it "
                f"({self.screen.level:.0%} finite-population bound)"
            )
        return (
            f"{self.method}: {self.n_candidates} candidates screened; the {self.n_verified} "
            f"largest by |estimate| verified exactly and {audited} audited at random; "
            f"{bound}; stopped by {self.stopped_by}"
        )


def _rank_interval(
    estimates: torch.Tensor, exact: torch.Tensor, level: float, seed: int, n_bootstrap: int
) -> tuple[float, float]:
    n = estimates.numel()
    draws = bootstrap_indices(n, n_bootstrap, seed)
    return percentile_interval(spearman(estimates[draws], exact[draws]), level, n_items=n)


Count = Annotated[int, AtLeast(0)]


@dataclass(frozen=True)
class StoredAudit:
    """The schema of an audit as :meth:`Audit.to_dict` writes it (JSON null = NaN)."""

    screen: Screen
    estimates: Annotated[list[float], Finite()]
    exact: list[float]
    status: list[Literal["exact (verified)", "exact (audit)", "estimated"]]
    order: list[Count]
    n_verified: Count
    audited: list[Count]
    threshold: Annotated[float, Within(0.0)]
    misses: Count
    miss_bound: Annotated[float, Within(0.0, 1.0)]
    looks: Count
    stopped_by: Literal["bound", "budget", "all checked", "one look"]
    rank_agreement: Annotated[float, Within(-1.0, 1.0)]
    rank_interval: tuple[Annotated[float, Within(-1.0, 1.0)], Annotated[float, Within(-1.0, 1.0)]]
    method: str
    unchecked_bound: Count | None = None  # absent from audits stored before it existed
    reliability: list[StoredScore] | None = None  # HVP screens only

    def __post_init__(self) -> None:
        n = len(self.estimates)
        if self.reliability is not None and len(self.reliability) != n:
            raise IntervError(
                f"'reliability' holds {len(self.reliability)} entries for {n} candidates"
            )
        for name in ("exact", "status", "order"):
            if len(getattr(self, name)) != n:
                raise IntervError(
                    f"'{name}' holds {len(getattr(self, name))} entries for {n} candidates"
                )
        if self.n_verified > n or self.misses > len(self.audited):
            raise IntervError(
                f"n_verified {self.n_verified} or misses {self.misses} exceed the {n} "
                f"candidates or the {len(self.audited)} audited"
            )
        for name in ("order", "audited"):
            outside = [(k, i) for k, i in enumerate(getattr(self, name)) if i >= n]
            if outside:
                k, i = outside[0]
                raise IntervError(f"{name}[{k}] is {i}: outside the {n} candidates")
        for i, (state, value) in enumerate(zip(self.status, self.exact, strict=True)):
            if (state == ESTIMATED) != math.isnan(value):
                raise IntervError(
                    f"candidate {i} has status {state!r} and exact value {value!r}: an exact "
                    "status needs a value and an estimate has none"
                )


def verify_screen(
    screen: Screen,
    estimates: torch.Tensor | Sequence[float],
    evaluate: Callable[[torch.Tensor], torch.Tensor | Sequence[float]],
    *,
    method: str = "a first-order screen",
    known: torch.Tensor | None = None,
    n_bootstrap: int = 1000,
) -> Audit:
    """Verify a screen's top candidates and audit the rest, by exact evaluation.

    Args:
        screen: the checking rule (:class:`Screen`).
        estimates: ``[n_candidates]`` screen estimates, in the metric's unit.
        evaluate: ``evaluate(indices)`` -> the exact effects of those candidates
            (``[len(indices)]``); called once per look with only candidates not yet
            evaluated, so a caller can batch them into one stacked forward.
        method: the screen's name for the sentence.
        known: optional ``[n_candidates]`` exact values already computed (NaN where
            not), e.g. from an interrupted run; they are reused, never recomputed.
        n_bootstrap: resamples of the rank-correlation interval.

    Returns:
        An :class:`Audit`.
    """
    estimates = torch.as_tensor(estimates, dtype=torch.float64).flatten()
    n = estimates.numel()
    if n == 0:
        raise IntervError("verify_screen needs at least one candidate; got none")
    if not bool(estimates.isfinite().all()):
        bad = (~estimates.isfinite()).nonzero().flatten()[:5].tolist()
        raise IntervError(f"screen estimates must be finite; candidates {bad} are not")
    if screen.top_k > n:
        raise IntervError(f"Screen top_k must be at most the {n} candidates; got {screen.top_k}")
    exact = torch.full((n,), torch.nan, dtype=torch.float64)
    if known is not None:
        known = torch.as_tensor(known, dtype=torch.float64).flatten()
        if known.numel() != n:
            raise IntervError(f"known must have one value per candidate ({n}); got {known.numel()}")
        exact = known.clone()

    order = torch.sort(-estimates.abs(), stable=True).indices  # ties keep candidate order
    rest = order[screen.top_k :]
    generator = torch.Generator().manual_seed(screen.seed)
    permutation = rest[torch.randperm(rest.numel(), generator=generator)]
    budget = n if screen.budget is None else min(screen.budget, n)
    step = screen.top_k if screen.step is None else screen.step

    def fill(indices: torch.Tensor) -> None:
        missing = indices[exact[indices].isnan()]
        if missing.numel():
            values = torch.as_tensor(evaluate(missing), dtype=torch.float64).flatten()
            if values.numel() != missing.numel():
                raise IntervError(
                    f"evaluate returned {values.numel()} values for {missing.numel()} candidates"
                )
            if not bool(values.isfinite().all()):
                raise IntervError("evaluate returned a non-finite exact effect")
            exact[missing] = values

    n_verified = screen.top_k
    looks = 0
    while True:
        verified = order[:n_verified]
        in_verified = torch.zeros(n, dtype=torch.bool)
        in_verified[verified] = True
        room = max(budget - n_verified, 0)
        audited = permutation[~in_verified[permutation]][: min(screen.audit, room)]
        fill(torch.cat([verified, audited]))
        looks += 1
        threshold = float(exact[verified].abs().topk(screen.top_k).values.min())
        misses = int((exact[audited].abs() > threshold).sum())
        unverified = n - n_verified
        sampled = int(audited.numel())
        unchecked = (
            hypergeometric_upper(misses, sampled, unverified, screen.level) - misses
            if unverified
            else 0
        )
        if unverified == 0:
            bound, stopped = 0.0, "all checked"
            break
        bound = clopper_pearson_upper(misses, sampled, screen.level)
        if screen.alpha is None:
            stopped = "one look"
            break
        if screen.bound == "rate" and bound < screen.alpha:
            stopped = "bound"
            break
        if screen.bound == "any" and (
            unverified == sampled
            or hypergeometric_tail(misses, sampled, unverified, misses + 1) <= screen.alpha
        ):
            stopped = "bound"
            break
        if n_verified + int(audited.numel()) >= budget:
            stopped = "budget"
            break
        n_verified = min(n_verified + step, n, budget)

    # Only this run's verified and audited candidates count as checked: a known value
    # outside them (a full sweep passed in) is not part of the audit's design.
    in_audit = torch.zeros(n, dtype=torch.bool)
    in_audit[audited] = True
    exact[~(in_verified | in_audit)] = torch.nan
    checked = in_verified | in_audit
    names = (ESTIMATED, EXACT_AUDIT, EXACT_VERIFIED)
    codes = in_verified.long() * 2 + in_audit.long()
    status = tuple(names[code] for code in codes.tolist())
    x, y = estimates[checked], exact[checked]
    rho = float(spearman(x, y))  # n/a below the statistics' own minimum
    interval = _rank_interval(x, y, screen.level, screen.seed, n_bootstrap)
    return Audit(
        screen=screen,
        estimates=estimates,
        exact=exact,
        status=status,
        order=order,
        n_verified=n_verified,
        audited=audited,
        threshold=threshold,
        misses=misses,
        miss_bound=bound,
        looks=looks,
        stopped_by=stopped,
        rank_agreement=rho,
        rank_interval=interval,
        method=method,
        unchecked_bound=unchecked,
    )
