"""A Ray Tune search over an Orca Estimator (orca.core.tune) on the test session's real local Ray:
4 trials of the numpy toy framework, each trial's Orca workers inside its placement group, every
epoch reported, and each trial's numbers exactly those of a plain Orca fit with its config."""

import sys
from typing import Any

import cloudpickle
import numpy as np
import pytest
from test_toy_framework import NUM_FEATURES, NumpyEstimator

from orca.core.tune import orca_trainable, trial_resources

pytestmark = pytest.mark.timeout(600)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(autouse=True)
def _by_value(ray_runtime: Any) -> None:
    """Tune pickles the trainable with Ray's own cloudpickle: the test modules travel by value there too."""
    import ray.cloudpickle

    for name in (__name__, "test_toy_framework"):
        ray.cloudpickle.register_pickle_by_value(sys.modules[name])

EPOCHS = 3
LRS = [0.01, 0.03, 0.1, 0.3]


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(48, NUM_FEATURES))
    return x, x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5


def _make(config: dict[str, Any]) -> NumpyEstimator:
    return NumpyEstimator.from_numpy(lr=config["lr"], backend="ray", workers_per_node=1)


def test_a_four_trial_search_reports_every_epoch_exactly_as_a_plain_fit(ray_runtime: Any, tmp_path: Any) -> None:
    from ray import tune

    x, y = _data()
    trainable = orca_trainable(_make, (x, y), epochs=EPOCHS, batch_size=16, validation_data=(x, y), shuffle=False)
    tuner = tune.Tuner(
        tune.with_resources(trainable, trial_resources(workers=1)),
        param_space={"lr": tune.grid_search(LRS)},
        tune_config=tune.TuneConfig(metric="val_loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="orca", verbose=0))
    results = tuner.fit()
    assert len(results) == 4 and not results.errors, results.errors
    reported = {r.config["lr"]: r.metrics_dataframe for r in results}
    assert sorted(reported) == LRS
    for lr, frame in reported.items():
        assert frame["epoch"].tolist() == [1, 2, 3], frame
        plain = NumpyEstimator.from_numpy(lr=lr, backend="ray", workers_per_node=1)
        try:
            hist = plain.fit((x, y), epochs=EPOCHS, batch_size=16, validation_data=(x, y), shuffle=False)
        finally:
            plain.shutdown()
        np.testing.assert_allclose(frame["val_loss"], [h["val_loss"] for h in hist], rtol=1e-12)
        np.testing.assert_allclose(frame["loss"], [h["loss"] for h in hist], rtol=1e-12)
    best = results.get_best_result()
    assert best.config["lr"] == min(reported, key=lambda lr: reported[lr]["val_loss"].iloc[-1])
    # each epoch left a checkpoint holding Orca's data-only file, which load_checkpoint reads
    with best.checkpoint.as_directory() as folder:
        fresh = NumpyEstimator.from_numpy(backend="ray", workers_per_node=1)
        fresh.load_checkpoint(f"{folder}/orca.ckpt")
        assert fresh.epochs_trained == EPOCHS


def test_a_trial_asking_more_workers_than_its_bundles_is_told_how_to_size_it(ray_runtime: Any, tmp_path: Any) -> None:
    from ray import tune

    x, y = _data()

    def make(config: dict[str, Any]) -> NumpyEstimator:
        return NumpyEstimator.from_numpy(backend="ray", workers_per_node=2)

    tuner = tune.Tuner(tune.with_resources(orca_trainable(make, (x, y), epochs=1), trial_resources(workers=1)),
                       run_config=tune.RunConfig(storage_path=str(tmp_path), name="orca", verbose=0))
    (result,) = tuner.fit()
    assert result.error is not None
    assert "trial_resources(workers=2)" in str(result.error), str(result.error)
