"""``interv circuit``: find a circuit, check it exactly, and write it with its report.

``interv circuit MODEL (--task NAME | --pairs FILE.jsonl) --method eap|eap-ig [--steps M]
[--qk-fix] [--gim] [--hvp [--hvp-steps S] [--hvp-top K]] --top-k K --audit N [--alpha A]
[--stability RESAMPLES] [--select stability --pi PI --subsamples SUBSAMPLES [--connected]]
[--executor local|ray [--workers N]] --out DIR`` scores every edge with the screen (EAP,
or EAP-IG with ``M`` interpolation steps), patches the top ``K`` by ``|score|`` and ``N``
random others exactly (and more of the top until the miss-rate bound is below ``A``, 0.05
by default) (path patching from the corrupted run into the clean run), measures the
faithfulness curve at MIB's edge fractions, computes the concentration of every head (clean
run, answer position) beside the circuit, and writes into DIR:

- ``circuit.json`` (``CircuitResult.to_dict()``; with ``--stability RESAMPLES`` it holds the
  circuit's stability over ``RESAMPLES`` bootstrap resamples of the prompts, see
  :func:`interv.circuits.circuit_stability`; with ``--select stability`` the circuit chosen
  by stability selection, :func:`interv.circuits.stability_selection`, leaving out each IOI
  template in turn on ``--task ioi``; with ``--connected`` each subsample's circuit and the
  selection connect the input to the logits, ``stability_selection(..., connected=True)``),
  ``faithfulness.json``, ``mission.json``; with
  ``--select stability`` the curve is the stable circuit's (its selected edges first, then
  the ranking, under ``--convention interv``: ``faithfulness(..., selection=True)``), and
  the summary gives the faithfulness of its selected edges alone, at their own count;
- ``circuit.md`` (Markdown) and ``circuit.html`` (the self-contained page: the layered
  drawing, the curve, the mission link);
- with ``--convention mib`` on a graph of MIB's shape (``--kv ungrouped`` for a
  grouped-query model), ``mib_circuit.json``: the circuit in MIB's circuit-file format
  (:func:`interv.circuits.mib.write_mib_circuit`), which MIB's code evaluates to the same
  circuits at every size;
- the run's own store (``manifest.json``, ``scores.json``, ``exact.jsonl``,
  ``curves.jsonl``): every exact effect (the stability resamples' too) and every evaluated
  circuit of the faithfulness curves is stored as soon as it is computed, so the same
  command rerun after a kill resumes where it stopped and recomputes no exact work
  (:mod:`interv.circuits.store`);
  ``--executor ray --workers N`` runs the exact forwards on N Ray workers (the words of
  ``interv sweep``)
  (:class:`~interv.circuits.RayExecutor`) and is not part of what is discovered: a run
  resumes with or without it.

Every option is checked before the model loads. Progress goes to stderr (when it is a
terminal, unless ``--quiet``); stdout gets a short summary with units and statuses.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interv._checks import as_int
from interv.cli._vocabulary import METRICS, add_alpha, add_deprecated, add_quiet
from interv.cli.tasks import add_task_options, command_pairs
from interv.errors import IntervError

__all__ = ["register"]

METHODS = ("eap", "eap-ig")
COMPLEMENTS = ("corrupted", "mean")
CONVENTIONS = ("interv", "mib")
KV = ("grouped", "ungrouped")
_STAGES = ("scores", "exact effects", "faithfulness", "concentration", "report")


def _checked(args: argparse.Namespace) -> dict[str, Any]:
    """Every option checked without loading anything; the pairs read (data only)."""
    from interv.circuits.screens import check_hvp, check_method  # torch: on use (CLI start-up)
    from interv.circuits.selection import (  # torch: on use (CLI start-up)
        check_pi,
        check_select,
    )
    from interv.circuits.stability import check_resamples  # torch: on use (CLI start-up)
    from interv.engine.targets import METRICS  # torch: on use (CLI start-up)
    from interv.models.loading import check_model_spec  # torch: on use (CLI start-up)

    if args.method not in METHODS:
        raise IntervError(f"unknown --method {args.method!r}; choose one of {METHODS}")
    steps = (1 if args.method == "eap" else 5) if args.steps is None else args.steps
    steps = as_int(steps, "--steps (interpolation steps m)", minimum=1)
    if args.method == "eap" and steps != 1:
        raise IntervError(
            f"--steps {steps} applies to --method eap-ig only (EAP takes one gradient); "
            "drop it or pass --method eap-ig"
        )
    check_method(args.method, steps, args.qk_fix)  # what this build's screens can do
    check_hvp(args.hvp, args.hvp_steps, args.hvp_top, args.method, args.qk_fix, args.gim)
    top_k = as_int(args.top_k, "--top-k", minimum=1)
    as_int(args.workers, "--workers (Ray workers)", minimum=1)
    audit = as_int(args.audit, "--audit", minimum=0)
    for flag in ("n_edges", "batch_size"):
        if getattr(args, flag) is not None:
            as_int(getattr(args, flag), f"--{flag.replace('_', '-')}", minimum=1)
    if args.metric not in METRICS:
        raise IntervError(f"unknown --metric {args.metric!r}; choose one of {tuple(METRICS)}")
    if args.convention not in CONVENTIONS:
        raise IntervError(f"unknown --convention {args.convention!r}; choose one of {CONVENTIONS}")
    if args.kv not in KV:
        raise IntervError(f"unknown --kv {args.kv!r}; choose one of {KV}")
    if args.complement not in COMPLEMENTS:
        raise IntervError(f"unknown --complement {args.complement!r}; choose one of {COMPLEMENTS}")
    check_model_spec(args.model)
    pairs = command_pairs(args, metric=args.metric)  # read and checked; nothing loads
    if args.stability is not None:
        check_resamples(args.stability, pairs.n_pairs, "--stability")
    task_name = Path(args.pairs).stem if args.pairs is not None else args.task or args._task_default
    select = check_select(args.select, "--select")
    groups = None
    if select == "stability":
        check_pi(0.8 if args.pi is None else args.pi, "--pi")
        check_resamples(
            200 if args.subsamples is None else args.subsamples,
            pairs.n_pairs,
            "--subsamples",
            "half subsamples",
        )
        if args.pairs is None and task_name == "ioi":
            from interv.tasks.builtin import ioi_templates  # torch: on use (CLI start-up)

            groups = ioi_templates(pairs)  # leave-one-template-out
    else:
        given = [
            f for f, v in (("--pi", args.pi), ("--subsamples", args.subsamples)) if v is not None
        ]
        if args.connected:
            given.append("--connected")
        if given:
            raise IntervError(
                f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to "
                "--select stability only; got --select top"
            )
    return {
        "steps": steps,
        "top_k": top_k,
        "audit": audit,
        "pairs": pairs,
        "task": task_name,
        "groups": groups,
    }


def _identity(args: argparse.Namespace, checked: dict[str, Any], provenance: Any = None) -> dict:
    """The run's identity (:func:`interv.provenance.run_identity`, the one ``discover_in``
    writes): before the model loads, its settings and metric only (``provenance`` None)."""
    from interv.audit import Screen  # torch: on use (CLI start-up)
    from interv.circuits.store import circuit_settings  # torch: on use (CLI start-up)
    from interv.provenance import run_identity

    screen = Screen(top_k=checked["top_k"], audit=checked["audit"], alpha=args.alpha)
    settings = circuit_settings(
        args.method,
        checked["steps"],
        bool(args.qk_fix),
        screen,
        args.kv,
        selection=_chosen(args, checked),
        **_estimator(args),
    )
    return run_identity({"metric": args.metric} if provenance is None else provenance, settings)


def _run(args: argparse.Namespace) -> int:
    checked = _checked(args)  # before anything heavy is imported or loaded
    from interv._progress import stages  # torch: on use (CLI start-up)
    from interv.circuits.store import CircuitStore  # torch: on use (CLI start-up)

    show = False if args.quiet else None
    # the directory is claimed (or refused) before the model loads
    with (
        CircuitStore.open(args.out, _identity(args, checked)) as store,
        stages(_STAGES, enabled=show) as progress,
        _executor(args) as executor,
    ):
        circuit, curve, link, ran, resumed, own = _discover(
            args, checked, store, progress, executor
        )
    if not args.quiet:
        _summary(args.out, circuit, curve, link, ran, resumed, own)
    return 0


@contextlib.contextmanager
def _executor(args: argparse.Namespace) -> Iterator[Any]:
    """``--executor ray --workers N``: a :class:`~interv.circuits.RayExecutor` of N workers
    for the block."""
    if args.executor != "ray":
        yield None
        return
    from interv.circuits import RayExecutor  # torch: on use (CLI start-up)
    from interv.models.loading import load_model  # torch: on use (CLI start-up)

    with RayExecutor(functools.partial(load_model, args.model), n_workers=args.workers) as executor:
        yield executor


def _discover(
    args: argparse.Namespace, checked: dict[str, Any], store: Any, progress: Any, executor: Any
):
    """Load, discover (resuming from ``store``), evaluate and write every output (the exact
    forwards on ``executor``, None: here)."""
    from interv.analysis.concentration import concentration  # torch: on use (CLI start-up)
    from interv.audit import Screen  # torch: on use (CLI start-up)
    from interv.circuits import (  # torch: on use (CLI start-up)
        Graph,
        discover,
        edge_scores,
        faithfulness,
    )
    from interv.circuits.mission import mission_link  # torch: on use (CLI start-up)
    from interv.circuits.store import discover_resumable  # torch: on use (CLI start-up)
    from interv.engine.backward import check_gim  # torch: on use (CLI start-up)
    from interv.models.loading import load_model  # torch: on use (CLI start-up)
    from interv.provenance import Provenance
    from interv.report.circuit import circuit_markdown  # torch: on use (CLI start-up)
    from interv.report.circuit_page import circuit_page  # torch: on use (CLI start-up)

    screen = Screen(top_k=checked["top_k"], audit=checked["audit"], alpha=args.alpha)
    resumed = len(store.known())
    model = load_model(args.model)
    check_gim(model, args.gim)  # the model's family, before any work
    task = checked["pairs"].tokenize(model)
    graph = Graph.from_model(model, kv=args.kv)
    for flag, value in (("--top-k", checked["top_k"]), ("--n-edges", args.n_edges)):
        if value is not None and value > graph.n_edges:
            raise IntervError(
                f"{flag} {value} exceeds the graph's {graph.n_edges} edges ({graph.describe()})"
            )
    options = {
        "method": args.method,
        "steps": checked["steps"],
        "qk_fix": args.qk_fix,
        "kv": args.kv,
        **_estimator(args),
    }
    progress.start("scores")

    def scores() -> Any:
        return edge_scores(model, task, metric=args.metric, **options)

    def run_discovery(**resume: Any) -> Any:
        progress.start("exact effects")
        return discover(
            model,
            task,
            screen=screen,
            metric=args.metric,
            progress=progress.detail,
            batch_size=args.batch_size,
            executor=executor,
            stability=args.stability,
            **_selection(args, checked),
            **options,
            **resume,
        )

    expected = Provenance.of(model, task, metric=args.metric)
    store.confirm(_identity(args, checked, expected))  # the weights and prompts known now
    result, ran = discover_resumable(
        store,
        scores=scores,
        discover=run_discovery,
        expected=expected,
        finish=False,
    )
    progress.start("faithfulness")
    curve = faithfulness(
        model,
        task,
        result,
        complement=args.complement,
        greedy=args.greedy,
        convention=args.convention,
        metric=args.metric,
        batch_size=args.batch_size,
        executor=executor,
        resume=store.curve_resume,
    )
    own = _selection_faithfulness(args, model, task, result, executor, store)
    progress.start("concentration")
    heads = concentration(model, task, query_positions=[-1])
    progress.start("report")
    link = mission_link(result, heads, n=args.n_edges)
    store.write_output("circuit.json", json.dumps(result.to_dict()) + "\n")  # 70k edges: compact
    store.write_output("faithfulness.json", json.dumps(curve.to_dict(), indent=1) + "\n")
    store.write_output("mission.json", json.dumps(link.to_dict(), indent=1) + "\n")
    store.write_output("circuit.md", circuit_markdown(result, curve, link))
    store.write_output("circuit.html", circuit_page(result, curve, link))
    if args.convention == "mib" and graph.has_mlp and not graph.grouped:  # MIB's shape
        store.write_output("mib_circuit.json", _mib_text(result, model, link))
    store.finish()
    return result, curve, link, ran, resumed, own


def _selection_faithfulness(
    args: argparse.Namespace, model: Any, task: Any, result: Any, executor: Any, store: Any
) -> Any:
    """With ``--select stability``: faithfulness of the selected circuit at its own size (its
    ``k`` edges alone, not pruned, beside the full graph), else None (its circuits stored in
    ``store`` as they return)."""
    selection = result.selection
    if selection is None or not selection.selected:
        return None
    from interv.circuits import faithfulness  # torch: on use (CLI start-up)

    k, n = len(selection.selected), result.graph.n_edges
    return faithfulness(
        model,
        task,
        result,
        fractions=[k / n, 1.0],
        complement=args.complement,
        metric=args.metric,
        batch_size=args.batch_size,
        executor=executor,
        resume=store.curve_resume,
    )


def _connected(graph: Any, selected: tuple[int, ...]) -> int:
    """How many of the edges ``selected`` lie on a path of selected edges from the input to
    the logits (:func:`interv.circuits.mib.prune`): only they change the circuit's value."""
    import torch  # torch: on use (CLI start-up)

    from interv.circuits.mib import prune  # torch: on use (CLI start-up)

    kept = torch.zeros(graph.n_edges, dtype=torch.bool)
    kept[list(selected)] = True
    return int(prune(graph, kept).sum())


