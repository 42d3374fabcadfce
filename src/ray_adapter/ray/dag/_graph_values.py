"""What a graph's bound arguments and input hold, below every node module (the compiler of
compiled graphs and the actors' loops use it without importing a node class): whether a value
is a DAG node, the nodes inside a value, a graph's nodes in the order they run, and what an
InputNode and its parts stand for in one execution."""

_KEY_ERROR = "Please only use int index or str as first-level key to access fields of dag input."


class DAGInputData:
    """All arguments of one ``execute`` call when there is not exactly one positional one
    (mirrors ``ray.dag.DAGInputData``): ``data[i]`` is a positional, ``data["k"]`` a keyword
    argument."""

    def __init__(self, *args, **kwargs):
        self._args = list(args)
        self._kwargs = kwargs

    def __getitem__(self, key):
        if isinstance(key, int):
            return self._args[key]
        if isinstance(key, str):
            return self._kwargs[key]
        raise ValueError(_KEY_ERROR)


def input_value(user_args, user_kwargs):
    """What an InputNode stands for in an ``execute(*user_args, **user_kwargs)``."""
    if len(user_args) == 1 and not user_kwargs:
        return user_args[0]
    return DAGInputData(*user_args, **user_kwargs)


def attribute_value(value, key, accessor_method):
    """What an InputAttributeNode of ``key`` (``accessor_method``: ``"__getattr__"`` or
    ``"__getitem__"``) stands for when its InputNode stands for ``value``."""
    if isinstance(value, DAGInputData):
        return value[key]
    if isinstance(key, str):
        if accessor_method == "__getattr__":
            return getattr(value, key)
        return value[key]
    if isinstance(key, int):
        return value[key]
    raise ValueError(_KEY_ERROR)


def is_node(value):
    """True for a DAG node (each node class says what the compiler makes of it by its
    ``_compile_role``)."""
    return hasattr(type(value), "_compile_role")


def walk(value, found):
    """Append the DAG nodes inside ``value`` (at any depth of lists/tuples/dicts/sets)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if is_node(item):
            found.append(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(reversed(list(item)))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))


def topological(root):
    """The nodes of the graph ending at ``root``, each once and after the nodes it takes, in
    binding order (an iterative post-order: long chains need no deep recursion)."""
    order, done, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in done:
            continue
        if expanded:
            done.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node._children()) if id(child) not in done)
    return order
