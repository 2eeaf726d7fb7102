"""Train a small CNN on scikit-learn's digits with the Orca PyTorch Estimator, then predict.

This is the whole job end to end, on the embedded local engine (no cluster, no downloads):

1. start Orca locally (Spark on 127.0.0.1; Ray starts when the first Ray worker is needed),
2. turn scikit-learn's 8x8 digit images into Spark DataFrames (an array column of 64 floats
   and a ``long`` label column), split into training and held-out test rows,
3. train data-parallel on 2 workers (``--backend ray``, ``spark`` or ``bigdl``),
4. evaluate and predict on the held-out DataFrame,
5. save the model and open the file again with plain ``torch.load(weights_only=True)``.

Run it with ``nox -s demo`` (or ``python examples/torch_digits.py --backend spark``).
It exits with status 1 if the test accuracy is not above 0.9. orca-torch's tests run its
``run()`` at a small size in CI (``packages/orca-torch/tests/test_examples.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from orca.core import init_orca_context, stop_orca_context
from orca.torch import Estimator

ACCURACY_TARGET = 0.9


class DigitsCNN(nn.Module):
    """A small CNN for 8x8 grey-scale digits. It takes the flat 64-float rows of the DataFrame's
    ``features`` column and reshapes them into 1x8x8 images itself.

    Defined in this script, it travels to the workers by value (cloudpickle): the workers need
    no copy of this file.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3, padding=1), nn.ReLU(),   # 32 x 8 x 8
            nn.Conv2d(32, 32, kernel_size=3, padding=1), nn.ReLU(),  # 32 x 8 x 8
            nn.MaxPool2d(2),                                         # 32 x 4 x 4
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x.view(-1, 1, 8, 8)))


def model_creator(config: dict) -> nn.Module:
    """Each worker builds its replica from this; the Estimator seeds it identically everywhere."""
    return DigitsCNN()


def optimizer_creator(model: nn.Module, config: dict) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=config.get("lr", 3e-3))


def digits_dataframes(spark, test_size: float = 0.2, seed: int = 0):
    """scikit-learn's 1797 digits as (train, test) Spark DataFrames: ``features`` (array<float>
    of 64 pixels scaled to [0, 1]) and ``label`` (long)."""
    import pandas as pd

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)   # (1797, 64), pixel values 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_size, random_state=seed, stratify=y)
    schema = "features array<float>, label long"

    def to_df(xs: np.ndarray, ys: np.ndarray):
        pdf = pd.DataFrame({"features": list(xs), "label": ys})
        return spark.createDataFrame(pdf, schema=schema).repartition(2)

    return to_df(x_train, y_train), to_df(x_test, y_test), (x_test, y_test)