def _estimator(args: argparse.Namespace) -> dict[str, Any]:
    """The screen's GIM and HVP options, as ``edge_scores`` and ``circuit_settings`` take them."""
    return {"gim": args.gim, "hvp": args.hvp, "hvp_steps": args.hvp_steps, "hvp_top": args.hvp_top}


def _mib_text(result: Any, model: Any, link: Any) -> str:
    """The circuit as MIB's circuit file (:func:`interv.circuits.mib.write_mib_circuit`;
    ``in_graph``: the mission link's circuit size)."""
    import tempfile

    from interv.circuits.mib import write_mib_circuit  # torch: on use (CLI start-up)

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "mib_circuit.json"
        write_mib_circuit(path, result, d_model=int(model.cfg.d_model), n_edges=link.circuit_size)
        return path.read_text()


def _chosen(args: argparse.Namespace, checked: dict[str, Any]) -> dict[str, Any] | None:
    """The stability selection in the run's identity (None for the top selection); with
    ``--connected`` its ``select`` is ``"stability-connected"`` (a plain selection's identity
    is as before)."""
    if args.select != "stability":
        return None
    selection = _selection(args, checked)
    q = checked["top_k"] if selection["q"] is None else selection["q"]
    return {
        "select": "stability-connected" if args.connected else "stability",
        "pi": selection["pi"],
        "q": q,
        "subsamples": selection["resamples"],
    }


