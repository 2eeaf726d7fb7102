"""The repository's examples for orca-torch: examples/quickstart.py's job runs and predicts the
true y; examples/torch_digits.py (the README's main job) learns the digits at a small size."""

import runpy

import pytest

from orca.core.testing.clusters import EXAMPLES, quickstart_test

test_the_quickstart_example_runs = quickstart_test("torch")


@pytest.mark.timeout(300)
def test_the_digits_example_learns_predicts_and_saves_a_model_plain_torch_opens(orca_context):
    """examples/torch_digits.py (the README's main job) at a small size, in the session's context:
    3 epochs on 2 Ray workers. Evaluate, the DataFrame prediction and the saved file reopened
    by plain torch all give the same held-out accuracy, above the script's own target."""
    path = EXAMPLES / "torch_digits.py"
    out = runpy.run_path(str(path), run_name="torch_digits")["run"](backend="ray", workers=2, epochs=3)
    assert out["test_rows"] == 360, out
    assert out["accuracy"] > 0.9, out
    assert out["predict_accuracy"] == pytest.approx(out["accuracy"], abs=1e-9), out
    assert out["reloaded_accuracy"] == pytest.approx(out["accuracy"], abs=1e-9), out


@pytest.mark.timeout(300)
def test_the_tune_example_searches_learning_rates_and_the_best_learns_the_function(orca_context):
    """examples/tune_search.py at a small size: two learning rates, 2 epochs each, a 1-worker trial
    at a time. Every trial reports every epoch; the larger rate learns y = x @ w + 0.25 (val_loss
    near the noise's 0.0025) and is the best; the tiny one has barely moved."""
    path = EXAMPLES / "tune_search.py"
    out = runpy.run_path(str(path), run_name="tune_search")["run"](lrs=(1e-4, 1e-1), epochs=2, workers=1)
    assert out["epochs"] == {1e-4: 2, 1e-1: 2}, out
    assert out["best_lr"] == 1e-1, out
    assert out["best_val_loss"] < 0.01, out
    assert out["val_loss"][1e-4] > 1.0, out
