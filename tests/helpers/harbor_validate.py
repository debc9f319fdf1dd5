"""Load an exported Harbor job folder with Harbor's own models; print what they read, as JSON.

Run with the Python of a Harbor 0.26 environment (never cairn's)::

    "$(dirname "$CAIRN_HARBOR")/python" tests/helpers/harbor_validate.py OUT_DIR

Validates ``config.json`` (``JobConfig``), ``result.json`` (``JobResult``), every trial's
``config.json`` (``TrialConfig``) and ``result.json`` (``TrialResult``) and every
``artifacts/manifest.json`` (``ArtifactManifest``); recomputes ``JobStats`` (and pass@k) from
the loaded trials with Harbor's own code. Exits 1 with the validation error on the first failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> int:
    """Validate ``out``; print ``{job, stats_recomputed, trials}`` as JSON on stdout."""
    import harbor
    from harbor.models.job.config import JobConfig
    from harbor.models.job.result import JobResult, JobStats
    from harbor.models.trial.artifact_manifest import ArtifactManifest
    from harbor.models.trial.config import TrialConfig
    from harbor.models.trial.result import TrialResult
    from harbor.utils.pass_at_k import compute_pass_at_k_by_evals

    checked: list[str] = []
    JobConfig.model_validate_json((out / "config.json").read_text())
    checked.append("config.json")
    job = JobResult.model_validate_json((out / "result.json").read_text())
    checked.append("result.json")
    trials = []
    for d in sorted(p for p in out.iterdir() if p.is_dir()):
        TrialConfig.model_validate_json((d / "config.json").read_text())
        checked.append(f"{d.name}/config.json")
        tr = TrialResult.model_validate_json((d / "result.json").read_text())
        checked.append(f"{d.name}/result.json")
        for m in sorted(d.rglob("artifacts/manifest.json")):
            ArtifactManifest.model_validate({"entries": json.loads(m.read_text())})
            checked.append(str(m.relative_to(out)))
        trials.append(tr)
    stats = JobStats.from_trial_results(
        trials, n_total_trials=job.n_total_trials, n_retries=job.stats.n_retries
    )
    for key, pass_at_k in compute_pass_at_k_by_evals(trials).items():
        stats.evals[key].pass_at_k = pass_at_k
    print(
        json.dumps(
            {
                "harbor_version": getattr(harbor, "__version__", None),
                "checked": checked,
                "job": json.loads(job.model_dump_json()),
                "stats_recomputed": json.loads(stats.model_dump_json()),
                "trials": [json.loads(t.model_dump_json()) for t in trials],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
