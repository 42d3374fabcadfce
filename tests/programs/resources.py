"""Differential test: resources, nodes and runtime context.

Prints only from the driver; output must be deterministic (node ids, ports,
memory sizes and other machine-specific values are never printed).
"""
import time

import ray


def show(label, value):
    print(f"{label}: {value!r}")


def sorted_dict(d):
    # Key order of resource dicts is not stable in Ray: print sorted.
    return dict(sorted(d.items()))


def hex_format(value):
    """Describe an id string without printing it."""
    if value is None:
        return None
    is_hex = all(ch in "0123456789abcdef" for ch in value)
    return (type(value).__name__, len(value), "hex" if is_hex else "not-hex")


ray.init(num_cpus=2, resources={"custom": 4})

# --- cluster / available resources ------------------------------------------
cluster = ray.cluster_resources()
show("cluster_resources type", type(cluster).__name__)
show("cluster_resources keys (node:* collapsed)",
     sorted("node:<ip>" if k.startswith("node:") and k != "node:__internal_head__" else k
            for k in cluster))
show("cluster CPU", cluster["CPU"])
show("cluster custom", cluster["custom"])
show("cluster memory is float > 0", isinstance(cluster["memory"], float) and cluster["memory"] > 0)
show("cluster GPU present", "GPU" in cluster)

avail = ray.available_resources()
show("available CPU at start", avail.get("CPU"))
show("available custom at start", avail.get("custom"))


@ray.remote(num_cpus=1)
class Holder:
    def ping(self):
        return "ok"


@ray.remote(resources={"custom": 3})
class CustomHolder:
    def ping(self):
        return "ok"


def wait_for_available(key, expected, limit=10.0):
    # Resource accounting is reported asynchronously: poll briefly.
    deadline = time.time() + limit
    value = ray.available_resources().get(key)
    while value != expected and time.time() < deadline:
        time.sleep(0.1)
        value = ray.available_resources().get(key)
    return value


h = Holder.remote()
ray.get(h.ping.remote())
show("available CPU with num_cpus=1 actor", wait_for_available("CPU", 1.0))
ray.kill(h)
show("available CPU after kill", wait_for_available("CPU", 2.0))

# A default actor holds 0 CPU while alive, but an actor that names any
# resource (and not num_cpus) holds 1 CPU for its lifetime.
ch = CustomHolder.remote()
ray.get(ch.ping.remote())
show("available custom with custom=3 actor", wait_for_available("custom", 1.0))
show("available CPU with custom=3 actor", wait_for_available("CPU", 1.0))
ray.kill(ch)
show("available custom after kill", wait_for_available("custom", 4.0))
show("available CPU after second kill", wait_for_available("CPU", 2.0))

# Keys whose available amount drops to 0 disappear from available_resources().
h1, h2 = Holder.remote(), Holder.remote()
ray.get([h1.ping.remote(), h2.ping.remote()])
show("available CPU with two num_cpus=1 actors", wait_for_available("CPU", None))
ray.kill(h1)
ray.kill(h2)
show("available CPU after killing both", wait_for_available("CPU", 2.0))

# --- nodes ------------------------------------------------------------------
nodes = ray.nodes()
show("nodes type", type(nodes).__name__)
show("len(nodes)", len(nodes))
node = nodes[0]
show("node keys", sorted(node))
show("node Alive", node["Alive"])
show("node alive", node["alive"])
show("node NodeID format", hex_format(node["NodeID"]))
show("node Resources CPU", node["Resources"]["CPU"])
show("node Resources custom", node["Resources"]["custom"])

# --- runtime context: driver ------------------------------------------------
ctx = ray.get_runtime_context()
show("runtime context type", type(ctx).__name__)
job_id = ctx.get_job_id()
node_id = ctx.get_node_id()
show("driver job_id format", hex_format(job_id))
show("driver node_id format", hex_format(node_id))
show("driver node_id matches nodes()[0]", node_id == node["NodeID"])
show("driver task_id", ctx.get_task_id())
show("driver actor_id", ctx.get_actor_id())
show("driver namespace type", type(ctx.namespace).__name__)
show("driver get_worker_id format", hex_format(ctx.get_worker_id()))


# --- runtime context: task --------------------------------------------------
@ray.remote
def task_context():
    c = ray.get_runtime_context()
    return {
        "job_id": c.get_job_id(),
        "node_id": c.get_node_id(),
        "task_id": c.get_task_id(),
        "actor_id": c.get_actor_id(),
        "assigned": c.get_assigned_resources(),
        "gpu_ids": ray.get_gpu_ids(),
        "task_name": c.get_task_name(),
        "function_name": c.get_task_function_name(),
    }


@ray.remote(num_cpus=2)
def task_two_cpus():
    return ray.get_runtime_context().get_assigned_resources()


@ray.remote(num_cpus=0.5, resources={"custom": 1.5})
def task_fractional():
    return ray.get_runtime_context().get_assigned_resources()


t = ray.get(task_context.remote())
show("task job_id same as driver", t["job_id"] == job_id)
show("task node_id same as driver", t["node_id"] == node_id)
show("task task_id format", hex_format(t["task_id"]))
show("task actor_id", t["actor_id"])
show("task assigned resources (default)", sorted_dict(t["assigned"]))
show("task get_gpu_ids", t["gpu_ids"])
show("task name", t["task_name"])
show("task function name ends with", t["function_name"].rsplit(".", 1)[-1])
show("task assigned resources (num_cpus=2)", sorted_dict(ray.get(task_two_cpus.remote())))
show("task assigned resources (fractional)", sorted_dict(ray.get(task_fractional.remote())))
a, b = ray.get([task_context.remote(), task_context.remote()])
show("two tasks have different task ids", a["task_id"] != b["task_id"])


# --- runtime context: actor -------------------------------------------------
@ray.remote
class Ctx:
    def info(self):
        c = ray.get_runtime_context()
        return {
            "actor_id": c.get_actor_id(),
            "task_id": c.get_task_id(),
            "assigned": c.get_assigned_resources(),
            "gpu_ids": ray.get_gpu_ids(),
            "job_id": c.get_job_id(),
        }


actor = Ctx.remote()
info = ray.get(actor.info.remote())
show("actor actor_id format", hex_format(info["actor_id"]))
show("actor task_id format", hex_format(info["task_id"]))
show("actor assigned resources (default)", sorted_dict(info["assigned"]))
show("actor get_gpu_ids", info["gpu_ids"])
show("actor job_id same as driver", info["job_id"] == job_id)
info2 = ray.get(actor.info.remote())
show("actor id stable across calls", info2["actor_id"] == info["actor_id"])
show("actor task id differs across calls", info2["task_id"] != info["task_id"])


@ray.remote(num_cpus=1)
class CtxOneCpu:
    def assigned(self):
        return ray.get_runtime_context().get_assigned_resources()


show("actor assigned resources (num_cpus=1)", sorted_dict(ray.get(CtxOneCpu.remote().assigned.remote())))

ray.shutdown()
