"""ray_adapter.core.pipes: the named pipes of compiled graphs, with real processes and threads.
Opening in any order without blocking, frames with out-of-band buffers (read-only arrays, as
from Ray's object store), values larger than the pipe, the end of a pipe when its writers
close, a frame that cannot be unpickled, nothing left on disk."""
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

from ray_adapter.core import pipes


def _pipe():
    """A reader and a writer of one pipe, its directory already gone."""
    pipe_dir = pipes.PipeDir(["a"])
    ends = pipes.open_reader(pipe_dir.paths["a"]), pipes.open_writer(pipe_dir.paths["a"])
    pipe_dir.release()
    return ends


def test_ends_open_in_any_order_and_the_directory_goes():
    pipe_dir = pipes.PipeDir(["a", "b"])
    assert oct(os.stat(pipe_dir.root).st_mode & 0o777) == "0o700"
    writer = pipes.open_writer(pipe_dir.paths["a"])  # before any reader: does not block
    reader = pipes.open_reader(pipe_dir.paths["a"])
    other_reader = pipes.open_reader(pipe_dir.paths["b"])  # before any writer: does not block
    root = pipe_dir.root
    pipe_dir.release()
    assert not os.path.exists(root)
    writer.write(1, 7, pipes.encode({"x": [1, 2]}))
    assert reader.read() == (1, 7, {"x": [1, 2]})
    writer.close()
    with pytest.raises(pipes.PipeClosed):
        reader.read()
    assert other_reader.wait(0)  # no writer left since the release: end of file at once
    with pytest.raises(pipes.PipeClosed):
        other_reader.read()
    reader.close()
    other_reader.close()


def test_arrays_travel_out_of_band_and_come_back_read_only():
    reader, writer = _pipe()
    array = np.arange(10, dtype=np.int64)
    data, buffers = pipes.encode({"w": array, "n": 3})
    assert len(buffers) == 1 and array.tobytes() not in data
    writer.write(0, 1, (data, buffers))
    _, _, value = reader.read()
    assert value["w"].tolist() == list(range(10)) and not value["w"].flags.writeable
    writer.close()
    reader.close()


def test_a_value_larger_than_the_pipe_while_its_reader_reads():
    reader, writer = _pipe()
    big = np.random.default_rng(0).integers(0, 255, size=3 * pipes.PIPE_BYTES + 17, dtype=np.uint8)
    got = []
    thread = threading.Thread(target=lambda: got.extend(reader.read() for _ in range(3)))
    thread.start()
    for tag in range(3):
        writer.write(0, tag, pipes.encode((tag, big, b"x" * tag)))
    thread.join(60)
    assert [(t, v[0], v[2]) for _, t, v in got] == [(0, 0, b""), (1, 1, b"x"), (2, 2, b"xx")]
    assert all(np.array_equal(v[1], big) for _, _, v in got)
    writer.close()
    reader.close()


class _RaisesOnLoad:
    def __reduce__(self):
        return _fail, ()


def _fail():
    raise RuntimeError("cannot rebuild")


def test_a_frame_that_cannot_be_unpickled_leaves_the_pipe_usable():
    reader, writer = _pipe()
    writer.write(2, 5, (pickle.dumps(_RaisesOnLoad()), []))
    writer.write(1, 6, pipes.encode("next"))
    with pytest.raises(pipes.FrameUndecodable) as info:
        reader.read()
    assert (info.value.kind, info.value.tag) == (2, 5) and "cannot rebuild" in str(info.value.cause)
    assert reader.read() == (1, 6, "next")
    writer.close()
    reader.close()


def test_another_process_sees_the_proof_and_the_end_when_the_writer_dies():
    pipe_dir = pipes.PipeDir(["a"])
    proof = pipe_dir.proof()
    assert pipes.same_machine(proof) and not pipes.same_machine((proof[0], "other"))
    reader = pipes.open_reader(pipe_dir.paths["a"])
    code = ("import os, sys\nfrom ray_adapter.core import pipes\n"
            "assert pipes.same_machine((sys.argv[2], sys.argv[3]))\n"
            "w = pipes.open_writer(sys.argv[1])\nw.write(1, 1, pipes.encode('from child'))\n"
            "print('ready', flush=True)\nsys.stdin.readline()\nos._exit(1)\n")
    child = subprocess.Popen([sys.executable, "-c", code, pipe_dir.paths["a"], *proof],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout.readline() == "ready\n"
    pipe_dir.release()
    assert reader.read() == (1, 1, "from child")
    child.stdin.write("\n")
    child.stdin.flush()
    child.wait(30)
    with pytest.raises(pipes.PipeClosed):
        reader.read()  # the writer's process died: the end, not a hang
    reader.close()


def test_writing_to_a_pipe_whose_reader_closed_says_so():
    reader, writer = _pipe()
    reader.close()
    with pytest.raises(pipes.PipeClosed):
        writer.write(1, 1, pipes.encode(1))
    writer.close()


def test_a_writer_never_blocks_and_keeps_order_when_its_reader_is_busy():
    reader, writer = _pipe()
    big = np.arange(3 * pipes.PIPE_BYTES // 8, dtype=np.int64)
    for tag in range(3):  # 9 MB while nobody reads: queued, copied, the caller goes on
        writer.write(0, tag, pipes.encode(big))
    big[:] = -1  # changed after the write returned: the reader still gets what was written
    writer.write(1, 9, pipes.encode("small, after the big ones"))
    writer.close()  # closes once the queue is written
    got = [reader.read() for _ in range(4)]
    assert [t for _, t, _ in got] == [0, 1, 2, 9]
    assert all(v.tolist() == list(range(big.size)) for _, _, v in got[:3])
    with pytest.raises(pipes.PipeClosed):
        reader.read()
    reader.close()
    assert not [t for t in threading.enumerate() if t.name == "ray-adapter-pipe-writer" and t.is_alive()
                and t.join(10) is None and t.is_alive()]
