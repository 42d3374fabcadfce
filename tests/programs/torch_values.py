"""Torch tensors as values: what a task and the driver get back from ``ray.put`` of a state
dict (dtypes, shapes, strides of views and transposes, ``requires_grad``, empty and small
tensors): a writable tensor of the reader's own, whose writes never reach the stored object
nor another reader; views of one tensor put in one value share nothing after the trip. An
actor updating what it gets in place (an optimizer's step) sees none of it when it reads the
same object again, nor in an object stored later; a ref passed twice is two tensors; each get
of a task's tensor in the driver is a tensor of its own."""
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

    def step(self, w):
        w.add_(1.0)  # in place, as an optimizer's step
        return float(w.min()), float(w.max())

    def read(self, w):
        return float(w.min()), float(w.max())

    def twice(self, a, b):
        a.add_(1.0)
        return float(b.max()), a.data_ptr() == b.data_ptr()


@ray.remote
def make(n):
    return torch.zeros(n)


def in_place_updates():
    n = 1024 * 1024  # 4 MB: shared memory
    trainer = Trainer.remote()
    first = ray.put(torch.zeros(n))
    print("step:", ray.get(trainer.step.remote(first)))
    print("the same object read again:", ray.get(trainer.read.remote(first)))
    print("passed twice:", ray.get(trainer.twice.remote(first, first)))
    del first
    for fill in (5.0, 6.0):  # new objects, after the first is gone
        print("a new object:", ray.get(trainer.read.remote(ray.put(torch.full((n,), fill)))))
    ref = make.remote(n)
    one = ray.get(ref)
    one.add_(3.0)
    two = ray.get(ref)
    print("driver gets of a task's tensor:", float(one.max()), float(two.max()), one.data_ptr() == two.data_ptr())
    one2, two2 = ray.get([ref, ref])
    print("get of [ref, ref]:", one2 is two2, one2.data_ptr() == two2.data_ptr())


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
    in_place_updates()
    print("done")


if __name__ == "__main__":
    main()
