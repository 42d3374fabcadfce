"""Monte Carlo estimate of pi using Ray tasks.

Each task draws points with its own fixed seed, so the printed estimate is
deterministic across runs.

    python examples/pi.py
"""
import random

import ray

NUM_TASKS = 8
SAMPLES_PER_TASK = 50_000


@ray.remote
def count_inside(seed, num_samples):
    rng = random.Random(seed)
    inside = 0
    for _ in range(num_samples):
        x = rng.random()
        y = rng.random()
        if x * x + y * y <= 1.0:
            inside += 1
    return inside


def main():
    ray.init(num_cpus=2)
    refs = [count_inside.remote(seed, SAMPLES_PER_TASK) for seed in range(NUM_TASKS)]
    counts = ray.get(refs)
    total = NUM_TASKS * SAMPLES_PER_TASK
    inside = sum(counts)
    print(f"tasks: {NUM_TASKS}, samples: {total}")
    print(f"per-task inside counts: {counts}")
    print(f"pi ~= {4.0 * inside / total:.6f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
