"""One Markdown table of every strategy's final accuracy and dropped replies, from the
``<output-dir>/<strategy>/result.json`` files the ServerApp writes.

    python summary.py outputs > outputs/summary.md
"""

import json
import sys
from pathlib import Path


def main(folder: str) -> None:
    print("| strategy | accuracy | replies dropped (all rounds) |")
    print("|---|---|---|")
    for path in sorted(Path(folder).glob("*/result.json")):
        result = json.loads(path.read_text())
        dropped = sorted({reason.split(":")[0] for reasons in result["rejected"].values() for reason in reasons})
        print(f"| {result['strategy']} | {result['accuracy']:.3f} | {', '.join(dropped) or '-'} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs")