def run(backend: str = "ray", workers: int = 2, epochs: int = 10, batch_size: int = 64) -> dict[str, float]:
    """The whole job; returns what it measured (accuracies, throughput, seconds).

    It starts a local Orca context and stops it at the end, unless one is running already (then it
    runs there and leaves it running: the package's tests run it so, in their session's context).
    """
    from orca.core import OrcaContext

    t_start = time.perf_counter()
    owned = OrcaContext.active() is None
    # 1. The local engine: one Spark "node" with as many cores as workers (one thread each).
    ctx = init_orca_context(cluster_mode="local", cores=workers, conf={"spark.ui.showConsoleProgress": "false"})
    spark = ctx.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"orca context ready in {time.perf_counter() - t_start:.1f} s")

    try:
        # 2. Data: Spark DataFrames that never pass through this driver process on their way to the workers.
        train_df, test_df, (x_test, y_test) = digits_dataframes(spark)
        n_train = train_df.count()
        print(f"data: {n_train} training rows, {test_df.count()} held-out rows; schema {train_df.schema.simpleString()}")

        # 3. The Estimator: the same model, optimizer and loss you would use in a plain torch loop.
        est = Estimator.from_torch(
            model=model_creator,
            optimizer=optimizer_creator,
            loss=nn.CrossEntropyLoss(),
            metrics=["accuracy"],
            backend=backend,
            workers_per_node=workers,
            config={"lr": 3e-3},
            use_tqdm=False,
        )
        cols = {"feature_cols": ["features"], "label_cols": ["label"]}

        try:
            t_fit = time.perf_counter()
            history = est.fit(train_df, epochs=epochs, batch_size=batch_size, validation_data=test_df, **cols)
            fit_s = time.perf_counter() - t_fit
            for stats in history:
                print(f"epoch {stats['epoch']:2d}: train_loss {stats['train_loss']:.4f}  val_loss {stats['val_loss']:.4f}"
                      f"  val_accuracy {stats['val_accuracy']:.4f}  ({stats['epoch_time_s']:.2f} s)")
            # Throughput: samples trained per second of epoch time once warmed up (epochs after the
            # first; each includes its validation pass), and over the whole fit call (which also counts
            # starting the workers, shipping the data to them and the first, warm-up epoch).
            samples = sum(stats["num_samples"] for stats in history)
            steady = history[1:] or history
            epoch_rate = sum(s["num_samples"] for s in steady) / sum(s["epoch_time_s"] for s in steady)
            fit_rate = samples / fit_s
            print(f"fit: {fit_s:.1f} s for {len(history)} epochs of {history[0]['num_samples']} samples")

            # 4. Evaluate and predict on the held-out DataFrame.
            result = est.evaluate(test_df, batch_size=batch_size, **cols)
            print(f"evaluate: {result}")

            from pyspark.ml.functions import vector_to_array
            from pyspark.sql import functions as F

            pred_df = est.predict(test_df, batch_size=batch_size, feature_cols=["features"])
            # `prediction` holds the 10 logits (an ml DenseVector); the class is the position of the
            # largest (1-based in Spark SQL).
            logits = vector_to_array("prediction")
            pred_df = pred_df.withColumn("predicted", (F.array_position(logits, F.array_max(logits)) - 1).cast("long"))
            pred_df.select("label", "predicted").show(5)
            pred_acc = pred_df.select(F.avg((F.col("predicted") == F.col("label")).cast("double"))).first()[0]

            # 5. Save: a plain torch state dict, which plain torch opens without Orca.
            with tempfile.TemporaryDirectory() as tmp:
                path = est.save(os.path.join(tmp, "digits_cnn.pt"))
                state = torch.load(path, weights_only=True)
                reloaded = DigitsCNN()
                reloaded.load_state_dict(state)
                reloaded.eval()
                with torch.no_grad():
                    logits = reloaded(torch.from_numpy(x_test))
                reloaded_acc = float((logits.argmax(1).numpy() == y_test).mean())
                print(f"saved {os.path.basename(path)} ({os.path.getsize(path) / 1024:.0f} KiB, {len(state)} tensors); "
                      f"reloaded with torch.load(weights_only=True): accuracy {reloaded_acc:.4f}")
        finally:
            est.shutdown()
    finally:
        if owned:
            stop_orca_context()
    return {"accuracy": float(result["val_accuracy"]), "predict_accuracy": float(pred_acc),
            "reloaded_accuracy": reloaded_acc, "test_rows": int(len(y_test)), "epoch_rate": epoch_rate,
            "fit_rate": fit_rate, "total_s": time.perf_counter() - t_start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["ray", "spark", "bigdl"], default="ray", help="where the workers run")
    parser.add_argument("--workers", type=int, default=2, help="data-parallel workers (default 2)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size, split across workers")
    args = parser.parse_args(argv)

    out = run(args.backend, args.workers, args.epochs, args.batch_size)
    accuracy = out["accuracy"]
    print()
    print(f"backend           : {args.backend}, {args.workers} workers")
    print(f"test accuracy     : {accuracy:.4f} (evaluate), {out['predict_accuracy']:.4f} (predict), "
          f"{out['reloaded_accuracy']:.4f} (reloaded)")
    print(f"training samples/s: {out['epoch_rate']:.0f} (epochs 2+), {out['fit_rate']:.0f} (whole fit call, with start-up)")
    print(f"total time        : {out['total_s']:.1f} s")
    if accuracy <= ACCURACY_TARGET:
        print(f"FAILED: test accuracy {accuracy:.4f} is not above {ACCURACY_TARGET}", file=sys.stderr)
        return 1
    print(f"OK: test accuracy above {ACCURACY_TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
