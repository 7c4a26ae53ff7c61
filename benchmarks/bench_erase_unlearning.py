"""Performance anchor of erase-unlearning: CPU time per unlearning request, ERASE against SISA.

At n = 1200 MiniLM-embedded intent utterances (the quick preset's first seed), each round sends the
same 5 deletion requests to ERASE (certificate, or recluster when it fails) and to SISA (4 shards x
4 slices of the MLP head, retraining from the slice checkpoint), plus the certificate check alone
on 5 other points. Target: ERASE / SISA <= 0.01 (SISA >= 100x slower per request).
"""

from __future__ import annotations

import numpy as np

from companion import bench, runtime
from companion.papers import erase_unlearning as eu
from companion.papers.erase_unlearning import qkmeans as qk, sisa
from companion.papers.erase_unlearning.erase import Erase, projection

PER_ROUND = 5


def main(rounds: int = 7) -> None:
    """Build ERASE and SISA on the same data and time equal batches of unlearning requests."""
    runtime.limit_threads()
    params = eu.Params.resolve("quick", seeds=1)
    task = eu.synthetic_tasks(params)[0][0]
    n, dim = task.E_train.shape
    ids = np.arange(n)
    erase = Erase(task.E_train @ projection(dim, params.proj_dim, 0), ids, params.qk_config(n),
                  np.random.default_rng(5))
    head = sisa.HeadConfig(128, task.n_classes, params.ft_epochs)
    shards = sisa.Sisa(task.E_train, task.y_train, ids, params.sisa_shards, params.sisa_slices, head, 0)
    stream = iter(np.random.default_rng(8).permutation(n).reshape(-1, PER_ROUND))
    probe = iter(np.random.default_rng(9).permutation(n).reshape(-1, PER_ROUND))
    batch: dict[str, np.ndarray] = {}

    def ours() -> None:
        batch["now"] = next(stream)
        for pid in batch["now"]:
            erase.unlearn(int(pid))

    def certificate_only() -> None:
        for pid in next(probe):
            if erase.state.alive[pid]:
                qk.certificate(erase.state, qk.row_of(erase.state, int(pid)))

    def reference() -> None:
        for pid in batch["now"]:
            shards.unlearn(int(pid))

    out = bench.compare({"ours": ours, "certificate only": certificate_only, "reference": reference},
                        reference="reference", rounds=rounds, clock="cpu")
    for comp in out.values():
        print(comp.line())
    path = bench.record("erase-unlearning", out["ours"], target=0.01, direction="<=",
                        extra={"certificate only": out["certificate only"]},
                        sizes={"n_train": n, "embedding_dim": dim, "proj_dim": params.proj_dim,
                               "k": params.k_shots, "requests_per_round": PER_ROUND,
                               "sisa": f"{params.sisa_shards} shards x {params.sisa_slices} slices, "
                                       f"{params.ft_epochs} epochs"})
    print(f"wrote {path.name}")


if __name__ == "__main__":
    main()