def _selection(args: argparse.Namespace, checked: dict[str, Any]) -> dict[str, Any]:
    """``discover``'s selection arguments: the circuit of ``--n-edges`` (else ``K``) edges per
    subsample, the IOI templates left out in turn."""
    if args.select != "stability":
        return {}
    return {
        "select": "stability",
        "pi": 0.8 if args.pi is None else args.pi,
        "resamples": 200 if args.subsamples is None else args.subsamples,
        "q": args.n_edges,
        "groups": checked["groups"],
        "connected": args.connected,
    }


def _summary(
    out: str, circuit: Any, curve: Any, link: Any, ran: int, resumed: int, own: Any = None
) -> None:
    from interv.report.circuit import interval_cell  # torch: on use (CLI start-up)

    status = circuit.status
    counts = {s: status.count(s) for s in ("exact (verified)", "exact (audit)", "estimated")}
    unit = circuit.unit
    again = f"; {resumed} stored by an earlier run were reused" if resumed else ""
    print(
        f"circuit written to {out}/ (circuit.html, circuit.md, circuit.json, faithfulness.json, "
        f"mission.json): {circuit.model_name} on {circuit.task_name}, {len(status)} edges, "
        f"{counts['exact (verified)']} exact (verified), {counts['exact (audit)']} exact "
        f"(audit), {counts['estimated']} estimated; {ran} exact effects computed by this run"
        f"{again}"
    )
    print(f"semantics: {circuit.sentence}")
    stability = circuit.stability
    if stability is not None:
        sizes = ", ".join(
            f"top-{size} {mean:.2f} ({interval_cell((low, high), stability.n_prompts)})"
            for size, mean, low, high in zip(
                stability.sizes, stability.mean, stability.low, stability.high, strict=True
            )
        )
        print(f"stability (Jaccard with the full-sample circuit): {sizes} ({stability.sentence})")
    selection = circuit.selection
    if selection is not None:
        labels = ", ".join(e.label for e in selection.edges()[:10])
        more = f", ... ({len(selection.selected)} in all)" if len(selection.selected) > 10 else ""
        print(f"stable circuit: {selection!r}: {labels or 'no edge'}{more} ({selection.sentence})")
    if own is not None and selection is not None:
        k = own.n_edges_kept[0]
        print(
            f"faithfulness of the stable circuit's {k} edges: {_fmt(own.mean[0])} "
            f"({interval_cell((own.low[0], own.high[0]), selection.n_prompts)}); "
            f"{_connected(circuit.graph, selection.selected)} of them connect the input to the "
            "logits through selected edges (the others change no circuit's value: their "
            f"sender reads only patched inputs or their receiver reaches the logits only "
            f"through patched edges) ({own.sentence})"
        )
    print(f"faithfulness: CPR {_fmt(curve.cpr)}, CMD {_fmt(curve.cmd)} ({curve.sentence})")
    top = link.circuit_heads[:5]
    if top:
        print(f"circuit heads (strength = summed |exact effect| of their circuit edges, {unit}):")
        for head in top:
            c = head.concentration
            print(
                f"  {head.label}: strength {head.strength:.4g}; normalized entropy "
                f"{_fmt(c['normalized_entropy'])}, sink mass {_fmt(c['sink_mass'])}, "
                f"contribution norm {_fmt(c['contribution_norm'])}"
            )
    parked = ", ".join(link.parked_outside) or "none"
    print(f"concentrated, sink-parked heads outside the circuit: {parked}")


