"""Parts 3 and 4 (data path, torch batch inference) in one process, for the quick run.

The full run gives each part a fresh process (``datapath.py``, ``inference.py``); the quick run
shares one local Orca context between them, which saves a cold Spark start-up (both parts
measure steady-state passes after warm-up calls, so the sharing does not change what they
measure; the inference part's first-call times then start from a Spark that is already up).

    python benchmarks/data_inference.py --data-rows 2048 --inference-rows 4096 --scales 1,4 \
        --repeats 1 --out result.json

Writes ``{"data": <datapath result>, "inference": <inference result>}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import datapath
import inference
from harness import local_spark


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-rows", type=int, required=True)
    p.add_argument("--inference-rows", type=int, required=True)
    p.add_argument("--scales", default="1,4")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    from orca.core import stop_orca_context

    scales = [int(v) for v in a.scales.split(",")]
    spark = local_spark(datapath.SPARK_CONF)
    try:
        res = {"data": datapath.measure(spark, a.data_rows, scales, a.repeats),
               "inference": inference.measure(spark, a.inference_rows, scales, a.repeats)}
    finally:
        stop_orca_context()
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
