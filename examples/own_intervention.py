"""Your own intervention, run like a built-in: through interv.run, a sweep and a report.

    python examples/own_intervention.py [--out DIR]

``Interpolate`` moves one head's output a fraction ``alpha`` of the way from the
corrupted run's value to the clean run's (a graded denoising patch: alpha = 1 is the
full patch, alpha = 0 changes nothing). It declares where it writes, what it reads from
the other run and its semantics sentence; the engine does the rest (capturing the clean
activations once, stacking many copies in one forward, starting each forward at the
head's block).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass

import interv


@interv.register("interpolate")
@dataclass(frozen=True)
class Interpolate(interv.Intervention):
    """Head output ``z`` moved ``alpha`` of the way to the clean run's, in the corrupted run."""

    layer: int
    head: int
    alpha: float = 0.5
    family = "patch"
    reports_recovery = True

    @property
    def base_run(self) -> str:
        return "corrupted"

    def edits(self):
        return (interv.Site("z", self.layer, self.head),)

    def reads(self):
        return (interv.Read("clean", interv.Site("z", self.layer, self.head)),)

    def edit(self, site, activation, context):
        clean = context.read("clean", site)  # [n_prompts, pos, d_head], this head only
        return activation + self.alpha * (clean - activation)

    def describe(self, task=None):
        return (
            f"L{self.layer}H{self.head} output (z) moved {self.alpha:g} of the way from the "
            "corrupted run's value to the clean run's, in the corrupted run"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="sweep directory (default: a temporary one)")
    args = parser.parse_args()

    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=16, seed=0).tokenize(model)

    # 1. In Python, next to a built-in kind.
    interventions = [Interpolate(1, head, alpha) for head in range(4) for alpha in (0.5, 1.0)]
    interventions.append(interv.ActivationPatch("z", 1, 0))  # = Interpolate(1, 0, 1.0)
    result = interv.run(model, task, interventions)
    for recovery, sentence in zip(result.mean_recovery(), result.descriptions, strict=True):
        print(f"recovery {float(recovery):+.3f} (1 = clean, 0 = corrupted)  {sentence}")

    # 2. In a sweep: the registered name works in a config (a TOML file can also name an
    #    unregistered class by its import path, kind = "package.module:Interpolate", which
    #    interv imports only when allowed: --allow-import package.module, or allow_import=).
    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 16, "seed": 0},
        "sweep": {"interventions": [{"kind": "interpolate", "sites": "all_heads", "alpha": 0.5}]},
    }
    out = args.out or tempfile.mkdtemp(prefix="interv-own-")
    swept = interv.run_sweep(config, out, progress=False)

    # 3. In a report, beside the heads' concentration, with its own sentence.
    heads = interv.concentration(model, task, query_positions=[-1])
    report = interv.build_report(swept, heads, n_bootstrap=200)
    row = max(report.rows, key=lambda r: abs(r.effect_mean))
    print(f"sweep in {out}; largest effect: {row.label} {row.effect_mean:+.3f} logits")
    print(f"  semantics: {row.semantics}")
    print(f"  normalized entropy of that head: {row.concentration['normalized_entropy']:.3f}")


if __name__ == "__main__":
    main()
