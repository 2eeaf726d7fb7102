"""Write .ci/test-durations.json from the ``--durations`` tables of a CI log (``bash .ci/run > log``).

The test sessions' scheduler (``orca.core.testing.fixtures``) hands the two test processes the
longest units of work first, by these numbers: a stale file only changes the order tests start in,
never what runs. Run it after a measured CI run: ``python3 .ci/durations.py ci.log``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S+)$")


def parse(text: str) -> dict[str, float]:
    """Seconds per test id (setup, call and teardown added up) from pytest's ``--durations`` lines."""
    seconds: dict[str, float] = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            seconds[match.group(2)] = round(seconds.get(match.group(2), 0.0) + float(match.group(1)), 2)
    return seconds


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    seconds = parse(Path(argv[0]).read_text(errors="replace"))
    out = Path(__file__).with_name("test-durations.json")
    out.write_text(json.dumps(dict(sorted(seconds.items())), indent=0) + "\n")
    print(f"{out}: {len(seconds)} tests, {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