def _fmt(value: Any) -> str:
    return "n/a" if value is None or value != value else f"{value:.4g}"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``circuit`` command to the ``interv`` parser."""
    parser = subparsers.add_parser(
        "circuit",
        help="find a circuit (EAP / EAP-IG), verify it exactly, audit the rest, write a report",
        description=(
            "Score every edge with EAP or EAP-IG, patch the top K and N random others exactly "
            "(path patching from the corrupted run into the clean run), measure the "
            "faithfulness curve, put the circuit's heads beside their concentration and "
            "write it all to DIR. Rerunning the same command resumes an interrupted run."
        ),
    )
    parser.add_argument("model", help="model spec for interv.load_model, e.g. induction-2l")
    add_task_options(parser, default_task="induction", n_pairs_default=8)
    parser.add_argument("--seed", type=int, default=0, help="seed of the task (default: 0)")
    parser.add_argument(
        "--method", default="eap", choices=METHODS, help="edge scores: eap (default) or eap-ig"
    )
    parser.add_argument("--steps", type=int, default=None, help="EAP-IG steps m >= 1 (default 5)")
    parser.add_argument(
        "--qk-fix", action="store_true", help="AtP*'s exact softmax for query/key edges"
    )
    parser.add_argument(
        "--gim", action="store_true", help="GIM's modified backward (its defaults) for the screen"
    )
    parser.add_argument(
        "--hvp", action="store_true", help="Zhang & Wang's HVP correction of the EAP screen"
    )
    parser.add_argument("--hvp-steps", type=int, default=1, help="multi-step HVP segments")
    parser.add_argument("--hvp-top", type=int, default=None, help="HVP on the top K edges only")
    parser.add_argument(
        "--metric",
        default="logit_diff",
        choices=METRICS,
        help="target metric (default: logit_diff)",
    )
    parser.add_argument("--top-k", type=int, default=20, help="edges verified exactly (default 20)")
    add_deprecated(parser, "--verify-top", dest="top_k", new="--top-k", type=int)
    parser.add_argument(
        "--audit", type=int, default=60, help="random other edges checked exactly (default 60)"
    )
    add_alpha(parser)
    parser.add_argument(
        "--stability",
        type=int,
        default=None,
        metavar="RESAMPLES",
        help="find the circuit again on RESAMPLES bootstrap resamples of the prompts (Jaccard, "
        "stable edges; default: not computed)",
    )
    parser.add_argument(
        "--select",
        default="top",
        help="how the circuit is chosen: top (default: the top edges of the ranking) or "
        "stability (also: the edges in the top --n-edges of at least --pi of --subsamples half "
        "subsamples of the prompts, with a bound on expected false edges)",
    )
    parser.add_argument(
        "--pi",
        type=float,
        default=None,
        metavar="PI",
        help="--select stability: inclusion-frequency threshold in (0.5, 1] (default 0.8)",
    )
    parser.add_argument(
        "--subsamples",
        type=int,
        default=None,
        metavar="SUBSAMPLES",
        help="--select stability: half subsamples of the prompts (default 200)",
    )
    parser.add_argument(
        "--connected",
        action="store_true",
        help="--select stability: each subsample's circuit is the edges connecting the input "
        "to the logits in the smallest top of its ranking holding at least --n-edges of them, "
        "and the selection is pruned to its connected edges (default: the top --n-edges, "
        "ranked one at a time)",
    )
    parser.add_argument(
        "--n-edges",
        type=int,
        default=None,
        help="circuit size for the mission link and, with --select stability, per subsample "
        "(default: TOP_K, every edge exact)",
    )
    parser.add_argument(
        "--complement",
        default="corrupted",
        choices=COMPLEMENTS,
        help="what fills the edges outside a circuit: corrupted (default) or mean",
    )
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="faithfulness of greedy circuits grown from the logits (default: the top edges)",
    )
    parser.add_argument(
        "--convention",
        default="interv",
        choices=CONVENTIONS,
        help="faithfulness curve sizes: interv (default: max(1, round(p N)) edges) or mib "
        "(MIB's int(p N) edges, pruned to those connecting the input to the logits)",
    )
    parser.add_argument(
        "--kv",
        default="grouped",
        help="a grouped-query model's key/value edges: grouped (default: per key/value head) "
        "or ungrouped (MIB's graph: per query head, its N and circuit file)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="edges (or circuits) per stacked exact forward (default: by memory)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the output directory")
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="patch the exact edges, the stability resamples' edges and the faithfulness "
        "curve's circuits in this process (default) or on Ray workers (needs interv[ray]); the "
        "same numbers and directory either way, which resumes with either",
    )
    parser.add_argument("--workers", type=int, default=2, help="number of Ray workers (default: 2)")
    add_quiet(parser)
    parser.set_defaults(handler=_run)
