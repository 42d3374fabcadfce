"""Torch tensors as values: what a task and the driver get back from ``ray.put`` of a state
dict (dtypes, shapes, strides of views and transposes, ``requires_grad``, empty and small
tensors): a writable tensor of the reader's own, whose writes never reach the stored object
nor another reader; views of one tensor put in one value share nothing after the trip."""
import ray
import torch


def describe(state):
    return {k: (str(t.dtype), tuple(t.shape), t.stride(), t.requires_grad, float(t.detach().float().sum()))
            for k, t in state.items()}


@ray.remote
def reader(state, index):
    before = describe(state)
    state["weight"][0] = 100.0 + index  # a write of this reader's own
    state["small"][0] = -1
    shares = state["view"].untyped_storage().data_ptr() == state["weight"].untyped_storage().data_ptr()
    return before, float(state["weight"][0]), shares


@ray.remote
class Trainer:
    def load(self, state):
        return float(state["weight"][1]), describe(state) == describe(state)


def main():
    ray.init(num_cpus=2)
    weight = torch.arange(2 * 1024 * 1024, dtype=torch.float32)  # 8 MB: shared memory
    state = {"weight": weight, "view": weight[10:20], "transposed": torch.ones(300, 200).t(),
             "bf16": torch.ones(7, dtype=torch.bfloat16), "grad": torch.ones(3, requires_grad=True),
             "empty": torch.empty(0), "small": torch.tensor([1, 2, 3]), "int8": torch.full((5,), 3, dtype=torch.int8)}
    ref = ray.put(state)
    results = ray.get([reader.remote(ref, i) for i in range(2)])
    for before, wrote, shares in results:
        print("task saw the state as put:", before == describe(state), "its write:", wrote, "view shares:", shares)
    for key, value in sorted(results[0][0].items()):
        print(" ", key, value)
    again = ray.get(ref)
    print("stored object unchanged:", float(again["weight"][0]), int(again["small"][0]))
    again["weight"][0] = 7.0
    print("the driver's copy is its own:", float(ray.get(ref)["weight"][0]))
    trainers = [Trainer.remote() for _ in range(2)]
    print("actors:", ray.get([t.load.remote(ref) for t in trainers]))
    print("done")


if __name__ == "__main__":
    main()
