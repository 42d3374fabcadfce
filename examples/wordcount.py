"""Parallel word count (map-reduce) with Ray tasks.

    python examples/wordcount.py [path/to/file.txt]

Map tasks count words in chunks of lines; a reduce task merges the partial
counts. Prints the 10 most frequent words (ties broken alphabetically).
"""
import os
import re
import sys
from collections import Counter

import ray

NUM_CHUNKS = 4
WORD_RE = re.compile(r"[a-z']+")
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sample.txt")


@ray.remote
def map_count(lines):
    counts = Counter()
    for line in lines:
        for word in WORD_RE.findall(line.lower()):
            word = word.strip("'")
            if word:
                counts[word] += 1
    return dict(counts)


@ray.remote
def reduce_counts(*partials):
    total = Counter()
    for partial in partials:
        total.update(partial)
    return dict(total)


def chunk(lines, n):
    size = max(1, (len(lines) + n - 1) // n)
    return [lines[i:i + size] for i in range(0, len(lines), size)]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PATH
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()

    ray.init(num_cpus=2)
    partial_refs = [map_count.remote(c) for c in chunk(lines, NUM_CHUNKS)]
    # Refs passed as top-level arguments are resolved to values before the
    # reduce task runs.
    totals = ray.get(reduce_counts.remote(*partial_refs))

    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    print(f"lines: {len(lines)}, chunks: {len(partial_refs)}, "
          f"distinct words: {len(totals)}, total words: {sum(totals.values())}")
    for word, count in top:
        print(f"{word:>12} {count}")
    ray.shutdown()


if __name__ == "__main__":
    main()
