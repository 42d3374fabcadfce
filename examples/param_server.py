"""Parameter server with a Ray actor.

A ParameterServer actor holds a numpy weight vector. Worker tasks receive the
actor handle, pull the current weights, compute a deterministic "gradient",
and push it back. Updates are applied in a fixed order per round so the
final weights are deterministic.

    python examples/param_server.py
"""
import numpy as np

import ray

DIM = 5
NUM_WORKERS = 4
NUM_ROUNDS = 10
LEARNING_RATE = 0.1


@ray.remote
class ParameterServer:
    def __init__(self, dim):
        self.weights = np.zeros(dim, dtype=np.float64)
        self.updates = 0

    def get_weights(self):
        return self.weights

    def apply_gradients(self, *gradients):
        for g in gradients:
            self.weights -= LEARNING_RATE * g
            self.updates += 1
        return self.weights

    def num_updates(self):
        return self.updates


@ray.remote
def compute_gradient(ps, worker_index):
    # Gradient of 0.5 * ||w - target||^2 where each worker has its own target.
    weights = ray.get(ps.get_weights.remote())
    target = np.arange(DIM, dtype=np.float64) * (worker_index + 1)
    return weights - target


@ray.remote
def worker_push(ps, worker_index):
    weights = ray.get(ps.get_weights.remote())
    target = np.full(DIM, float(worker_index))
    grad = 0.01 * (weights - target)
    # Push directly to the actor and wait for it to be applied.
    ray.get(ps.apply_gradients.remote(grad))
    return worker_index


def main():
    ray.init(num_cpus=2)
    ps = ParameterServer.remote(DIM)

    for _ in range(NUM_ROUNDS):
        # All workers read the same weights for this round (the server is
        # only updated after every gradient has been computed).
        grad_refs = [compute_gradient.remote(ps, i) for i in range(NUM_WORKERS)]
        grads = ray.get(grad_refs)
        ray.get(ps.apply_gradients.remote(*grads))

    # Workers pushing to the actor themselves, one at a time.
    for i in range(NUM_WORKERS):
        ray.get(worker_push.remote(ps, i))

    weights = ray.get(ps.get_weights.remote())
    print("updates applied:", ray.get(ps.num_updates.remote()))
    print("final weights:", np.round(weights, 4).tolist())
    ray.shutdown()


if __name__ == "__main__":
    main()
